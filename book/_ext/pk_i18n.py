"""The Chinese edition refuses to build with a message it has no Chinese for.

Why in the build: Sphinx shows an untranslated or fuzzy message in English and says nothing, so a changed English
paragraph would slip into the Chinese edition unnoticed.  Once a page is read, this counts the messages Sphinx's
own ``Locale`` transform marked untranslated, and warns once per page with how many and the first of them; the
book builds with ``-W``, so one is an error.  Only the Chinese build loads this (book/editions.py adds it).
"""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging

logger = logging.getLogger(__name__)
ENGLISH_ONLY = ("using/api", "using/commands")  # generated from docstrings and argument parsers: kept in English


def untranslated(app, doctree) -> None:
    """After the page is read: the message nodes Sphinx's ``Locale`` transform found no translation for (it marks
    them ``translated = False``; a fuzzy entry is left out of the compiled catalog, so it counts too) and that
    survived the page's later transforms, that is, that a reader would see in English."""
    language = app.config.language or "en"
    docname = app.env.docname
    if language.startswith("en") or docname in ENGLISH_ONLY:
        return
    missing = [node.astext() for node in doctree.findall(nodes.Element)
               if node.get("translated") is False and not _output(node)]
    if missing:
        logger.warning("%d message(s) of %s have no Chinese (untranslated, or fuzzy after an English edit); the "
                       "first: %r. Run python book/editions.py --update and translate them in "
                       "book/locale/%s/LC_MESSAGES/%s.po", len(missing), docname, missing[0][:120], language, docname,
                       location=docname)


# -- glue in a translated paragraph ------------------------------------------------------------------------------
# Sphinx parses each translation as a small document of its own (sphinx.transforms.i18n.publish_msgstr), and for a
# MyST notebook page myst-nb gives that document an empty notebook, so a {glue:text} role in a translation finds no
# value ("No key ... found in glue data for this document").  The values are the page's: the page's own glue roles
# (the English of every translated one) are read first, while its notebook renderer is on it, so the renderer is
# remembered then and a translation of that page looks its glue up in it -- the same value, computed once, in both
# editions.
_PAGE: dict = {}  # the page being read: its source path -> its notebook renderer


def _page_glue(retrieve):
    def retrieve_glue_data(document, key):
        source = str(document.get("source", ""))
        lent = None
        if source.endswith(":<translated>"):
            lent = _PAGE.get(source.rsplit(":", 2)[0])
        elif "nb_renderer" in document and source not in _PAGE:
            _PAGE.clear()
            _PAGE[source] = document["nb_renderer"]
        if lent is None:
            return _in_the_page_language(document, retrieve(document, key))
        document["nb_renderer"] = lent
        try:
            return _in_the_page_language(document, retrieve(document, key))
        finally:  # (lent for the lookup only: the translation's nodes are pickled with their document)
            del document["nb_renderer"]
    return retrieve_glue_data


_QUOTES = re.compile(r"""^(['"])(.*)\1$""", re.S)


def _in_the_page_language(document, found):
    """A glued value in the page's language: its text and Markdown translated as a whole before they are parsed
    (a sentence with code spans in it fits its template only whole); numbers and other types as they were."""
    page = _page_domains(document)
    if page is None or not isinstance(getattr(found, "data", None), dict):
        return found
    from pipeline_kit.language import translated

    language, domains = page

    def words(text):
        quoted = _QUOTES.match(text) if isinstance(text, str) else None
        if quoted:  # a str's text/plain is its repr
            return quoted.group(1) + translated(quoted.group(2), language, domains=domains) + quoted.group(1)
        return translated(text, language, domains=domains) if isinstance(text, str) else text
    data = {mime: words(value) if mime in ("text/plain", "text/markdown") else value
            for mime, value in found.data.items()}
    return dataclasses.replace(found, data=data) if data != found.data else found


def _glue_from_the_page() -> None:
    from myst_nb.ext.glue import directives, roles
    for module in (roles, directives):
        if not getattr(module.retrieve_glue_data, "_pk_page", False):
            module.retrieve_glue_data = _page_glue(module.retrieve_glue_data)
            module.retrieve_glue_data._pk_page = True


def _output(node) -> bool:
    """Text a code cell printed (the planner's explanation as Markdown, say): the kit's output, computed at build
    time in English, not a message the catalogs could hold."""
    return _within(node, {"cell_output"})


def _within(node, classes: set[str]) -> bool:
    """Whether ``node`` or an element around it has one of ``classes``."""
    return any(classes & set(a.get("classes", ())) for a in _ancestors(node) if isinstance(a, nodes.Element))


def _ancestors(node):
    while node is not None:
        yield node
        node = node.parent


