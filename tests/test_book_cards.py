"""The interview cards and the glossary, in the built book and in a real browser (issues 25 and 38).

Every card is there in both languages, its 30-second answer within the budget as it is SPOKEN (135 Chinese
syllables, 75 English words, numbers and formulas counted as read aloud: the counter is checked on hand-counted
examples) as the reader sees it, its rubric adding up to the bank's 10 + 5 points and naming the points an
interviewer expects, its numbers computed, its Chinese using the glossary's one term per concept; the language
buttons switch what is shown; each chapter opens with the cards of its questions; every glossary entry is linked
from some page and defined in both languages; and no page calls the book's sources "seeds".
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
        assert en["shown"] and not zh["shown"], card["id"]  # English first; the button shows the Chinese
        assert cards.spoken(en["answer"], "en") <= cards.MAX_WORDS, (card["id"], cards.spoken(en["answer"], "en"))
        assert cards.han(zh["answer"]) > 0, card["id"]
        assert cards.spoken(zh["answer"], "zh") <= cards.MAX_SYLLABLES, (card["id"], cards.spoken(zh["answer"], "zh"))
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


# -- the spoken budget (book/cards/speech.py) -----------------------------------------------------------------------
# Each count by hand, as a speaker reads it: 2304 两千三百零四, 12.5% 百分之十二点五, 1/v v 分之一, (p − 1)/(M + p − 1)
# p 减一 分之 ... (the slash 2), W "double-u" (3), PP4/M8 P P 四 M 八 (a slash between names is silent).
HAND_COUNTED = [
    ("2304", 6, 5), ("4.7", 3, 3), ("12.5%", 7, 4), ("30.4%", 7, 4), ("0.86", 4, 3), ("1,920", 6, 5),
    ("10", 1, 1), ("15", 2, 1), ("23", 3, 2), ("110", 4, 3), ("20304", 7, 5), ("100000000", 2, 3),
    ("1/v", 4, 3), ("7/23", 6, 4), ("PP", 2, 2), ("GBS", 3, 3), ("1F1B", 4, 4), ("1F1B's", 4, 4), ("W", 3, 1),
    ("PP4/M8", 5, 5), ("send/recv", 2, 2), ("(p − 1)/(M + p − 1)", 10, 9), ("F = I = W", 9, 5), ("p·v", 3, 3),
    ("x ≥ 2p", 7, 5), ("min(p − r − 1, M)", 7, 7), ("rank 0–3", 4, 4), ("stage", 1, 1), ("schedule", 2, 1),
    ("forward_step_func", 4, 3), ("ScheduleZBVZeroBubble", 9, 6), ("Megatron's", 3, 1), ("`deallocate`", 3, 1),
    ("气泡是 7/23。", 9, 4), ("PP8 下气泡从 46.7% 降到 9.9%。", 23, 12), ("A slow stage sets the beat.", 6, 6),
]


@pytest.mark.parametrize("text,zh,en", HAND_COUNTED)
def test_the_counter_reads_aloud_as_counted_by_hand(text, zh, en):
    assert (cards.spoken(text, "zh"), cards.spoken(text, "en")) == (zh, en)


def test_the_caps_are_30_seconds_at_the_stated_rates():
    speech = cards.speech
    assert (speech.ZH_RATE, speech.EN_WPM, speech.SECONDS) == (4.5, 150, 30)
    assert (cards.MAX_SYLLABLES, cards.MAX_WORDS) == (135, 75)
    assert speech.seconds("一" * 135, "zh") == 30 and speech.seconds("word " * 75, "en") == 30


def test_the_counter_refuses_an_unknown_language():
    with pytest.raises(ValueError, match="argument lang must be 'zh' or 'en', got 'fr'"):
        cards.spoken("x", "fr")


def test_every_answer_takes_at_most_30_seconds_to_say():
    """Both languages, numbers filled in (the reviewer timed seven Chinese answers at 35-39 s before)."""
    for q in cards.ORDER:
        card = cards.load(q)
        en, zh = card.text("answer", "en"), card.text("answer", "zh")
        assert cards.spoken(en, "en") <= cards.MAX_WORDS, (q, cards.spoken(en, "en"))
        assert cards.spoken(zh, "zh") <= cards.MAX_SYLLABLES, (q, cards.spoken(zh, "zh"))


# -- what an interviewer expects to hear (issue 38) -------------------------------------------------------------------
MEGATRON_FUNCTIONS = ("forward_backward_no_pipelining", "forward_backward_pipelining_without_interleaving",
                      "forward_backward_pipelining_with_interleaving")  # core_v0.19.0 schedules.py
# card -> {(field, lang): terms that must be there}; "rubric" is every rubric line and note of the card
EXPECTED = {
    "m041": {(f, lang): MEGATRON_FUNCTIONS for f in ("answer", "rubric") for lang in ("en", "zh")},
    "m043": {(f, lang): ("F(m)", "B(m)", "s − 1", "s + 1") for f in ("answer", "rubric") for lang in ("en", "zh")},
    "m052": {("answer", "en"): ("sbh(34 + 5as/h)", "Korthikanti", "L layers' worth", "(1 + (p − 1)/(pv))"),
             ("answer", "zh"): ("sbh(34 + 5as/h)", "Korthikanti", "L 层的量", "(1 + (p − 1)/(pv))"),
             ("rubric", "en"): ("sbh(34 + 5as/h)", "L layers' worth", "(1 + (p − 1)/(pv))"),
             ("rubric", "zh"): ("sbh(34 + 5as/h)", "L 层的量", "(1 + (p − 1)/(pv))")},
    "m053": {("answer", "en"): ("globally consistent",), ("rubric", "en"): ("globally consistent",),
             ("answer", "zh"): ("全局一致",), ("rubric", "zh"): ("全局一致",)},
    "m054": {("answer", "en"): ("2.76×",), ("answer", "zh"): ("2.76 倍",),
             ("rubric", "en"): ("2.76×",), ("rubric", "zh"): ("2.76 倍",)},
    "zbv": {("answer", "en"): ("(p − 1)/(6M + p − 1)", "F, I, W", "free P2P"),
            ("answer", "zh"): ("(p − 1)/(6M + p − 1)", "F、I、W 等长", "P2P 免费"),
            ("rubric", "en"): ("(p − 1)/(6M + p − 1)", "free P2P", "ScheduleZBVZeroBubble", "F = I = W"),
            ("rubric", "zh"): ("(p − 1)/(6M + p − 1)", "P2P 免费", "ScheduleZBVZeroBubble", "F = I = W")},
}
# card -> (lang, phrase) the reviewer found misleading, which must not come back
MISREAD = {"m045": ("zh", "长了"), "m051": ("zh", "缩小 v 倍"), "m049": ("zh", "几乎不等"), "m044": ("zh", "节拍")}


def _said(card, field: str, lang: str) -> str:
    if field == "answer":
        return card.text("answer", lang)
    lines = []
    for item in card.data["rubric"]:
        lines.append(cards.fill(item[lang], card.values, card.question))
        if item.get("note"):
            lines.append(cards.fill(item["note"][lang], card.values, card.question))
    return cards.tidy(" ".join(" ".join(lines).split()), lang)


@pytest.mark.parametrize("q", sorted(EXPECTED))
def test_each_card_names_the_points_an_interviewer_expects(q):
    card = cards.load(q)
    missing = [(field, lang, term) for (field, lang), terms in EXPECTED[q].items() for term in terms
               if term not in _said(card, field, lang)]
    assert missing == []


def test_no_card_says_what_the_reviewer_found_misleading():
    for q, (lang, phrase) in MISREAD.items():
        assert phrase not in cards.load(q).text("answer", lang), (q, phrase)


def test_the_zbv_formula_the_card_quotes_is_the_simulators():
    """(p − 1)/(6M + p − 1) with F = I = W and free P2P, for M >= 2p; and 'zero bubble' holds inside each rank."""
    from fractions import Fraction

    from pipeline_kit.schedules import build_schedule
    from pipeline_kit.sim import simulate
    for p, m in ((2, 4), (3, 6), (4, 8), (4, 11), (8, 16), (8, 40)):
        got = simulate(build_schedule("zbv", p, m), fwd=2, bwd=4).bubble_fraction
        assert Fraction(got).limit_denominator(10**6) == Fraction(p - 1, 6 * m + p - 1), (p, m)
    values = cards.load("zbv").values
    assert values["zbv_frac"] == "7/103" and values["rank_gaps"] == 0 and values["ramp"] == 7
    assert values["mem_zbv_gib"] > values["mem_1f1b_gib"] and values["mem_zbh1_gib"] > values["mem_1f1b_gib"]


def test_m050s_empty_stage_example_passes_megatrons_rules_and_the_help_example_does_not():
    from pipeline_kit.layout import LayoutError, megatron_layout
    values = cards.load("m050").values
    lay = megatron_layout(values["empty_example"], values["empty_pp"], 8, 1)
    assert lay.rank_stages(values["empty_rank"])[values["empty_chunk"]] == ""
    for pp in (4, 8):
        with pytest.raises(LayoutError, match="same one virtual pipeline stage"):
            megatron_layout(values["help_example"], pp, 3, 2)


# -- one Chinese term per concept (book/glossary.yml) -----------------------------------------------------------------
def test_no_card_uses_a_discouraged_chinese_variant():
    assert [p for q in cards.ORDER for p in cards.wording_problems(cards.load(q))] == []


@pytest.mark.parametrize("text,found", [
    ("每个 rank 有两个模型块", [("模型块", "chunk")]),
    ("P2P 缓冲区要活到 wait 完成", []),                      # 缓冲 inside the term 缓冲区
    ("P2P 缓冲要活到 wait 完成", [("缓冲", "缓冲区")]),
    ("由 schedule 负责", [("schedule", "调度")]),
    ("流水线调度（schedule）", []),                          # an English gloss after the term
    ("见 `schedules.py` 和 `Schedule1F1B`", []),             # names in code
    ("megatron/core/pipeline_parallel/schedules.py", []),    # part of a path
    ("相对 Baseline 的 micro-batch 大小", [("micro-batch", "微批次"), ("Baseline", "基线")]),
    ("点对点通信", [("点对点", "P2P")]),
])
def test_the_wording_check_finds_discouraged_variants_and_only_those(text, found):
    assert sorted(cards.glossary.avoided(text, cards.TERMS)) == sorted(found)


def test_the_term_list_is_consistent():
    """Every entry defined in both languages; no headword twice; no discouraged variant is another entry's term."""
    terms = cards.TERMS
    headwords = [w for t in terms for w in t.headwords]
    assert len(headwords) == len(set(headwords)), sorted({w for w in headwords if headwords.count(w) > 1})
    preferred = {zh for t in terms for zh in t.zh}
    assert [v for t in terms for v in t.avoid if v in preferred] == []
    assert all(cards.han(t.definition["zh"]) and not cards.han(t.definition["en"]) for t in terms)
    by_en = {t.en[0]: t for t in terms}
    assert by_en["stage"].zh == ("stage",) and "流水线阶段" in by_en["stage"].avoid
    assert by_en["service time"].zh == ("服务时间",) and by_en["makespan"].zh == ("单步耗时",)
    assert by_en["slot"].zh == ("时隙",) and by_en["beat"].zh == ("节拍",)


