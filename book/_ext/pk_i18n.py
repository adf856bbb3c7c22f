"""The Chinese edition refuses to build with a message it has no Chinese for.

Why in the build: Sphinx shows an untranslated or fuzzy message in English and says nothing, so a changed English
paragraph would slip into the Chinese edition unnoticed.  Once a page is read, this counts the messages Sphinx's
own ``Locale`` transform marked untranslated, and warns once per page with how many and the first of them; the book builds with ``-W``, so one is an error, and
book/editions.py says how to fix it.  Only the Chinese build loads this (book/editions.py adds it).
"""

from __future__ import annotations

from docutils import nodes
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
    missing = [node.astext() for node in doctree.findall(nodes.Element) if node.get("translated") is False]
    if missing:
        logger.warning("%d message(s) of %s have no Chinese (untranslated, or fuzzy after an English edit); the "
                       "first: %r. Run python book/editions.py --update and translate them in "
                       "book/locale/%s/LC_MESSAGES/%s.po", len(missing), docname, missing[0][:120], language, docname,
                       location=docname)


def setup(app):
    app.connect("doctree-read", untranslated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
