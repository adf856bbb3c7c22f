"""Interview cards: one per question (M041-M054 and the zero-bubble extension), in English and Chinese.

Why data files and not prose in the chapters: a card is rehearsed on its own, in either language, and it is
checked -- the 30-second answer's budget as SPOKEN (``speech.py``: 135 Chinese syllables at 4.5 a second, 75
English words at 150 a minute, numbers, acronyms and formulas counted as they are said), the rubric's points (10
for the main question, 5 for the follow-up, as the interview question bank scores them), every number computed by
``pipeline_kit`` when the book builds.  ``mNNN.yml`` holds a card's words, ``mNNN.py`` its numbers
(``numbers() -> dict``); the answer and the notes name a number as ``{key}`` or ``{key:format}``.

Check every card without building the book: ``python book/cards/cards.py`` (exit 1 with the problems).
"""

from __future__ import annotations

import importlib.util
import re
import string
import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ORDER = tuple(f"m{n:03d}" for n in range(41, 55)) + ("zbv",)
PARTS = {"main": 10, "follow": 5}
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _module(name: str, path: Path):
    """A module of this folder, loaded by path: cards.py is itself loaded by path (tests) or from sys.path (book)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (a dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


speech = _module("pk_card_speech", HERE / "speech.py")
glossary = _module("pk_card_glossary", HERE.parent / "_ext" / "pk_glossary.py")
TERMS = glossary.load_terms(HERE.parent / "glossary.yml")
MAX_WORDS, MAX_SYLLABLES = speech.MAX_EN_WORDS, speech.MAX_ZH_SYLLABLES
spoken = speech.spoken


@dataclass
class Card:
    question: str
    data: dict
    values: dict

    def text(self, field: str, lang: str) -> str:
        """A text of the card (``title``, ``answer``) with its numbers filled in."""
        return tidy(fill(self.data[field][lang], self.values, f"{self.question} {field}.{lang}"), lang)


def tidy(text: str, lang: str) -> str:
    """Chinese text folded over several YAML lines loses the spaces the fold put between its characters."""
    return glossary.tidy_zh(text) if lang == "zh" else text


def fill(text: str, values: dict, what: str) -> str:
    out = []
    for literal, key, spec, _ in string.Formatter().parse(text):
        out.append(literal)
        if key is None:
            continue
        if key not in values:
            raise KeyError(f"{what}: {{{key}}} is not one of the card's numbers ({', '.join(sorted(values))})")
        out.append(format(values[key], spec or ""))
    return "".join(out)


def han(text: str) -> int:
    """Chinese characters: whether a text is Chinese at all (its length is :func:`spoken`'s)."""
    return len(CJK.findall(text))


def _numbers(question: str) -> dict:
    return dict(_module(f"pk_card_{question}", HERE / f"{question}.py").numbers())


def load(question: str) -> Card:
    data = yaml.safe_load((HERE / f"{question}.yml").read_text(encoding="utf-8"))
    return Card(question, data, _numbers(question))


def zh_texts(card: Card):
    """``(where, text)`` for every Chinese text of a card, its numbers filled in: what a reader sees in 中文."""
    d, q = card.data, card.question
    for field in ("title", "answer"):
        yield f"{field}.zh", card.text(field, "zh")
    for i, item in enumerate(d.get("rubric") or []):
        yield f"rubric[{i}].zh", fill(item["zh"], card.values, q)
        if item.get("note"):
            yield f"rubric[{i}].note.zh", fill(item["note"]["zh"], card.values, q)
    for kind in ("numbers", "links"):
        for i, item in enumerate(d.get(kind) or []):
            yield f"{kind}[{i}].zh", item["zh"]


def wording_problems(card: Card) -> list[str]:
    """Chinese variants the glossary's term list says the cards avoid (one Chinese term per concept)."""
    return [f"{card.question}: {where} says {variant!r}; the glossary's term is {term!r}"
            for where, text in zh_texts(card) for variant, term in glossary.avoided(text, TERMS)]


def problems(card: Card, labels: set[str] | None = None) -> list[str]:
    """What is wrong with a card: missing fields, budgets, points, numbers, links, wording."""
    q, d, out = card.question, card.data, []
    for field in ("title", "answer"):
        for lang in ("en", "zh"):
            if not isinstance(d.get(field), dict) or not d[field].get(lang):
                out.append(f"{q}: {field}.{lang} is missing")
    if out:
        return out
    en, zh = card.text("answer", "en"), card.text("answer", "zh")
    if spoken(en, "en") > MAX_WORDS:
        out.append(f"{q}: the English answer takes {spoken(en, 'en')} spoken words (at most {MAX_WORDS})")
    if spoken(zh, "zh") > MAX_SYLLABLES:
        out.append(f"{q}: the Chinese answer takes {spoken(zh, 'zh')} spoken syllables (at most {MAX_SYLLABLES})")
    if han(card.text("title", "zh")) == 0:
        out.append(f"{q}: title.zh has no Chinese")
    totals = {"main": 0.0, "follow": 0.0}
    for i, item in enumerate(d.get("rubric") or []):
        part = item.get("part")
        if part not in totals or not isinstance(item.get("points"), (int, float)):
            out.append(f"{q}: rubric[{i}] needs part main|follow and points")
            continue
        totals[part] += item["points"]
        for lang in ("en", "zh"):
            if not item.get(lang):
                out.append(f"{q}: rubric[{i}].{lang} is missing")
            else:
                fill(item[lang], card.values, f"{q} rubric[{i}].{lang}")  # its numbers exist, as the card fills them
        note = item.get("note")
        if note is not None:
            for lang in ("en", "zh"):
                if not note.get(lang):
                    out.append(f"{q}: rubric[{i}].note.{lang} is missing")
                else:
                    fill(note[lang], card.values, f"{q} rubric[{i}].note.{lang}")  # its numbers exist
    for part, want in PARTS.items():
        if totals[part] != want:
            out.append(f"{q}: the {part} rubric points add up to {totals[part]:g}, not {want}")
    for i, n in enumerate(d.get("numbers") or []):
        if n.get("key") not in card.values:
            out.append(f"{q}: numbers[{i}].key {n.get('key')!r} is not computed by {q}.py")
        elif not (n.get("en") and n.get("zh")):
            out.append(f"{q}: numbers[{i}] needs en and zh labels")
        else:
            format(card.values[n["key"]], n.get("format", ""))
    if not d.get("numbers"):
        out.append(f"{q}: no numbers to remember")
    for i, link in enumerate(d.get("links") or []):
        if labels is not None and link.get("target") not in labels:
            out.append(f"{q}: links[{i}].target {link.get('target')!r} is not a label of the book")
        if not (link.get("en") and link.get("zh")):
            out.append(f"{q}: links[{i}] needs en and zh texts")
    if not d.get("links"):
        out.append(f"{q}: no links into the chapter")
    return out + wording_problems(card)


def book_labels() -> dict[str, str]:
    """The MyST labels ``(name)=`` the book defines, each with its page (``chapters/bubble``)."""
    found = {}
    for path in sorted(HERE.parent.rglob("*.md")):
        if "_build" in path.parts:
            continue
        page = path.relative_to(HERE.parent).with_suffix("").as_posix()
        for label in re.findall(r"^\(([\w-]+)\)=\s*$", path.read_text(encoding="utf-8"), re.M):
            found[label] = page
    return found


# -- rendering ---------------------------------------------------------------------------------------------------

LANGS = {"en": ("English", "en"), "zh": ("中文", "zh-Hans")}
WORDING = {
    "en": {"card": "30-second card", "answer": "In 30 seconds", "rubric": "What earns the points",
           "main": "main question", "follow": "follow-up", "numbers": "Numbers to remember", "more": "Read more",
           "note": "The book's view", "colon": ": "},
    "zh": {"card": "30 秒卡片", "answer": "30 秒回答", "rubric": "得分点", "main": "主问题", "follow": "追问",
           "numbers": "要记住的数字", "more": "延伸阅读", "note": "本书的看法", "colon": "："},  # full-width, no space
}


def _label(question: str) -> str:
    return "ZBV" if question == "zbv" else question.upper()


def _inline(text: str) -> str:
    """A card's text as HTML: escaped, and `name` in backquotes shown as code (the YAML writes names as the book's
    Markdown does; a card is HTML, so nothing else would turn them into code)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _side(card: Card, lang: str, base: str, labels: dict) -> str:
    d, w = card.data, WORDING[lang]
    rows = []
    for part in ("main", "follow"):
        items = [i for i in d["rubric"] if i["part"] == part]
        rows.append(f'<tr class="pk-card-part"><th colspan="2">{escape(w[part])}</th>'
                    f'<th class="pk-card-pts">{sum(i["points"] for i in items):g}</th></tr>')
        for item in items:
            note = item.get("note")
            shown = (f'<div class="pk-card-note"><b>{escape(w["note"])}{w["colon"]}</b>'
                     f'{_inline(tidy(fill(note[lang], card.values, card.question), lang))}</div>' if note else "")
            text = fill(item[lang], card.values, card.question)
            rows.append(f'<tr><td class="pk-card-box">☐</td><td>{_inline(tidy(text, lang))}{shown}</td>'
                        f'<td class="pk-card-pts">{item["points"]:g}</td></tr>')
    numbers = "".join(f'<li>{_inline(tidy(n[lang], lang))}{w["colon"]}'
                      f'<b>{escape(format(card.values[n["key"]], n.get("format", "")))}</b></li>' for n in d["numbers"])
    links = " · ".join(f'<a href="{_href(base, labels, k["target"])}">{_inline(k[lang])}</a>' for k in d["links"])
    name, code = LANGS[lang]
    return (f'<div class="pk-card-side" lang="{code}">'
            f'<p class="pk-card-kicker">{_label(card.question)} · {escape(w["card"])}</p>'
            f'<p class="pk-card-title">{_inline(card.text("title", lang))}</p>'
            f'<p class="pk-card-head">{escape(w["answer"])}</p>'
            f'<blockquote class="pk-card-answer">{_inline(card.text("answer", lang))}</blockquote>'
            f'<p class="pk-card-head">{escape(w["rubric"])}</p><table class="pk-card-rubric">{"".join(rows)}</table>'
            f'<p class="pk-card-head">{escape(w["numbers"])}</p><ul class="pk-card-numbers">{numbers}</ul>'
            f'<p class="pk-card-more">{escape(w["more"])}{w["colon"]}{links}</p></div>')


def _href(base: str, labels: dict, label: str) -> str:
    return f"{base}{labels[label]}.html#{label}"


def card_html(card: Card, base: str, labels: dict) -> str:
    """One card, both languages in the page; the two radio buttons show one or the other (no script needed), and
    _static/pk-lang.js makes them the book's one language switch.  Each button's name is in its own language."""
    q = card.question
    toggles = "".join(f'<input type="radio" class="pk-card-{lang}" name="pk-card-{q}" id="pk-card-{q}-{lang}"'
                      f'{" checked" if lang == "en" else ""}><label for="pk-card-{q}-{lang}" lang="{LANGS[lang][1]}">'
                      f'{LANGS[lang][0]}</label>'
                      for lang in LANGS)
    return (f'<div class="pk-card" id="card-{q}" data-question="{q}">{toggles}'
            + "".join(_side(card, lang, base, labels) for lang in LANGS) + "</div>")


def show(*questions: str, base: str = "../"):
    """The cards of ``questions`` as a cell's output (``base``: the path from the page to the book's root)."""
    from IPython.display import HTML
    labels = book_labels()
    return HTML("".join(card_html(load(q), base, labels) for q in questions))


def main() -> int:
    labels = book_labels()
    bad = []
    for q in ORDER:
        if not (HERE / f"{q}.yml").exists():
            bad.append(f"{q}: no card yet")
            continue
        try:
            card = load(q)
            bad += problems(card, labels)
            en, zh = card.text("answer", "en"), card.text("answer", "zh")
            print(f"{q}: {spoken(en, 'en')} words ({speech.seconds(en, 'en'):.0f} s), "
                  f"{spoken(zh, 'zh')} syllables ({speech.seconds(zh, 'zh'):.0f} s)")
        except Exception as exc:  # noqa: BLE001 -- a card that cannot be read: say which and why
            bad.append(f"{q}: {type(exc).__name__}: {exc}")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
