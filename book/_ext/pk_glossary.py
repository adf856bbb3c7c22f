"""The glossary from its term list (``book/glossary.yml``): the page renders it, the cards are checked against it.

Why one data file: the glossary page and the interview cards must agree on ONE Chinese term per concept.  The
page's entries -- English headwords, the Chinese term, the sources' other words, an English and a Chinese
definition -- and the cards' rule "never say a discouraged variant" (:func:`avoided`, run by
``book/cards/cards.py``) read the same list, so a term changed in one place changes everywhere.

The page: ``{pk-glossary} glossary.yml`` in a MyST file is Sphinx's own ``glossary`` directive with its content
written from the list, so every entry is a ``{term}`` target as before.  Sphinx is imported only there: the cards'
checks load this module without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Term:
    """One entry: ``en`` headwords (the book's term first), the Chinese term(s) ``zh`` the cards use (one per
    English headword when the entry names several concepts), ``also`` lookup-only headwords, ``avoid`` variants."""

    en: tuple[str, ...]
    zh: tuple[str, ...]
    also: tuple[str, ...]
    avoid: tuple[str, ...]
    definition: dict

    @property
    def headwords(self) -> list[str]:
        out = []
        for word in (*self.en, *self.zh, *self.also):
            if word not in out:
                out.append(word)
        return out


def load_terms(path: Path) -> list[Term]:
    """The list in ``path``; a malformed entry is named with what it lacks."""
    terms = []
    for i, item in enumerate(yaml.safe_load(Path(path).read_text(encoding="utf-8"))):
        where = f"{Path(path).name}: entry {i + 1} ({item.get('en')})"
        en, zh = item.get("en"), item.get("zh")
        if not (isinstance(en, list) and en and all(isinstance(w, str) for w in en)):
            raise ValueError(f"{where}: en must be a list of English headwords")
        zh = [zh] if isinstance(zh, str) else zh
        if not (isinstance(zh, list) and zh and len(zh) in (1, len(en))):
            raise ValueError(f"{where}: zh must be one Chinese term, or one per English headword")
        definition = item.get("def") or {}
        if not (definition.get("en") and definition.get("zh")):
            raise ValueError(f"{where}: def needs en and zh")
        terms.append(Term(tuple(en), tuple(zh), tuple(item.get("also") or ()), tuple(item.get("avoid") or ()),
                          definition))
    return terms


def glossary_lines(terms: list[Term], lang: str | None = None) -> list[str]:
    """The ``glossary`` directive's content: headwords unindented, then the two definitions, indented -- in the
    Chinese edition (``lang`` zh...) the Chinese one alone, the list's own, so no translation repeats it."""
    lines = []
    for term in terms:
        lines += term.headwords
        if not (lang or "").startswith("zh"):
            lines.append("  " + " ".join(term.definition["en"].split()))
            lines.append("")
        zh = tidy_zh(term.definition["zh"])
        if term.avoid:
            zh += f"卡片统一用“{'”“'.join(term.zh)}”，不用“{'”“'.join(term.avoid)}”。"
        lines.append("  " + zh)
        lines.append("")
    return lines


_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"  # Han, CJK and full-width punctuation
_PUNCT = "，。；：、！？（）“”"
_FOLD = re.compile(rf"(?<=[{_CJK}])\s+(?=[{_CJK}])|\s+(?=[{_PUNCT}])|(?<=[{_PUNCT}])\s+")


def tidy_zh(text: str) -> str:
    """Chinese folded over YAML lines: the fold leaves a space between two Chinese characters, or next to Chinese
    punctuation, where Chinese has none.  A space between Chinese and Latin text stays (``stage 等长``)."""
    return _FOLD.sub("", " ".join(text.split()))


_CODE = re.compile(r"`[^`]*`")
_GLOSS = re.compile(r"（[\x00-\x7f]+）")  # an English gloss after a Chinese term: 调度（schedule）


def avoided(text: str, terms: list[Term]) -> list[tuple[str, str]]:
    """``(variant, the term to use)`` for each discouraged variant ``text`` uses.

    Not counted: names in backquotes, an English gloss in full-width brackets, and a variant inside a longer
    Chinese term of the list (缓冲 inside 缓冲区).  English variants match whole words, in any case."""
    text = _GLOSS.sub(" ", _CODE.sub(" ", text))
    preferred = [(m.start(), m.end()) for t in terms for zh in t.zh for m in re.finditer(re.escape(zh), text)]
    found = []
    for term in terms:
        for variant in term.avoid:
            if variant.isascii():
                pattern = re.compile(rf"(?<![\w-]){re.escape(variant)}(?![\w-])", re.I)
            else:
                pattern = re.compile(re.escape(variant))
            for m in pattern.finditer(text):
                if not any(a <= m.start() and m.end() <= b and (a, b) != (m.start(), m.end()) for a, b in preferred):
                    found.append((m.group(0), "/".join(term.zh)))
    return found


def setup(app):
    from docutils.statemachine import StringList
    from sphinx.domains.std import Glossary

    class TermListGlossary(Glossary):
        """``{pk-glossary} FILE``: Sphinx's glossary, its content written from the term list FILE."""

        has_content = False
        required_arguments = 1

        def run(self):
            rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
            self.env.note_dependency(rel)
            self.content = StringList(glossary_lines(load_terms(Path(path)), self.env.config.language), source=rel)
            return super().run()

    app.add_directive("pk-glossary", TermListGlossary)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
