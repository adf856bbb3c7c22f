"""The Chinese edition refuses to build with a message it has no Chinese for.

Why in the build: Sphinx shows an untranslated or fuzzy message in English and says nothing, so a changed English
paragraph would slip into the Chinese edition unnoticed.  Once a page is read, this counts the messages Sphinx's
own ``Locale`` transform marked untranslated, and warns once per page with how many and the first of them; the
book builds with ``-W``, so one is an error.  Only the Chinese build loads this (book/editions.py adds it).
"""

from __future__ import annotations

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
            return retrieve(document, key)
        document["nb_renderer"] = lent
        try:
            return retrieve(document, key)
        finally:  # (lent for the lookup only: the translation's nodes are pickled with their document)
            del document["nb_renderer"]
    return retrieve_glue_data


def _glue_from_the_page() -> None:
    from myst_nb.ext.glue import directives, roles
    for module in (roles, directives):
        if not getattr(module.retrieve_glue_data, "_pk_page", False):
            module.retrieve_glue_data = _page_glue(module.retrieve_glue_data)
            module.retrieve_glue_data._pk_page = True


def _output(node) -> bool:
    """Text a code cell printed (the planner's explanation as Markdown, say): the kit's output, computed at build
    time in English, not a message the catalogs could hold."""
    while node is not None:
        if "cell_output" in node.get("classes", ()):
            return True
        node = node.parent
    return False


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
    app.connect("doctree-read", toctree_captions, priority=400)  # (the toctree collector listens at 500)
    app.connect("doctree-read", untranslated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
