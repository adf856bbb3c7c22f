"""The book's Chinese renders without any CJK font on the reader's machine (issue 38).

The build ships a subset of Noto Sans CJK SC (book/_ext/pk_cjk_font.py); here the built book is read twice:

* from its files: both subsets and the licence are there, the subsets hold every CJK character the pages show
  and nothing the pages do not need;
* in headless Chromium that cannot see a single system CJK font (fontconfig is pointed at a configuration that
  rejects every font holding 一, the fonts-noto-cjk that CI installs included; Chromium honours
  FONTCONFIG_FILE): the shipped font loads, every glyph of every Chinese element is drawn with it, and it has a
  glyph for every character those elements hold.  Together that means no box: Chromium draws a character no
  font has with the .notdef glyph of the first font of the stack, so "drawn with the shipped font" alone would
  not tell a glyph from a box.

With ``PIPELINE_KIT_SCREENSHOTS=DIR`` three cards in Chinese are photographed on the way, into DIR (the pictures
in docs/screenshots were made so).
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from test_book_cards import LANGUAGE_KEY

from headless_chromium import chromium_or_skip

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pk_cjk_font", ROOT / "book" / "_ext" / "pk_cjk_font.py")
pk_cjk_font = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pk_cjk_font)

CJK = re.compile(f"[{pk_cjk_font.HAN}{pk_cjk_font.CJK_MARKS}]")
FAMILY = "PK Noto Sans CJK SC"  # the CSS name (pk-book.css); the font's own name is Noto Sans CJK SC
PHOTOGRAPHED = ("m044", "m051", "m054")

# Every element in Chinese inside arguments[0] that is shown and holds text of its own, marked for the DevTools
# protocol to find (DOM.querySelectorAll), with that text; and all the text in Chinese of the page.
ZH_TEXT = r"""
const out = [];
const scope = arguments[0].split(',').map(s => s.trim());
const inside = scope.map(s => s + ' [lang|="zh"], ' + s + ' [lang|="zh"] *').join(', ');
document.querySelectorAll(inside).forEach((el, i) => {
  const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('');
  if (!own.trim() || !el.getClientRects().length) return;
  el.setAttribute('data-pk-zh', i);
  out.push({id: String(i), text: own});
});
return JSON.stringify({elements: out,
  all: [...document.querySelectorAll('[lang|="zh"]')].map(e => e.textContent).join('')});
"""


def _cmap(path: Path) -> set[str]:
    from fontTools.ttLib import TTFont

    font = TTFont(str(path))  # woff2: fontTools decompresses it with brotli
    return {chr(code) for code in font.getBestCmap()}


@pytest.fixture(scope="module")
def shipped(book_html) -> dict:
    fonts = book_html / pk_cjk_font.OUT_DIR
    return {style: fonts / pk_cjk_font.subset_file(style) for style in pk_cjk_font.FACES}


@pytest.fixture(scope="module")
def shipped_characters(shipped) -> set[str]:
    """The characters both weights have a glyph for."""
    return set.intersection(*(_cmap(path) for path in shipped.values()))


def _page_text(page: Path) -> str:
    text = re.sub(r"<(script|style)\b.*?</\1>", "", page.read_text(encoding="utf-8"), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def test_the_book_ships_a_subset_of_the_font_with_its_licence(book_html, shipped, shipped_characters):
    """Every CJK character of every page is in both weights; nothing is there that no page needs (the subset is
    exactly the pages' Chinese plus the common CJK punctuation, not the 19 MB collection)."""
    from fontTools.ttLib import TTFont

    english = [page for page in book_html.rglob("*.html") if page.relative_to(book_html).parts[0] != "zh"]
    text = "".join(_page_text(page) for page in english)  # (the Chinese edition in zh/ ships its own subset)
    needed = set(CJK.findall(text))
    assert len(needed) > 500  # the cards, the glossary and the index: ~650 distinct Han characters
    for style, path in shipped.items():
        font = TTFont(str(path))
        assert font["name"].getDebugName(1) == "Noto Sans CJK SC", style
        assert font["OS/2"].usWeightClass == pk_cjk_font.FACES[style]
        assert path.stat().st_size < 300_000, (style, path.stat().st_size)
    assert needed <= shipped_characters, f"the font lacks {''.join(sorted(needed - shipped_characters))}"
    unused = shipped_characters - set(text) - set(pk_cjk_font.CJK_PUNCTUATION)
    assert not unused, f"the font holds characters no page shows: {''.join(sorted(unused))[:80]}"
    licence = (book_html / pk_cjk_font.OUT_DIR / pk_cjk_font.LICENCE).read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Adobe" in licence
    assert all(path.name in licence for path in shipped.values())


def _fontconfig_without_cjk(folder: Path) -> Path:
    """A fontconfig configuration: the one in force (the system's, or FONTCONFIG_FILE's), less every font that
    holds 一 (U+4E00)."""
    if not shutil.which("fc-list"):
        pytest.skip("fc-list (fontconfig) is not installed: cannot hide the system's CJK fonts")
    listed = subprocess.run(["fc-list", "--format", "%{file}\n", ":charset=4e00"], capture_output=True, text=True,
                            check=True).stdout.split()
    base = os.environ.get("FONTCONFIG_FILE", "/etc/fonts/fonts.conf")
    rejected = "".join(f"<glob>{html.escape(path)}</glob>" for path in sorted(set(listed)))
    conf = folder / "fonts.conf"
    conf.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd"><fontconfig>'
                    f'<include ignore_missing="yes">{html.escape(base)}</include>'
                    f'<cachedir>{html.escape(str(folder / "cache"))}</cachedir>'
                    f'<selectfont><rejectfont>{rejected}</rejectfont></selectfont></fontconfig>', encoding="utf-8")
    env = {**os.environ, "FONTCONFIG_FILE": str(conf)}
    left = subprocess.run(["fc-list", ":charset=4e00"], capture_output=True, text=True, env=env).stdout
    assert not left.strip(), f"fonts with CJK glyphs still visible: {left}"
    return conf


