"""The checks' feedback in the notebook's language (issue 39): how a finished English message is translated from
the catalogs of templates (pipeline_kit.language), and that the catalogs are in step with the source."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit import language
from pipeline_kit.grading import feedback_catalogs, parts
from pipeline_kit.language import pieces, speaking, translated

PO = r'''
msgid ""
msgstr ""
"Content-Type: text/plain; charset=utf-8\n"

msgid "{what} has no ops yet: draw one row per rank, r0 to r{PP - 1}"
msgstr "{what} 还没有操作：每个 rank 画一行，从 r0 到 r{PP - 1}"

msgid "idle_slots[{name!r}] = {_fmt(got)} counts only the fill"
msgstr "idle_slots[{name!r}] = {_fmt(got)} 只数了填充阶段"

msgid "{what} ({name}): {c.feedback}"
msgstr "{what}（{name}）：{c.feedback}"

msgid "schedule order"
msgstr "调度顺序"

msgid "{n} point{'' if n == 1 else 's'} possible"
msgstr "满分 {n} 分"

msgid "a dict {{'gpipe': {each}}} with keys"
msgstr "一个带键的字典 {{'gpipe': {each}}}"

#, fuzzy
msgid "the old {x} text"
msgstr "旧的 {x}"

msgid "untranslated {x} text"
msgstr ""

msgctxt "counted"
msgid "message"
msgstr "条消息"

msgid "message"
msgstr "消息"
'''


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    folder = tmp_path / "zh_CN" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "grading.test.po").write_text(PO, encoding="utf-8")
    monkeypatch.setattr(language, "LOCALE", tmp_path)
    language.reload()
    yield
    monkeypatch.undo()
    language.reload()


def test_a_message_is_translated_by_the_template_it_fits_with_its_values_as_they_were(catalog):
    assert translated("peak_live has no ops yet: draw one row per rank, r0 to r3", "zh") == \
        "peak_live 还没有操作：每个 rank 画一行，从 r0 到 r3"
    assert translated("idle_slots['1f1b'] = [1, 2.5] counts only the fill", "zh_CN") == \
        "idle_slots['1f1b'] = [1, 2.5] 只数了填充阶段"
    assert translated("a dict {'gpipe': 4} with keys", "zh") == "一个带键的字典 {'gpipe': 4}"


def test_a_field_holding_a_message_is_translated_too(catalog):
    inner = "x has no ops yet: draw one row per rank, r0 to r1"
    assert translated(f"gpipe_grid (schedule order): {inner}", "zh") == \
        "gpipe_grid（调度顺序）：x 还没有操作：每个 rank 画一行，从 r0 到 r1"


def test_what_no_template_fits_stays_as_it_is_and_english_is_the_source(catalog):
    for text in ("ZeroDivisionError: division by zero", "the old 3 text", "untranslated 3 text", ""):
        assert translated(text, "zh") == text  # (no template, a fuzzy one, an untranslated one)
    assert translated("peak_live has no ops yet: draw one row per rank, r0 to r3", "en").startswith("peak_live has")


def test_a_listing_is_translated_item_by_item_and_joined_in_the_language(catalog):
    failed = parts.LabCheckFailed("...", parts=["schedule order", "ZeroDivisionError: x", "schedule order"])
    with speaking("zh_CN"):
        assert parts._message(failed) == "调度顺序；ZeroDivisionError: x；调度顺序"
    assert parts._message(failed) == "schedule order; ZeroDivisionError: x; schedule order"
    assert translated("schedule order; schedule order", "zh") == "调度顺序；调度顺序"


def test_a_counted_noun_carries_its_measure_word_and_a_cut_never_falls_inside_a_value(catalog):
    with speaking("zh"):
        assert parts.plural(3, "message") == "3 条消息"
        assert parts.plural(3, "layer") == "3 layers"  # (no translation: the English)
    assert parts.plural(1, "message") == "1 message"
    assert translated("message", "zh") == "消息"  # (a noun alone is another message than a counted one)
    assert translated("decide({'compute': 0.03}, None): schedule order", "zh") == \
        "decide({'compute': 0.03}, None)：调度顺序"
    assert translated("f('a: b'): x", "zh") == "f('a: b'): x"  # (nothing translated: the punctuation is kept)


def test_a_message_too_long_to_be_the_kit_s_is_shown_as_it_is(catalog):
    """A student's exception text of any length costs the grade no time: past MAX_MESSAGE it is not matched."""
    long = "schedule order; " * (language.MAX_MESSAGE // 16 + 1)
    assert len(long) > language.MAX_MESSAGE and translated(long, "zh") == long
    assert translated("schedule order; schedule order", "zh") == "调度顺序；调度顺序"


def test_a_conditional_plural_may_be_dropped_but_no_value(catalog):
    assert translated("2 points possible", "zh") == "满分 2 分"
    assert feedback_catalogs.field_problems("{a} and {b}", "{a}") == ["loses {b}"]
    assert feedback_catalogs.field_problems("{a} and {b}", "{a} {b} {c}") == ["invents {c}"]
    assert feedback_catalogs.field_problems("{n} point{'' if n == 1 else 's'}", "{n} 分") == []
    assert feedback_catalogs.field_problems("call `f(x)` on {a}", "对 {a} 调用 f(x)") == ["loses `f(x)`"]


def test_the_language_is_a_context_and_a_notebook_names_its_own():
    assert language.current() == "en"
    with speaking("zh-CN"):
        assert language.current() == "zh_CN"
        with speaking(None):
            assert language.current() == "en"
    assert language.notebook_language({"metadata": {"pipeline_kit": {"language": "zh_CN"}}}) == "zh_CN"
    for nb in ({}, {"metadata": {}}, {"metadata": {"pipeline_kit": {"language": "klingon"}}}, None):
        assert language.notebook_language(nb) == "en"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet="ab {}:!r", max_size=6), st.sampled_from(["{{", "}}", "{x}", "{y:g}"])),
                max_size=8))
