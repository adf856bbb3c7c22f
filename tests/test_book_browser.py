"""The built book, read in a real browser: headless Chromium driven by Selenium, at 1280 px.

It reuses the session's one book build (``book_html`` in conftest.py) and opens every page of the
table of contents from ``file://``, as a reader who downloaded the site would. On each page it
checks what a reader relies on: every display equation and every table fits its column, no table cell
breaks a word, no output scrolls sideways (schedule grids included), no figure is taller than 1.5 column
widths, every image loaded, no cell shows a traceback, and every "Try it" exercise has a folded hint and a
folded answer that open. On the labs page every notebook link resolves to a notebook.
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
// Folded parts (hidden inputs, hints, answers) are opened to be measured, then folded again.
const folded = [...column.querySelectorAll('details:not([open])')];
folded.forEach(d => { d.open = true; });
// a figure is drawn twice (pipeline_kit.viz.editions): the English page shows the English drawing only
const otherEdition = [...column.querySelectorAll('img.pk-figure-zh')].filter(i => i.getClientRects().length).length;
const figures = [...column.querySelectorAll('img')].filter(i => !i.classList.contains('pk-figure-zh')).map(i => {
  const cell = i.closest('div.cell');
  const input = cell && cell.querySelector('.cell_input');
  return {src: i.getAttribute('src'), height: i.getBoundingClientRect().height,
          cell: input ? input.textContent : ''};
});
const scrolled = [...column.querySelectorAll('div.cell_output, div.cell_output *, div.output, div.output *')]
  .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
  .map(e => e.tagName.toLowerCase() + ', ' + e.scrollWidth + ' px in ' + e.clientWidth + ' px: '
       + e.textContent.trim().split('\n')[0].slice(0, 70));
const outputs = column.querySelectorAll('div.cell_output pre, div.output pre').length;
folded.forEach(d => { d.open = false; });
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
return JSON.stringify({columnWidth, equations, images, tracebacks, exercises, figures, scrolled, outputs,
                       wideTables, splitWords, otherEdition});
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


def test_no_output_scrolls_sideways(pages):
    """Every cell output, printed text and schedule grids included, fits its column at 1280 px: nothing in it is
    wider than its box (scrollWidth <= clientWidth + 1), folded answers opened to be measured."""
    wide = [f"{page}: {e}" for page, f in pages.items() for e in f["scrolled"]]
    assert not wide, ("outputs wider than the column (wrap the text, print a grid with to_grid(width=76), or use an "
                      "HTML table):\n" + "\n".join(wide))
    assert sum(f["outputs"] for f in pages.values()) >= 20  # the printed outputs were there to measure


# A figure may be taller than TALL column widths only if listed here: (page, a piece of the code of the cell that
# draws it) -> why one tall picture serves the reader better than several.  None is, at present.
TALL = 1.5
TALL_FIGURES: dict[tuple[str, str], str] = {}


def test_no_figure_is_taller_than_one_and_a_half_column_widths(pages):
    tall, excused = [], set()
    for page, f in pages.items():
        for fig in f["figures"]:
            if fig["height"] <= TALL * f["columnWidth"]:
                continue
            why = {key for key in TALL_FIGURES if key[0] == page and key[1] in fig["cell"]}
            excused |= why
            if not why:
                tall.append(f"{page}: {fig['src']} is {fig['height']:.0f} px tall in a {f['columnWidth']:.0f} px "
                            "column")
    assert not tall, (f"figures taller than {TALL} x the column (split them, or list them in TALL_FIGURES with the "
                      "reason):\n" + "\n".join(tall))
    assert excused == set(TALL_FIGURES), f"listed in TALL_FIGURES but not tall: {set(TALL_FIGURES) - excused}"
    figures = [fig for f in pages.values() for fig in f["figures"]]
    assert len(figures) >= 20 and all(fig["height"] > 0 for fig in figures)  # every figure measured, none hidden


def test_no_table_is_wider_than_its_column(pages):
    wide = [f"{page}: {t}" for page, f in pages.items() for t in f["wideTables"]]
    assert not wide, "tables wider than the text column:\n" + "\n".join(wide)


def test_no_table_cell_breaks_a_word_or_a_number(pages):
    """Words and numbers in a table stay whole: "points" must not read "po / in / ts", nor 16 "1 / 6".  Code (a
    long flag name, a formula set as code) may break anywhere to keep a wide table inside its column."""
    split = [f"{page}: {w}" for page, f in pages.items() for w in f["splitWords"]]
    assert not split, "words or numbers broken across lines in a table:\n" + "\n".join(split)


def test_an_english_page_shows_each_figure_s_english_drawing_only(pages):
    assert {page: f["otherEdition"] for page, f in pages.items() if f["otherEdition"]} == {}


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


def test_the_generated_references_render(book_html, browser):
    """The command reference (from the argument parsers) and the API reference (from the docstrings) render as
    a reader sees them: the `plan` subcommand's --gpus option with its help, and `simulate` with its signature."""
    from selenium.webdriver.common.by import By

    open_page(browser, book_html, "using/commands")
    plan = browser.find_element(By.ID, "python-m-pipeline_kit-plan")
    gpus = [k for k in plan.find_elements(By.CSS_SELECTOR, "dt kbd") if k.text.strip() == "--gpus"]
    assert gpus, "no --gpus option in the plan section"
    browser.execute_script("arguments[0].scrollIntoView();", gpus[0])
    assert gpus[0].is_displayed()
    help_text = gpus[0].find_element(By.XPATH, "./ancestor::dt/following-sibling::dd[1]").text
    assert "GPUs" in help_text, help_text
    usage = plan.find_element(By.CSS_SELECTOR, "pre").text
    assert usage.startswith("python -m pipeline_kit plan") and "--gpus" in usage, usage

    open_page(browser, book_html, "using/api")
    entry = browser.find_element(By.ID, "pipeline_kit.sim.simulate")
    browser.execute_script("arguments[0].scrollIntoView();", entry)
    assert entry.is_displayed()
    assert entry.text.startswith("pipeline_kit.sim.simulate(schedule"), entry.text
    body = entry.find_element(By.XPATH, "./following-sibling::dd[1]").text
    assert "Simulate" in body, body