@pytest.fixture(scope="module")
def browser_without_cjk(book_html, tmp_path_factory):
    conf = _fontconfig_without_cjk(tmp_path_factory.mktemp("fontconfig"))
    driver = chromium_or_skip({**os.environ, "FONTCONFIG_FILE": str(conf)})
    driver.set_window_size(1280, 1800)  # a whole card on the screen, for its photograph
    driver.set_script_timeout(60)
    # the lightest page of the book: localStorage is one for all its file:// pages
    driver.get((book_html / pk_cjk_font.OUT_DIR / pk_cjk_font.LICENCE).as_uri())
    driver.execute_script(f"localStorage.setItem('{LANGUAGE_KEY}', 'zh')")  # the cards open in Chinese
    yield driver
    driver.quit()


def _fonts_drawing(driver, elements: list[dict]) -> dict[str, list]:
    """The fonts Chromium drew each element's own text with (DevTools: CSS.getPlatformFontsForNode)."""
    root = driver.execute_cdp_cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    driver.execute_cdp_cmd("CSS.enable", {})
    nodes = driver.execute_cdp_cmd("DOM.querySelectorAll", {"nodeId": root, "selector": "[data-pk-zh]"})["nodeIds"]
    assert len(nodes) == len(elements)  # both in document order
    return {el["id"]: driver.execute_cdp_cmd("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
            for el, node in zip(elements, nodes)}


@pytest.mark.parametrize("page", ["cards", "glossary"])  # Chinese marked by cards.py, and by pk_cjk_font
def test_chinese_is_drawn_with_the_shipped_font_and_never_a_box(book_html, shipped_characters, browser_without_cjk,
                                                                 page):
    driver = browser_without_cjk
    driver.get((book_html / f"{page}.html").as_uri())
    loaded = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"document.fonts.ready.then(() => done([...document.fonts].filter(f => f.family.includes('{FAMILY}'))"
        ".map(f => f.weight + ' ' + f.status)));")
    # a face loads when the page uses it (the glossary's terms are all bold); none fails to load
    assert "error" not in " ".join(loaded) and any(face.endswith(" loaded") for face in loaded), loaded
    if page == "cards":
        assert sorted(loaded) == ["400 loaded", "700 loaded"], loaded  # the text; the titles and numbers
    # the cards are all made by one function: one of them (M054's has × and ——), every character of all fifteen
    # checked below
    scope = "#card-m054" if page == "cards" else "article.bd-article"
    facts = json.loads(driver.execute_script(ZH_TEXT, scope))
    assert len(facts["elements"]) >= 10, page
    cmap = shipped_characters
    # The font has a glyph for every character of the page's Chinese but a few symbols (the rubric's ☐), which
    # no CJK font holds and the Latin stack draws.
    lacking = set(facts["all"]) - cmap - set(" \n\t")
    cjk = {c for c in lacking if CJK.match(c) or c in pk_cjk_font.SHARED or not unicodedata.category(c).startswith("S")}
    assert not cjk, f"{page}: the shipped font has no glyph for {''.join(sorted(cjk))!r} (a box on screen)"
    drawn = _fonts_drawing(driver, facts["elements"])
    for el in facts["elements"]:
        others = sum(f["glyphCount"] for f in drawn[el["id"]]
                     if not (f["isCustomFont"] and f["familyName"] == "Noto Sans CJK SC"))
        assert others <= sum(c in lacking for c in el["text"]), (page, el["text"][:60], drawn[el["id"]])
        assert drawn[el["id"]], (page, el["text"][:60], "not drawn at all")
    if page == "cards" and os.environ.get("PIPELINE_KIT_SCREENSHOTS"):
        _photograph(driver, Path(os.environ["PIPELINE_KIT_SCREENSHOTS"]))