# -- what the code computed, in the page's language ------------------------------------------------------------
# A cell's printed table, a glued phrase inside a sentence, a figure's words: computed once, in English, for both
# editions.  The Chinese edition shows each text of them translated from the kit's catalogs (pipeline_kit/locale:
# the kit's drawing modules and the book's code cells, extracted as the checks' feedback is), where a template fits
# it; code, math and numbers are never touched, and a text no template fits stays as it was computed.
_COMPUTED = {"cell_output", "pasted-text", "output"}
_VERBATIM = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.raw)


class _HTMLWords(HTMLParser):
    """An output's HTML with its words translated (the text between tags, outside code, scripts and styles)."""

    SKIP = {"code", "pre", "script", "style", "kbd", "samp", "math"}

    def __init__(self, translate):
        super().__init__(convert_charrefs=True)  # (a cell's text whole: "1F1B&#x27;s" is one word)
        self.translate, self.out, self.skipping = translate, [], 0

    def handle_starttag(self, tag, attrs):
        self.skipping += tag in self.SKIP
        self.out.append(self.get_starttag_text())

    def handle_startendtag(self, tag, attrs):
        self.out.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        self.skipping -= tag in self.SKIP and self.skipping > 0
        self.out.append(f"</{tag}>")

    def handle_data(self, data):
        if self.cdata_elem is not None:  # a script's or style's text: as it was (the parser unescaped nothing)
            self.out.append(data)
            return
        core = data.strip()
        done = self.translate(core) if core and not self.skipping else core
        self.out.append(html.escape(data.replace(core, done, 1) if done != core else data, quote=False))

    def handle_comment(self, data):
        self.out.append(f"<!--{data}-->")

    def handle_decl(self, decl):
        self.out.append(f"<!{decl}>")


def _page_domains(document):
    """The page's language and its catalogs' domains (None for English) -- from the document being read."""
    env = getattr(document.settings, "env", None)
    language = (env.config.language if env is not None else None) or "en"
    if language.startswith("en") or env is None or env.docname in ENGLISH_ONLY:
        return None
    from pipeline_kit.language import book_domains
    docname = env.docname
    return language, book_domains(docname.rsplit("/", 1)[-1] if docname.startswith("chapters/") else None)


def _markdown_in_the_page_language(render):
    """A Markdown output (a cell's ``display(Markdown(...))``) translated whole, before it is parsed: a sentence with
    code spans in it fits its template only whole."""
    def render_markdown(self, data):
        found = _page_domains(self.renderer.document)
        if found is not None and isinstance(data.string, str):
            from pipeline_kit.language import translated
            done = translated(data.string, found[0], domains=found[1])
            if done != data.string:
                data = dataclasses.replace(data, content=done)
        return render(self, data)
    render_markdown._pk_page = True
    return render_markdown


def computed_words(app, doctree) -> None:
    """The Chinese edition's computed texts in Chinese (see above)."""
    page = _page_domains(doctree)
    if page is None:
        return
    from pipeline_kit.language import translated

    language, domains = page

    def translate(text: str) -> str:
        return translated(text, language, domains=domains) if any(c.isascii() and c.isalpha() for c in text) \
            else text
    for node in list(doctree.findall(nodes.raw)):
        if node.get("format") == "html" and _within(node, _COMPUTED):
            parser = _HTMLWords(translate)
            parser.feed(node.astext())
            parser.close()
            text = "".join(parser.out)
            if text != node.astext() and node.children:
                node.replace(node.children[0], nodes.Text(text))
    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if parent is None or not _within(parent, _COMPUTED) or \
                any(isinstance(a, _VERBATIM) for a in _ancestors(parent)):
            continue
        core = text.astext().strip()
        done = translate(core) if core else core
        if done != core:
            parent.replace(text, nodes.Text(text.astext().replace(core, done, 1)))


def toctree_captions(app, doctree) -> None:
    """The sidebar's part captions (_toc.yml's): sphinx-external-toc adds its toctrees after Sphinx's Locale has run,
    so their captions are translated here, from the root page's catalog, before the toctree collector reads them."""
    language = app.config.language or "en"
    trees = list(doctree.findall(addnodes.toctree))
    if language.startswith("en") or not any(tree.get("caption") for tree in trees):
        return
    from babel.messages.pofile import read_po
    po = Path(app.srcdir, app.config.locale_dirs[0], language, "LC_MESSAGES", f"{app.env.docname}.po")
    if not po.exists():
        return
    with po.open("rb") as fh:
        catalog = {m.id: m.string for m in read_po(fh) if m.id and m.string and not m.fuzzy}
    for tree in trees:
        if tree.get("caption") in catalog:
            tree["caption"] = catalog[tree["caption"]]


def setup(app):
    _glue_from_the_page()
    from myst_nb.core.render import NbElementRenderer
    if not getattr(NbElementRenderer.render_markdown, "_pk_page", False):
        NbElementRenderer.render_markdown = _markdown_in_the_page_language(NbElementRenderer.render_markdown)
    app.connect("doctree-read", toctree_captions, priority=400)  # (the toctree collector listens at 500)
    app.connect("doctree-read", untranslated)
    app.connect("doctree-read", computed_words)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