def test_cutting_a_template_into_pieces_loses_nothing(chunks):
    template = "".join(chunks)
    if template.count("{") - template.count("{{") * 2 != template.count("}") - template.count("}}") * 2:
        return  # (an unbalanced brace is not a template the extractor writes)
    rebuilt = "".join(text if is_field else text.replace("{", "{{").replace("}", "}}")
                      for is_field, text in pieces(template))
    assert rebuilt.replace("{{", "").replace("}}", "") .count("{") == template.replace("{{", "").replace("}}", "") \
        .count("{")


def test_the_extractor_takes_each_f_string_as_it_is_written(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""A docstring is not a message."""\n'
                      'def f(x, n):\n'
                      '    """Nor this one."""\n'
                      '    fail(f"{x!r} is {n:.3f} too many, -- see {book(\'a\', \'B c\')}")\n'
                      '    key = "gpipe_grid"\n'
                      '    re.compile(r"a b c")\n'
                      '    return translated("passed"), "two words"\n')
    found = [m for m, _, _ in feedback_catalogs.templates(source)]
    assert found == ["{x!r} is {n:.3f} too many, -- see {book('a', 'B c')}", "passed", "two words"]


def test_every_message_of_the_checks_and_verdicts_is_translated_into_chinese():
    """The catalogs hold the source's messages, each translated, none fuzzy, every value kept: an English edit of a
    check's feedback cannot land without its Chinese (make-labs --lang zh --update marks it)."""
    tally = feedback_catalogs.tally("zh_CN")
    assert tally.messages > 1000
    problems = tally.problems()
    assert not problems, f"{len(problems)} problems, e.g.:\n" + "\n".join(problems[:20])


def test_the_chinese_catalogs_use_full_width_punctuation_between_chinese_words():
    """A Chinese translation's commas and colons between Han characters are full-width."""
    han = r"[\u4e00-\u9fff]"
    bad = []
    for template in language.catalog("zh_CN"):
        text = "".join(t for is_field, t in pieces(template.msgstr) if not is_field)
        bad += [f"{template.msgstr[:60]}" for _ in re.findall(fr"{han}[,:;?!]\s*{han}", text)]
    assert bad == []