def test_the_glossary_fixes_what_the_reviewer_found():
    """An empty stage holds nothing (`||`); a deadlock includes the schedule-level cycle, not only a lost message."""
    by_en = {t.en[0]: t for t in cards.TERMS}
    empty, deadlock = by_en["empty stage"].definition, by_en["deadlock"].definition
    assert "`||`" in empty["en"] and "only the embedding or only the loss is not empty" in empty["en"]
    assert "`||`" in empty["zh"] and "不算空 stage" in empty["zh"]
    assert "Schedule-level" in deadlock["en"] and "Transport-level" in deadlock["en"]
    assert "调度层死锁" in deadlock["zh"] and "传输层死锁" in deadlock["zh"]


# -- rendering --------------------------------------------------------------------------------------------------------
def test_names_in_backquotes_render_as_code_not_as_backquotes():
    labels = cards.book_labels()
    for q in cards.ORDER:
        html = cards.card_html(cards.load(q), "../", labels)
        assert "`" not in html, (q, re.findall(r".{30}`.{30}", html)[:3])
    html = cards.card_html(cards.load("m052"), "../", labels)
    assert "<code>deallocate_output_tensor</code>" in html


def test_the_glossary_page_renders_the_term_list_in_both_languages(book_html):  # noqa: F811
    page = BeautifulSoup((book_html / "glossary.html").read_text(encoding="utf-8"), "html.parser")
    groups, current = [], []
    for el in page.select("dl.glossary > *"):
        if el.name == "dt":
            current.append(" ".join(el.get_text(" ").split()).rstrip("#¶ "))
        else:
            groups.append((current, el.get_text(" ")))
            current = []
    assert len(groups) == len(cards.TERMS)
    for (shown, definition), term in zip(groups, cards.TERMS):
        assert shown == term.headwords, (shown, term.headwords)
        assert cards.han(definition) and re.search(r"[A-Za-z]{4}", definition), shown
        for variant in term.avoid:
            assert variant in definition, (shown, variant)  # the entry says which words the cards avoid
