"""A figure in each of the book's languages, from one execution: the English drawing, and the same drawing with
its words in Chinese, side by side in the cell's output; each edition of the book shows its own.

Why both from one run: the book's two editions share one execution of every notebook (``book/editions.py``), so
every number in a figure is computed once and is the same in both; only the words differ.  A figure's words are
translated as the checks' feedback is (:mod:`pipeline_kit.language`): each text of the drawing -- title,
axis labels, legend, annotations -- is matched against the catalogs' templates (the kit's drawing modules and the
book's code cells are extracted into ``pipeline_kit/locale``), drawn in Noto Sans CJK SC (:mod:`.cjk_font`), and put
back.  Where this machine has no Chinese font, the Chinese edition shows the English drawing rather than boxes.

In the book, :func:`show_both_editions` (the chapters' first, hidden cell) makes IPython show every figure as
this pair; the page's language (``html[lang]``, ``pk-book.css``) hides the other one.
"""

from __future__ import annotations

import base64
import re
from contextlib import contextmanager
from functools import lru_cache
from html import escape

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FuncFormatter

from ..language import book_domains, catalog, english_words, translated
from .cjk_font import matplotlib_family
from .figure import FigureTuple, KitAxes, png_bytes

_HAN = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
_CLOSING = re.compile(r"[，。、；：？！）」』”》]")
_TOKEN = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]|[^\s\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+|\s+")
# two English words in a row: "bank-pp8" is a name, "gpipe pp=8" a label
_ENGLISH = re.compile(r"(?<![\w-])[A-Za-z]{2,}(?: [A-Za-z]{2,})+(?![\w=-])")


def _texts(fig: Figure) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_text().strip()]


@lru_cache(maxsize=None)
def _chinese_characters(page: str | None) -> str:
    return "".join(sorted({c for t in catalog("zh_CN", book_domains(page)) for c in t.msgstr if _HAN.match(c)}))


def _wrapped(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` columns, a Han character counting two; a line breaks at a space or
    between two Han characters, never inside a Latin word or a number."""
    lines, line, cols = [], "", 0
    for token in _TOKEN.findall(text):
        size = sum(2 if _HAN.match(c) else 1 for c in token)
        if token.isspace():
            token, size = " ", 1
        if cols + size > width and line.strip() and not _CLOSING.match(token):  # (never a line that opens with
            # a closing mark: "，" and "）" stay with what they close)
            lines.append(line.rstrip())
            line, cols = ("", 0) if token == " " else (token, size)
            continue
        line, cols = line + token, cols + size
    return "\n".join([*lines, line.rstrip()] if line.strip() else lines)


def _in_language(words: str, lang: str, page: str | None) -> str:
    """One text of a drawing in ``lang``: as a message, or -- a label the drawing wrapped -- its lines joined into
    one message and wrapped again, whichever leaves fewer English words."""
    new = translated(words, lang, domains=book_domains(page))
    if "\n" in words:
        joined = " ".join(words.split())
        found = translated(joined, lang, domains=book_domains(page))
        if found != joined:
            wrapped = _wrapped(found, max(map(len, words.split("\n"))))
            new = min((new, wrapped), key=english_words)
    return new


def _speaking(formatter, lang: str, page: str | None, left: list[str]):
    """``formatter``'s tick labels in ``lang`` (a named tick, ``set_yticks(..., names)``; a number stays a number),
    each English one left noted in ``left``."""
    def label(x, pos=None):
        words = formatter(x, pos)
        if not any(c.isalpha() for c in words):
            return words
        done = _in_language(words, lang, page)
        left.extend(w for w in _ENGLISH.findall(done) if w not in left)
        return done
    return label


@contextmanager
def drawn_in(fig: Figure, lang: str, page: str | None = None):
    """``fig`` with its words in ``lang`` inside the block (and as it was after it), from the catalogs of the book's
    ``page`` (its code cells') and the kit's drawing modules; yields the texts that stay English (two English words
    or more in a row, once translated), for a check that none do.  Tick labels a drawing named (``set_yticks(...,
    names)``) are its formatter's: they are translated there, drawn in the same font."""
    texts = _texts(fig)
    before = [(t, t.get_text(), t.get_fontfamily()) for t in texts]
    formatters = [(axis, axis.get_major_formatter()) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                  if isinstance(axis.get_major_formatter(), (FuncFormatter, FixedFormatter))]  # (named ticks)
    left: list[str] = []
    family = None  # (set before the try: the finally reads it whatever fails)
    try:
        family = matplotlib_family(_chinese_characters(page)) if lang != "en" else None
        for text, words, fonts in before:
            if "monospace" in fonts:
                continue  # code drawn in a figure: as it is written
            new = _in_language(words, lang, page)
            if family is not None and _HAN.search(new):
                text.set_text(new)
                text.set_fontfamily([family, *fonts])
            left += _ENGLISH.findall(re.sub(r"\$[^$]*\$", " ", text.get_text()))
        if family is not None:
            for axis, fmt in formatters:
                axis.set_major_formatter(FuncFormatter(_speaking(fmt, lang, page, left)))
                axis.set_tick_params(labelfontfamily=[family, *mpl.rcParams["font.family"]])
        yield left
    finally:
        for text, words, fonts in before:
            text.set_text(words)
            text.set_fontfamily(fonts)
        if family is not None:
            for axis, fmt in formatters:
                axis.set_major_formatter(fmt)
                axis.set_tick_params(labelfontfamily=mpl.rcParams["font.family"])


def both_editions_html(fig: Figure, page: str | None = None) -> str:
    """The figure as two ``<img>``, English and Chinese (``class="pk-figure-en"`` / ``"pk-figure-zh"``); a Chinese
    drawing that kept English words says which (``data-untranslated``), for the book's tests."""
    english = png_bytes(fig)
    with drawn_in(fig, "zh_CN", page) as left:
        chinese = png_bytes(fig)
    untranslated = escape("|".join(sorted(set(left))), quote=True)
    return "".join(
        f'<img class="pk-figure-{tag}" alt="" src="data:image/png;base64,{base64.b64encode(png).decode()}"'
        f'{extra}>' for tag, png, extra in (("en", english, ""),
                                            ("zh", chinese, f' data-untranslated="{untranslated}"' if left else "")))


def show_both_editions(page: str | None = None, shell=None) -> bool:
    """Make IPython show every figure as :func:`both_editions_html` (a book chapter's first cell calls this with its
    name: ``show_both_editions("bubble")``)."""
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    if shell is None:
        return False
    html = shell.display_formatter.formatters["text/html"]
    html.for_type(Figure, lambda fig: both_editions_html(fig, page))
    html.for_type(KitAxes, lambda ax: both_editions_html(ax.figure, page))
    html.for_type(FigureTuple, lambda pair: both_editions_html(pair[0], page) if isinstance(pair[0], Figure) else None)
    return True
