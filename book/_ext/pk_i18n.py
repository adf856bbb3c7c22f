"""The Chinese edition refuses to build with a message it has no Chinese for.

Why in the build: Sphinx shows an untranslated or fuzzy message in English and says nothing, so a changed English
paragraph would slip into the Chinese edition unnoticed.  This transform reads every page's messages exactly as
Sphinx's own ``Locale`` transform is about to look them up (it runs just before it), and warns once per page with
how many have no usable translation and the first of them; the book builds with ``-W``, so one is an error, and
book/editions.py says how to fix it.  Only the Chinese build loads this (book/editions.py adds it).
"""

from __future__ import annotations

from pathlib import Path

from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.nodes import extract_messages

logger = logging.getLogger(__name__)
ENGLISH_ONLY = ("using/api", "using/commands")  # generated from docstrings and argument parsers: kept in English


def _catalog(env, docname: str) -> dict[str, str]:
    """``msgid -> msgstr`` of the page's catalog, fuzzy entries left out (as Sphinx leaves them out of the .mo)."""
    cache = env.app.__dict__.setdefault("_pk_catalogs", {})
    if docname not in cache:
        from babel.messages.pofile import read_po
        found = {}
        for folder in env.config.locale_dirs:
            po = Path(env.srcdir, folder, env.config.language, "LC_MESSAGES", f"{docname}.po")
            if po.exists():
                with po.open(encoding="utf-8") as fh:
                    found = {m.id: m.string for m in read_po(fh) if m.id and m.string and not m.fuzzy}
                break
        cache[docname] = found
    return cache[docname]


class UntranslatedMessages(SphinxTransform):
    default_priority = 19  # sphinx.transforms.i18n.Locale is 20: the messages as it will look them up

    def apply(self, **kwargs) -> None:
        language = self.config.language or "en"
        if language.startswith("en") or self.env.docname in ENGLISH_ONLY:
            return
        catalog = _catalog(self.env, self.env.docname)
        missing = [msg for _, msg in extract_messages(self.document) if not catalog.get(msg, "").strip()]
        if missing:
            logger.warning("%d message(s) of %s have no Chinese (untranslated, or fuzzy after an English edit); the "
                           "first: %r. Run python book/editions.py --update and translate them in "
                           "book/locale/%s/LC_MESSAGES/%s.po", len(missing), self.env.docname, missing[0][:120],
                           language, self.env.docname, location=self.env.docname)


def setup(app):
    app.add_transform(UntranslatedMessages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