def _photograph(driver, folder: Path) -> None:
    """docs/screenshots shows these: three cards in Chinese on a machine without a CJK font."""
    from selenium.webdriver.common.by import By

    folder.mkdir(parents=True, exist_ok=True)
    for q in PHOTOGRAPHED:
        card = driver.find_element(By.ID, f"card-{q}")
        driver.execute_script("arguments[0].scrollIntoView()", card)
        path = folder / f"card-{q}-zh-no-system-cjk-font.png"
        card.screenshot(str(path))
        assert path.stat().st_size > 20_000, path  # a card full of text, not an empty box


EDITION_KEY = "pipeline-kit.edition"  # where _static/editions/pk-edition.js keeps the reader's edition


def test_every_chinese_page_draws_its_chinese_fits_its_width_and_links_its_english_twin(book_html,
                                                                                      browser_without_cjk):
    """Each page of the Chinese edition (issue 39), on a machine with no CJK font: its own subset of the font holds
    every character it shows and loads without error, nothing scrolls sideways, and its 'English' link goes to the
    same page of the English edition."""
    from test_book_editions import pages

    zh = book_html / "zh"
    cmap = set.intersection(*(_cmap(zh / pk_cjk_font.OUT_DIR / pk_cjk_font.subset_file(style))
                              for style in pk_cjk_font.FACES))
    driver = browser_without_cjk
    driver.execute_script(f"localStorage.setItem('{EDITION_KEY}', 'zh')")
    problems = []
    for name in sorted(pages(zh)):
        needed = set(CJK.findall(_page_text(zh / name)))
        if needed - cmap:
            problems.append(f"{name}: the font lacks {''.join(sorted(needed - cmap))[:20]}")
        driver.get((zh / name).as_uri())
        facts = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "document.fonts.ready.then(() => done({"
            f"  faces: [...document.fonts].filter(f => f.family.includes('{FAMILY}')).map(f => f.status),"
            "  wide: document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth,"
            "  twin: (document.getElementById('pk-edition-switch') || {}).href || null,"
            "  here: location.href,"
            "  stack: getComputedStyle(document.querySelector('article') || document.body).fontFamily,"
            "  figures: [...document.querySelectorAll('img.pk-figure-en, img.pk-figure-zh')]"
            "    .filter(i => i.offsetParent !== null).map(i => i.className)}));")
        if facts["here"] != (zh / name).as_uri():
            problems.append(f"{name}: went to {facts['here']}")
        if "error" in facts["faces"] or (needed and "loaded" not in facts["faces"]):
            problems.append(f"{name}: font faces {facts['faces']}")
        if not facts["stack"].startswith(f'"{FAMILY}"'):
            problems.append(f"{name}: its text is set in {facts['stack'][:40]}..., not the CJK stack first")
        if facts["wide"] > 1:
            problems.append(f"{name}: scrolls sideways by {facts['wide']} px")
        if any(shown != "pk-figure-zh" for shown in facts["figures"]) or \
                len(facts["figures"]) != (zh / name).read_text(encoding="utf-8").count('class="pk-figure-zh"'):
            problems.append(f"{name}: shows the figures {facts['figures']}, not each one's Chinese drawing")
        if facts["twin"] != (book_html / name).as_uri():
            problems.append(f"{name}: its English link is {facts['twin']}")
    assert not problems, "\n".join(problems[:20])


def test_the_reader_s_edition_is_remembered_from_page_to_page(book_html, browser_without_cjk):
    """中文 on one English page: the next English page opened is its Chinese twin, and its cards are Chinese;
    English on a Chinese page: English pages stay English."""
    from selenium.webdriver.common.by import By

    driver = browser_without_cjk
    driver.execute_script(f"localStorage.removeItem('{EDITION_KEY}')")
    driver.get((book_html / "chapters" / "bubble.html").as_uri())
    assert driver.current_url == (book_html / "chapters" / "bubble.html").as_uri()  # no choice yet: no redirect
    driver.find_element(By.ID, "pk-edition-switch").click()
    assert driver.current_url == (book_html / "zh" / "chapters" / "bubble.html").as_uri()
    driver.get((book_html / "cards.html").as_uri())
    assert driver.current_url == (book_html / "zh" / "cards.html").as_uri()
    assert driver.execute_script("return document.documentElement.getAttribute('data-pk-lang')") == "zh"
    driver.find_element(By.ID, "pk-edition-switch").click()
    assert driver.current_url == (book_html / "cards.html").as_uri()
    driver.get((book_html / "chapters" / "p2p.html").as_uri())
    assert driver.current_url == (book_html / "chapters" / "p2p.html").as_uri()
    driver.execute_script(f"localStorage.removeItem('{EDITION_KEY}'); localStorage.setItem('{LANGUAGE_KEY}', 'zh')")
