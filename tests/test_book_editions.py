"""The Chinese edition (issue 39): built by book/editions.py from the English sources and book/locale's catalogs,
into zh/ beside the English.  The build itself refuses a page with a message it has no Chinese for
(book/_ext/pk_i18n.py under -W); these check what the reader gets: every page twice, the same numbers in both, a
font of its own, a search that finds Chinese words.  The browser checks are in test_book_cjk_font.py, whose
Chromium sees no system CJK font."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

SKIP = {"zh", "_static", "_sources", "_images"}
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def pages(root: Path) -> set[str]:
    """The edition's pages, by path, less the build's redirect (index.html -> intro.html)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*.html") if p.relative_to(root).parts[0] not in SKIP
            and 'http-equiv="Refresh"' not in p.read_text(encoding="utf-8")[:300]}


def article_text(page: Path) -> str:
    """The page's article, as text (its scripts, styles and the navigation left out)."""
    text = page.read_text(encoding="utf-8")
    match = re.search(r'<article class="bd-article".*?</article>', text, flags=re.S)
    body = re.sub(r"<(script|style)\b.*?</\1>", "", match.group(0) if match else text, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def test_every_page_has_its_chinese_twin(book_html):
    english, chinese = pages(book_html), pages(book_html / "zh")
    assert len(english) > 25 and english == chinese, sorted(english ^ chinese)
    for name in chinese:
        head = (book_html / "zh" / name).read_text(encoding="utf-8")[:400]
        assert '<html lang="zh-CN"' in head, name


def test_every_number_of_an_english_chapter_is_in_its_chinese_page(book_html):
    """Each number of an English chapter (text, tables, outputs) appears on its Chinese page: the numbers are the
    kit's, computed once, and a translation keeps them (1,024 and 1024 count as one)."""
    problems = []
    for name in sorted(n for n in pages(book_html) if n.startswith("chapters/")):
        english = {m.replace(",", "") for m in NUMBER.findall(article_text(book_html / name))}
        chinese = {m.replace(",", "") for m in NUMBER.findall(article_text(book_html / "zh" / name))}
        if english - chinese:
            problems.append(f"{name}: {sorted(english - chinese)[:10]}")
    assert not problems, "\n".join(problems)


def test_the_chinese_edition_is_chinese(book_html):
    """Most of a chapter's words are Chinese: the catalogs were applied, not merely present."""
    for name in ("chapters/bubble.html", "chapters/planning.html", "glossary.html", "using/students.html"):
        text = article_text(book_html / "zh" / name)
        han = len(re.findall(r"[\u4e00-\u9fff]", text))
        assert han > 300, (name, han)
    sidebar = (book_html / "zh" / "chapters" / "bubble.html").read_text(encoding="utf-8")
    assert 'caption-text">基础' in sidebar and 'caption-text">Foundations' not in sidebar  # the parts, translated


def test_search_finds_chinese_words(book_html):
    """The Chinese edition's search index is cut into Chinese words (jieba), so 气泡 finds the bubble chapter."""
    index = (book_html / "zh" / "searchindex.js").read_text(encoding="utf-8")
    assert all(json.dumps(word) in index for word in ("气泡", "微批次"))  # (the index escapes non-ASCII)


def test_a_translation_keeps_the_roles_code_and_math_of_its_english():
    """--check counts a translation that lost a glue role, code or a cross-reference's target as not done; a
    cross-reference's text may be translated."""
    from pipeline_kit.translation import markup_problems
    assert markup_problems("{glue:text}`k:.1f` ms and `x`", "{glue:text}`k:.1f` 毫秒和 `x`") == []
    assert markup_problems("{glue:text}`k:.1f` ms", "12.5 毫秒") == ["{glue:text}`k:.1f`"]
    assert markup_problems("see {term}`bubble`", "见 {term}`气泡 <bubble>`") == []
    assert markup_problems("see {term}`bubble`", "见 {term}`气泡`") == ["{term}<bubble>"]
    assert markup_problems("run `grade\nlab.ipynb`", "运行 `grade lab.ipynb`") == []  # a line break is a space
    assert markup_problems("run `grade lab.ipynb`", "运行 `grade lab`") == ["`grade lab.ipynb`"]


FIGURES = re.compile(r'<img class="pk-figure-(en|zh)"([^>]*)>')


def test_every_figure_is_drawn_in_both_languages_from_one_run(book_html):
    """A chapter's figures (pipeline_kit.viz.editions): each output holds the English drawing and the Chinese one,
    the same pair in both editions (one execution), and the Chinese one has no English words left."""
    problems, total = [], 0
    for name in sorted(n for n in pages(book_html) if n.startswith("chapters/")):
        english = FIGURES.findall((book_html / name).read_text(encoding="utf-8"))
        chinese = FIGURES.findall((book_html / "zh" / name).read_text(encoding="utf-8"))
        total += len(english)
        if [kind for kind, _ in english] != [kind for kind, _ in chinese] or \
                [kind for kind, _ in english] != ["en", "zh"] * (len(english) // 2):
            problems.append(f"{name}: figures {[k for k, _ in english]} / {[k for k, _ in chinese]}")
        left = [re.search(r'data-untranslated="([^"]*)"', attrs).group(1) for _, attrs in chinese
                if "data-untranslated" in attrs]
        if left:
            problems.append(f"{name}: English left in its figures: {left}")
    assert total >= 40 and not problems, "\n".join(problems)
