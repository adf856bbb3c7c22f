"""The interview cards and the glossary, in the built book and in a real browser (issue 25).

Every card is there in both languages, its 30-second answer within the budget (about 75 words, 160 Chinese
characters) as the reader sees it, its rubric adding up to the bank's 10 + 5 points, its numbers computed; the
language buttons switch what is shown; each chapter opens with the cards of its questions; every glossary entry
is linked from some page; and no page calls the book's sources "seeds".
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from test_book_browser import browser, open_page, toc_pages  # noqa: F401 -- the module's browser fixture
from test_lab_wording import SOURCE_SENSE

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pk_book_cards", ROOT / "book" / "cards" / "cards.py")
cards = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cards  # (its dataclass looks its module up there)
_spec.loader.exec_module(cards)

CARD_FACTS = r"""
return JSON.stringify([...document.querySelectorAll('div.pk-card')].map(c => ({
  id: c.id,
  sides: [...c.querySelectorAll('.pk-card-side')].map(s => ({
    lang: s.getAttribute('lang'), shown: getComputedStyle(s).display !== 'none',
    title: s.querySelector('.pk-card-title').textContent,
    answer: s.querySelector('.pk-card-answer').textContent,
    points: [...s.querySelectorAll('.pk-card-rubric td.pk-card-pts')].map(t => parseFloat(t.textContent)),
    numbers: [...s.querySelectorAll('.pk-card-numbers li')].map(li => li.textContent),
    links: [...s.querySelectorAll('.pk-card-more a')].map(a => a.href)})),
  top: c.getBoundingClientRect().top + window.scrollY})));
"""


def test_every_card_file_passes_its_own_checks():
    labels = cards.book_labels()
    problems = [p for q in cards.ORDER for p in cards.problems(cards.load(q), labels)]
    assert problems == []


def test_no_card_shows_a_placeholder():
    """Every {name} a card's words hold is filled with its computed number, the rubric's too (M051's follow-up
    once showed '{ranks} ranks' in both languages)."""
    import re
    labels = cards.book_labels()
    for q in cards.ORDER:
        html = cards.card_html(cards.load(q), "../", labels)
        assert not re.search(r"\{[a-z_0-9]+\}", html), (q, re.findall(r".{40}\{[a-z_0-9]+\}.{20}", html)[:3])


@pytest.fixture(scope="module")
def cards_page(book_html, browser):  # noqa: F811
    open_page(browser, book_html, "cards")
    return json.loads(browser.execute_script(CARD_FACTS))


def test_the_cards_page_holds_every_card_in_both_languages(cards_page):
    assert [c["id"] for c in cards_page] == [f"card-{q}" for q in cards.ORDER]
    for card in cards_page:
        en, zh = card["sides"]
        assert (en["lang"], zh["lang"]) == ("en", "zh-Hans")
        assert en["shown"] and not zh["shown"], card["id"]  # English first (the browser asks for English)
        assert cards.words(en["answer"]) <= cards.MAX_WORDS, (card["id"], cards.words(en["answer"]))
        assert 0 < cards.han(zh["answer"]) <= cards.MAX_HAN, (card["id"], cards.han(zh["answer"]))
        assert cards.han(zh["title"]) > 0 and cards.han(en["answer"]) == 0
        assert sum(en["points"]) == sum(zh["points"]) == 10 + 5  # the items of the main question and the follow-up
        assert en["numbers"] and len(en["numbers"]) == len(zh["numbers"])
        assert not any("{" in n for n in en["numbers"] + zh["numbers"] + [en["answer"], zh["answer"]])
        for href in en["links"] + zh["links"]:
            page, _, anchor = href.partition("#")
            assert Path(page.removeprefix("file://")).is_file() and anchor, href


LANGUAGE_KEY = "pipeline-kit.language"  # where _static/pk-lang.js keeps the book's language
SHOWN = r"""
return [...document.querySelectorAll('div.pk-card')].map(c => [...c.querySelectorAll('.pk-card-side')]
  .filter(s => getComputedStyle(s).display !== 'none').map(s => s.getAttribute('lang')).join()
  + (c.querySelector('input:checked') || {className: 'none'}).className.replace('pk-card-', ' checked '));
