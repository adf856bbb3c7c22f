"""A figure in both of the book's languages from one drawing (issue 39, pipeline_kit.viz.editions): its words
translated from the catalogs, drawn in the shipped Chinese font with no missing glyph, and put back after."""

import re
import warnings

import pytest
from matplotlib.figure import Figure

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.viz import cjk_font
from pipeline_kit.viz.editions import both_editions_html, drawn_in
from pipeline_kit.viz.figure import png_bytes
from pipeline_kit.viz.timeline import Timeline, draw_timeline

HAN = re.compile(r"[\u4e00-\u9fff]")


def _figure() -> Figure:
    fig = Figure(figsize=(5, 2))
    ax = fig.subplots()
    ax.barh([0, 1], [3, 4])
    ax.set_yticks([0, 1], ["pick\nzb-h1 pp=8, balanced", "runner-up\ngpipe pp=8, balanced"])
    ax.set_xlabel("predicted step time (ms)")
    return fig


def _words(fig: Figure) -> list[str]:
    fig.draw_without_rendering()
    ax = fig.axes[0]
    return [ax.get_xlabel(), *(t.get_text() for t in ax.get_yticklabels())]


@pytest.mark.skipif(cjk_font.source_fonts() is None, reason="no Noto Sans CJK on this machine (fonts-noto-cjk)")
def test_a_figure_s_words_and_named_ticks_are_drawn_in_chinese_then_put_back():
    fig = _figure()
    english = _words(fig)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of a glyph missing from the font: a box in the picture
        with drawn_in(fig, "zh_CN", "planning") as left:
            chinese = _words(fig)
            png_bytes(fig)
    assert chinese[0] == "预测单步耗时（ms）" and chinese[1].startswith("所选配置\n") and left == []
    assert "gpipe pp=8" in chinese[2]  # a candidate's label stays as the planner prints it
    assert _words(fig) == english


def test_a_figure_is_shown_twice_the_numbers_the_same():
    fig = Figure(figsize=(6, 2))
    ax = fig.subplots()
    draw_timeline(Timeline.from_sim(simulate(build_schedule("1f1b", 2, 4), fwd=1, bwd=2)), ax=ax)
    html = both_editions_html(fig, "gpipe-1f1b")
    assert re.findall(r'class="(pk-figure-\w+)"', html) == ["pk-figure-en", "pk-figure-zh"]
    assert "data-untranslated" not in html
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    with drawn_in(fig, "zh_CN", "gpipe-1f1b"):
        fig.draw_without_rendering()
        assert [t.get_text() for t in ax.get_xticklabels()] == ticks  # (numbers are not words)
        assert HAN.search(ax.get_xlabel()) or cjk_font.source_fonts() is None
