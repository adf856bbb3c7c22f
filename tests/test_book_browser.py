"""The built book, read in a real browser: headless Chromium driven by Selenium, at 1280 px.

It reuses the session's one book build (``book_html`` in conftest.py) and opens every page of the
table of contents from ``file://``, as a reader who downloaded the site would. On each page it
checks what a reader relies on: every display equation and every table fits its column, no table cell
breaks a word, no printed output is cut off (schedule grids may scroll), every image loaded, no cell shows a
traceback, and every "Try it" exercise has a folded hint and a folded answer that open. On the labs page
every notebook link resolves to a notebook.
"""

import json
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from headless_chromium import chromium_or_skip

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1280

# Everything the checks need from one page, gathered in the page itself after MathJax has typeset.
PAGE_FACTS = r"""
const column = document.querySelector('article.bd-article');
const style = getComputedStyle(column);
const columnWidth = column.getBoundingClientRect().width - parseFloat(style.paddingLeft)
                    - parseFloat(style.paddingRight);
const equations = [...document.querySelectorAll('mjx-container[display="true"]')].map(e => {
  const math = e.querySelector('mjx-math');
  return {math: math ? math.getBoundingClientRect().width : -1, box: e.getBoundingClientRect().width,
          text: (e.getAttribute('aria-label') || e.parentElement.textContent).slice(0, 80)};
});
const images = [...document.images].map(i => ({src: i.getAttribute('src'), loaded: i.complete && i.naturalWidth > 0}));
const tracebacks = [...document.querySelectorAll('div.output.traceback, div.output.error')].length
  + (document.body.innerText.includes('Traceback (most recent call last)') ? 1 : 0);
const label = e => e.textContent.replace(/#$/, '').trim();
const exercises = [];
for (const head of document.querySelectorAll('h2, h3, h4, p')) {
  if (label(head) !== 'Try it') continue;
  let list = head.tagName === 'P' ? head.nextElementSibling : head.parentElement.querySelector('ol');
  if (!list || list.tagName !== 'OL') { exercises.push({missing_list: true}); continue; }
  for (const item of list.children) {
    const folds = [...item.querySelectorAll(':scope > details')].map(d => ({
      summary: d.querySelector('summary').textContent.trim(), open: d.open}));
    exercises.push({text: item.textContent.trim().slice(0, 60), folds: folds});
  }
}
const fits = p => {  // how many characters of this pre's monospace font its visible width holds
  const probe = document.createElement('span');
  probe.textContent = 'x'.repeat(100);
  p.appendChild(probe);
  const ch = probe.getBoundingClientRect().width / 100;
  probe.remove();
  const st = getComputedStyle(p);
  return Math.floor((p.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight)) / ch);
};
const cutOff = [...document.querySelectorAll('div.cell_output pre, div.output pre')]
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => { const n = fits(p); return p.textContent.split('\n').filter(l => l.length > n && !/^r\d+:/.test(l)); })
  .filter(lines => lines.length).map(lines => lines[0].slice(0, 90));
const wideTables = [...column.querySelectorAll('table')]
  .filter(t => t.getBoundingClientRect().width > columnWidth + 1)
  .map(t => Math.round(t.getBoundingClientRect().width) + ' px: ' + t.textContent.trim().slice(0, 60));
const splitWords = [];  // a word or number in a table broken across two lines ("po / in / ts", "1 / 6")
for (const cell of column.querySelectorAll('table th, table td')) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    // code in a markdown table may break anywhere; in an HTMLTable (pk-table) only after punctuation
    if (node.parentElement.closest('code') && !node.parentElement.closest('table.pk-table')) continue;
    for (const m of node.textContent.matchAll(/[A-Za-z0-9]{2,}/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      if (new Set([...range.getClientRects()].map(b => Math.round(b.top))).size > 1) {
        splitWords.push(m[0] + ' in the cell "' + cell.textContent.trim().slice(0, 40) + '"');
      }
    }
  }
}
return JSON.stringify({columnWidth, equations, images, tracebacks, exercises, cutOff, wideTables, splitWords});
"""

WAIT_FOR_MATHJAX = """
const done = arguments[arguments.length - 1];
const settle = () => setTimeout(() => done(true), 50);
if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
  MathJax.startup.promise.then(settle, () => done(false));
} else { settle(); }
"""


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]


@pytest.fixture(scope="module")
def browser():
    driver = chromium_or_skip()
    driver.set_window_size(WIDTH, 1000)
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def open_page(driver, html: Path, page: str) -> None:
    driver.get((html / f"{page}.html").as_uri())
    driver.execute_async_script(WAIT_FOR_MATHJAX)
    # scroll to the end and back so that any lazily loaded image loads
    driver.execute_script("window.scrollTo(0, document.body.scrollHeight);")
    time.sleep(0.2)
    driver.execute_script("window.scrollTo(0, 0);")


