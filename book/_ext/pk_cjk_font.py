"""The book's Chinese renders on any machine: a subset of Noto Sans CJK SC is made at build time and shipped.

Why: the interview cards, the glossary and the question index are half Chinese, and a reader whose system has
no CJK font (many Linux installs, fresh containers) saw boxes.  The book ships Noto Sans CJK SC (SIL Open Font
License 1.1, from Debian's ``fonts-noto-cjk``), cut down to exactly the characters its pages show in Chinese
plus the common CJK punctuation: about 120 KB a weight instead of 19 MB.  The CSS (``_static/pk-book.css``)
puts it first in the stack of everything written in Chinese, so “ ” —— · × inside a Chinese line take the CJK
font's glyphs too, not a Latin font's.  Why Debian's package: it is maintained and versioned with the
distribution, installs with apt here and in CI, and puts the fonts at one known path; the PyPI wheels that carry
Noto CJK are one-off 0.0.x packages.  The subset keeps the font's copyright and licence records, and the licence
file is written beside it (the OFL's condition 2); its name holds no Reserved Font Name ("Source").

The steps, in Sphinx's order:

* ``builder-inited``: find the source font, or stop the build at once saying what to install.  It fails rather
  than warns: a book built without the font shows boxes to exactly the readers this is for, and a warning
  scrolls past unseen in a two-minute build log.  ``PIPELINE_KIT_CJK_FONT_DIR`` names another folder that
  holds ``NotoSansCJK-Regular.ttc`` and ``NotoSansCJK-Bold.ttc`` (a machine without root, say).
* ``doctree-resolved``: Chinese written in the Markdown (glossary terms, the question index, a paragraph) is
  marked ``lang="zh-Hans"`` (a ``language-zh-Hans`` class, which docutils writes as the attribute), so the CSS
  can give it the CJK-first stack.  The cards mark their Chinese side themselves (book/cards/cards.py).
* ``build-finished``: read the pages as written, collect the characters they show in Chinese, and write the
  Regular and Bold subsets (woff2) with the licence into ``_static/fonts``.  When neither the characters nor
  the source font changed, the previous subsets are kept: the step costs about 2 s of CPU in a two-minute
  build, 0.3 s when the subsets are kept.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path

from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.util import logging

from pipeline_kit.viz import cjk_font
from pipeline_kit.viz.cjk_font import FONT_DIR_ENV

logger = logging.getLogger(__name__)

FACES = {"Regular": 400, "Bold": 700}  # style -> CSS font-weight (pk-book.css's @font-face rules name these files)
OUT_DIR = "_static/fonts"
LICENCE = "NotoSansCJK-LICENSE.txt"
MANIFEST = "pk-cjk-font.json"

HAN = "\u2e80-\u2fdf\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_MARKS = "\u3000-\u303f\uff00-\uffef"  # CJK punctuation, full-width forms
SHARED = "“”‘’—…·×"  # punctuation Chinese shares with English: Chinese where it touches Chinese
# Shipped whatever the pages hold today, so a new sentence's punctuation never falls back to a Latin font.
CJK_PUNCTUATION = "，。、；：？！（）《》〈〉【】「」『』“”‘’—…·～　"
_CJK_CHAR = re.compile(f"[{HAN}{CJK_MARKS}]")
_CHUNK = re.compile(f"[{SHARED}]*[{HAN}{CJK_MARKS}][{HAN}{CJK_MARKS}{SHARED}]*")
_LATIN_WORD = re.compile(r"[A-Za-z][\w.'/+-]*")
# "布局（Custom Pipeline Layout）解决" is one Chinese run; an English clause between two Chinese words is not.
MAX_LATIN_WORDS = 3
# Horizontal text only: kerning, marks, and the half-width punctuation forms Chromium's text-spacing-trim uses;
# no vertical forms and no Japanese, Korean or Traditional alternates (locl), which would double the glyphs.
LAYOUT_FEATURES = ["ccmp", "kern", "liga", "mark", "mkmk", "halt", "chws"]
SUBSET_VERSION = 1  # bump when the subsetting options change, so kept subsets are made again


def source_fonts() -> dict[str, Path]:
    """The Noto Sans CJK collections (style -> path), or an ExtensionError that says what to install."""
    found = cjk_font.source_fonts()
    if found is not None:
        return found
    looked = ", ".join(str(f) for f in cjk_font.font_folders())
    raise ExtensionError(
        f"pk_cjk_font: the book's Chinese webfont is cut from Noto Sans CJK SC, and NotoSansCJK-Regular.ttc and "
        f"NotoSansCJK-Bold.ttc are not in {looked}. Install Debian's fonts-noto-cjk (apt-get install "
        f"fonts-noto-cjk), or set {FONT_DIR_ENV} to a folder that holds both files.")


# -- marking the Chinese of the Markdown ------------------------------------------------------------------------

def chinese_runs(text: str) -> list[tuple[int, int]]:
    """The (start, end) spans of ``text`` written in Chinese: from a CJK character to the last one after it, over
    Latin stretches of at most MAX_LATIN_WORDS words ("GPipe 与 1F1B 的主要区别是什么？" is Chinese from 与 on),
    taking in “ ” — · × where they touch Chinese."""
    runs: list[tuple[int, int]] = []
    for m in _CHUNK.finditer(text):
        if runs and len(_LATIN_WORD.findall(text[runs[-1][1]:m.start()])) <= MAX_LATIN_WORDS:
            runs[-1] = (runs[-1][0], m.end())
        else:
            runs.append((m.start(), m.end()))
    return runs


def _marked_or_verbatim(node: nodes.Node) -> bool:
    """Inside code, math or raw HTML (left as written), or already marked as Chinese."""
    while node is not None:
        if isinstance(node, (nodes.FixedTextElement, nodes.literal, nodes.raw, nodes.math, nodes.comment)):
            return True
        if isinstance(node, nodes.Element) and any(c.startswith("language-zh") for c in node.get("classes", ())):
            return True
        node = node.parent
    return False


def mark_chinese(app, doctree: nodes.document, docname: str) -> None:
    """Wrap each Chinese run of the page's text in an inline that the HTML writer gives ``lang="zh-Hans"``."""
    for text in list(doctree.findall(nodes.Text)):
        source = str(text)
        runs = chinese_runs(source) if _CJK_CHAR.search(source) else []
        if not runs or _marked_or_verbatim(text.parent):
            continue
        pieces, at = [], 0
        for start, end in runs:
            if start > at:
                pieces.append(nodes.Text(source[at:start]))
            pieces.append(nodes.inline(source[start:end], source[start:end], classes=["language-zh-Hans"]))
            at = end
        if at < len(source):
            pieces.append(nodes.Text(source[at:]))
        text.parent.replace(text, pieces)