"""


def test_the_language_is_one_for_the_whole_book_and_remembered(book_html, browser):  # noqa: F811
    """One click on a card's 中文 shows every card in Chinese, on this page and on every page opened later (the
    choice is kept in localStorage, from file:// too), the clicked card staying where it was; English likewise."""
    try:
        browser.get((book_html / "cards.html").as_uri())
        label = browser.find_element("css selector", 'label[for="pk-card-m051-zh"]')
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", label)
        top = browser.execute_script("return arguments[0].getBoundingClientRect().top", label)
        label.click()
        assert set(browser.execute_script(SHOWN)) == {"zh-Hans checked zh"}
        after = browser.execute_async_script("const done = arguments[arguments.length - 1];"
                                             "document.fonts.ready.then(() => requestAnimationFrame(() => "
                                             "done(arguments[0].getBoundingClientRect().top)));", label)
        assert abs(after - top) < 2, (top, after)
        text = browser.execute_script("return document.querySelector('#card-m044').innerText")
        assert "30 秒回答" in text and "得分点" in text and "In 30 seconds" not in text

        chapter = cards.load("m054").data["chapter"]  # the lightest page with a card
        browser.get((book_html / f"{chapter}.html").as_uri())  # another page, and another folder
        assert set(browser.execute_script(SHOWN)) == {"zh-Hans checked zh"}
        browser.find_element("css selector", 'label[for="pk-card-m054-en"]').click()
        assert set(browser.execute_script(SHOWN)) == {"en checked en"}
        assert browser.execute_script(f"return localStorage.getItem('{LANGUAGE_KEY}')") == "en"
    finally:
        browser.execute_script("localStorage.clear()")


def test_chinese_labels_take_full_width_punctuation():
    """The card's Chinese -- the labels the kit adds ("本书的看法：", "延伸阅读：", a number's "：") and the words --
    has no ASCII colon, comma or semicolon after a Chinese character."""
    labels = cards.book_labels()
    for q in cards.ORDER:
        html = cards.card_html(cards.load(q), "../", labels)
        zh = BeautifulSoup(html, "html.parser").select_one('.pk-card-side[lang="zh-Hans"]')
        assert zh.select_one(".pk-card-more").get_text().startswith("延伸阅读：")
        assert all(b.get_text() == "本书的看法：" for b in zh.select(".pk-card-note b"))
        assert all("：" in li.get_text() for li in zh.select(".pk-card-numbers li"))
        ascii_after_chinese = re.findall(r".{0,12}[\u3400-\u9fff）」』”][:;,!?]\s", zh.get_text())
        assert ascii_after_chinese == [], (q, ascii_after_chinese)


def test_each_chapter_opens_with_its_cards(book_html, browser):  # noqa: F811
    for q in cards.ORDER:
        chapter = cards.load(q).data["chapter"]
        open_page(browser, book_html, chapter)
        found = json.loads(browser.execute_script(CARD_FACTS))
        ids = [c["id"] for c in found]
        assert f"card-{q}" in ids, (chapter, ids)
        top = next(c["top"] for c in found if c["id"] == f"card-{q}")
        first_section = browser.execute_script(
            "const h = document.querySelector('article.bd-article section section');"
            "return h ? h.getBoundingClientRect().top + window.scrollY : 1e9;")
        assert top < first_section, (chapter, q)  # before the chapter's first section


def test_every_glossary_entry_is_linked_from_a_page(book_html):  # noqa: F811
    """Read from the built HTML (a link is in the page as written; no browser needed to see it)."""
    page = BeautifulSoup((book_html / "glossary.html").read_text(encoding="utf-8"), "html.parser")
    entries, group = [], []
    for el in page.select("dl.glossary > *"):
        if el.name == "dt":
            group.append(el.get("id"))
        else:
            entries.append(group)
            group = []
    assert len(entries) >= 30
    linked = set()
    for name in toc_pages():
        if name == "glossary":
            continue
        html = (book_html / f"{name}.html").read_text(encoding="utf-8")
        linked |= set(re.findall(r'href="[^"]*glossary\.html#(term-[^"]+)"', html))
    unlinked = [group for group in entries if not set(group) & linked]
    assert unlinked == []


def test_no_page_calls_the_sources_seeds(book_html):  # noqa: F811
    """The article's prose as the reader reads it (code and cell inputs left out), from the built HTML."""
    for name in toc_pages():
        html = (book_html / f"{name}.html").read_text(encoding="utf-8")
        start = html.index('<article class="bd-article"')
        article = BeautifulSoup(html[start:html.index("</article>", start) + 10], "html.parser").article
        for el in article.select("pre, code, .cell_input, script, style"):
            el.decompose()
        text = " ".join(article.get_text(" ").split())
        found = [m.group(0) for m in SOURCE_SENSE.finditer(text)]
        assert found == [], (name, found)


def test_the_question_index_gives_each_cards_chinese_title():
    rows = [ln for ln in (ROOT / "book" / "m-index.md").read_text(encoding="utf-8").splitlines()
            if ln.startswith("| {ref}`")]
    titles = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        zh = cells[1].split("<br>", 1)[1]
        titles[cells[0].split("<", 1)[1].split(">", 1)[0]] = zh.replace("`", "").replace("\\|", "|")
    assert titles == {q: cards.load(q).data["title"]["zh"] for q in cards.ORDER if q != "zbv"}