@pytest.fixture(scope="module")
def pages(book_html, browser) -> dict:
    facts = {}
    for page in toc_pages():
        open_page(browser, book_html, page)
        facts[page] = json.loads(browser.execute_script(PAGE_FACTS))
    return facts


def test_the_window_is_1280_px_wide(browser):
    assert browser.execute_script("return window.innerWidth") == WIDTH


def test_no_display_equation_is_wider_than_its_column(pages):
    problems = []
    for page, f in pages.items():
        for eq in f["equations"]:
            if eq["math"] < 0 or eq["math"] > eq["box"] + 1 or eq["box"] > f["columnWidth"] + 1:
                problems.append(f"{page}: {eq['math']:.0f} px of math in a {eq['box']:.0f} px box "
                                f"(column {f['columnWidth']:.0f} px): {eq['text']!r}")
    assert not problems, "\n".join(problems)
    assert sum(len(f["equations"]) for f in pages.values()) >= 3, "MathJax rendered (almost) no display equation"


def test_no_printed_output_is_cut_off(pages):
    """Printed output fits the column; only schedule grids (lines "r0: F0 F1 ...") may scroll sideways."""
    cut = [f"{page}: {line!r}" for page, f in pages.items() for line in f["cutOff"]]
    assert not cut, "printed lines wider than the column (use an HTML table or wrap them):\n" + "\n".join(cut)


def test_no_table_is_wider_than_its_column(pages):
    wide = [f"{page}: {t}" for page, f in pages.items() for t in f["wideTables"]]
    assert not wide, "tables wider than the text column:\n" + "\n".join(wide)


def test_no_table_cell_breaks_a_word_or_a_number(pages):
    """Words and numbers in a table stay whole: "points" must not read "po / in / ts", nor 16 "1 / 6".  Code (a
    long flag name, a formula set as code) may break anywhere to keep a wide table inside its column."""
    split = [f"{page}: {w}" for page, f in pages.items() for w in f["splitWords"]]
    assert not split, "words or numbers broken across lines in a table:\n" + "\n".join(split)


def test_every_image_loaded(pages):
    broken = [f"{page}: {img['src']}" for page, f in pages.items() for img in f["images"] if not img["loaded"]]
    assert not broken, "images that did not load:\n" + "\n".join(broken)
    assert sum(len(f["images"]) for f in pages.values()) >= 20


def test_no_page_shows_a_traceback(pages):
    assert not [page for page, f in pages.items() if f["tracebacks"]]


def test_every_try_it_has_a_folded_hint_and_answer(pages):
    problems, count = [], 0
    for page, f in pages.items():
        for ex in f["exercises"]:
            if ex.get("missing_list"):
                problems.append(f"{page}: a 'Try it' heading without a numbered list")
                continue
            count += 1
            summaries = [d["summary"] for d in ex["folds"]]
            if summaries != ["Hint", "Answer"] or any(d["open"] for d in ex["folds"]):
                problems.append(f"{page}: {ex['text']!r} has folds {ex['folds']} (want a closed Hint, then Answer)")
    assert not problems, "\n".join(problems)
    chapters = [p for p in pages if p.startswith("chapters/") and p != "chapters/explore"]
    without = [p for p in chapters if not pages[p]["exercises"]]
    assert not without, f"chapters without 'Try it' exercises: {without}"
    assert count >= 40


def test_a_folded_answer_opens_and_shows_computed_text(book_html, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, book_html, "chapters/bubble")
    answers = [d for d in browser.find_elements(By.CSS_SELECTOR, "details.sd-dropdown")
               if d.find_element(By.TAG_NAME, "summary").text.strip() == "Answer"]
    assert answers, "no folded answer on the bubble page"
    first = answers[0]
    assert not first.get_attribute("open")
    assert not first.find_element(By.CSS_SELECTOR, "div.sd-summary-content").is_displayed()
    browser.execute_script("arguments[0].scrollIntoView(); arguments[0].querySelector('summary').click();", first)
    assert first.get_attribute("open") is not None
    body = first.find_element(By.CSS_SELECTOR, "div.sd-summary-content")
    assert body.is_displayed()
    assert "2(pp − 1)" in body.text and "latencies" in body.text, body.text


def test_the_labs_page_links_every_notebook(book_html, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, book_html, "labs")
    hrefs = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "a.lab-download")]
    expected = sorted(p.name for p in (ROOT / "labs").glob("lab*.ipynb"))
    assert sorted(Path(unquote(urlparse(h).path)).name for h in hrefs) == expected
    for href in hrefs:
        url = urlparse(href)
        assert url.scheme == "file", href
        target = Path(unquote(url.path))
        assert target.is_file(), f"{href} does not resolve"
        nb = json.loads(target.read_text(encoding="utf-8"))
        assert nb["nbformat"] == 4 and nb["cells"], f"{target.name} is not a notebook"
        assert target.read_bytes() == (ROOT / "labs" / target.name).read_bytes(), f"{target.name} is not labs/'s copy"