# -- the characters the written pages show in Chinese -----------------------------------------------------------

class ChineseText(HTMLParser):
    """Collects every character shown inside an element in Chinese (``lang="zh…"``), and every CJK character
    shown anywhere (an unmarked one -- a letter heading of the general index -- is drawn from the webfont too,
    the last fallback of the Latin stack)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
    HIDDEN = {"script", "style", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []  # the open elements
        self.chinese: list[bool] = []  # whether each is in Chinese
        self.chars: set[str] = set()

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        lang = dict(attrs).get("lang")
        self.chinese.append(lang.lower().startswith("zh") if lang is not None else bool(self.chinese)
                            and self.chinese[-1])
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if tag in self.tags:
            while self.tags.pop() != tag:
                self.chinese.pop()
            self.chinese.pop()

    def handle_data(self, data):
        if not self.tags or self.tags[-1] in self.HIDDEN:
            return
        if self.chinese[-1]:
            self.chars.update(data)
        else:
            self.chars.update(_CJK_CHAR.findall(data))


def characters_shown(outdir: Path) -> set[str]:
    chars = set()
    for page in outdir.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        if 'lang="zh' in html or _CJK_CHAR.search(html):  # (most reference pages have none: not parsed)
            parser = ChineseText()
            parser.feed(html)
            chars |= parser.chars
    return {c for c in chars if c.isprintable()} | set(CJK_PUNCTUATION)  # (less line breaks and tabs)


# -- the subsets ------------------------------------------------------------------------------------------------

def _face_index(path: Path) -> int:
    try:
        return cjk_font.face_index(path)
    except ValueError as exc:
        raise ExtensionError(f"pk_cjk_font: {exc}") from None


def subset_file(style: str) -> str:
    return f"NotoSansCJKsc-{style}.subset.woff2"


def write_subset(source: Path, chars: set[str], target: Path) -> dict[int, str]:
    """Subset ``source``'s SC face to ``chars`` as woff2 (needs brotli); return its copyright, version and
    trademark records (name IDs 0, 5, 7) for the licence file."""
    from fontTools import subset

    opts = subset.Options()
    opts.flavor = "woff2"
    opts.font_number = _face_index(source)
    opts.layout_features = LAYOUT_FEATURES
    opts.name_IDs = ["*"]  # keep the copyright, licence and licence URL records in the font itself
    opts.notdef_outline = True  # a character left out shows a box, not nothing
    opts.desubroutinize = True  # smaller once compressed
    font = subset.load_font(str(source), opts)
    subsetter = subset.Subsetter(opts)
    subsetter.populate(unicodes=sorted(ord(c) for c in chars))
    subsetter.subset(font)
    subset.save_font(font, str(target), opts)
    return {i: font["name"].getDebugName(i) for i in (0, 5, 7)}


def licence_text(names: dict[int, str]) -> str:
    ofl = (Path(__file__).with_name("OFL-1.1.txt")).read_text(encoding="utf-8")
    files = ", ".join(subset_file(style) for style in FACES)
    return (f"{files}: subsets of Noto Sans CJK SC ({names[5]}), made by book/_ext/pk_cjk_font.py from\n"
            f"Debian's fonts-noto-cjk (upstream: https://github.com/googlefonts/noto-cjk), holding the characters\n"
            f"this book shows in Chinese.\n\n{names[0]}\n{names[7]}\n\n"
            f"This Font Software is licensed under the SIL Open Font License, Version 1.1, copied below.\n\n{ofl}")


def make_webfont(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    started = time.perf_counter()
    outdir = Path(app.outdir)
    chars = characters_shown(outdir)
    sources = source_fonts()
    fonts = outdir / OUT_DIR
    fonts.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(json.dumps([SUBSET_VERSION, sorted(chars), [(str(p), p.stat().st_size, p.stat().st_mtime_ns)
                                                                     for p in sources.values()]]).encode()).hexdigest()
    manifest = fonts / MANIFEST
    wanted = [fonts / subset_file(style) for style in FACES] + [fonts / LICENCE]
    if manifest.is_file() and json.loads(manifest.read_text())["key"] == key and all(p.is_file() for p in wanted):
        logger.info(f"pk_cjk_font: {len(chars)} characters, unchanged: kept the subsets in {OUT_DIR}")
        return
    for style, source in sources.items():
        names = write_subset(source, chars, fonts / subset_file(style))
    (fonts / LICENCE).write_text(licence_text(names), encoding="utf-8")
    manifest.write_text(json.dumps({"key": key, "characters": "".join(sorted(chars))}, ensure_ascii=False))
    size = sum((fonts / subset_file(style)).stat().st_size for style in FACES)
    logger.info(f"pk_cjk_font: {len(chars)} characters -> {len(FACES)} woff2 subsets, {size / 1024:.0f} KB in all, "
                f"in {time.perf_counter() - started:.1f} s")


def check_source_font(app) -> None:
    if app.builder.format == "html":
        source_fonts()  # fail now, not after two minutes of executing chapters


def setup(app):
    app.connect("builder-inited", check_source_font)
    app.connect("doctree-resolved", mark_chinese)
    app.connect("build-finished", make_webfont)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
