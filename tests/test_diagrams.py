"""The book's column-width figures and diagrams (pipeline_kit.viz.diagrams) show what they claim."""

import matplotlib

matplotlib.use("Agg")

from matplotlib.patches import FancyArrowPatch  # noqa: E402

from pipeline_kit.layout import decompose_speedup  # noqa: E402
from pipeline_kit.schedules import build_schedule  # noqa: E402
from pipeline_kit.sim import simulate  # noqa: E402
from pipeline_kit.sim.blocking_p2p import runtime_program  # noqa: E402
from pipeline_kit.viz import Timeline  # noqa: E402
from pipeline_kit.viz.diagrams import (COLUMN_IN, HTMLTable, RawHTML, call_flow, memory_rows, p2p_sequence,  # noqa: E402
                                       speedup_waterfall, stacked_timelines)


def arrows(ax, prefix: str) -> list:
    return [a for a in ax.patches if isinstance(a, FancyArrowPatch) and (a.get_gid() or "").startswith(prefix)]


def gids(fig) -> list[str]:
    return [a.get_gid() for ax in fig.axes for a in ax.get_children() if a.get_gid()]


def test_html_table_escapes_text_sets_code_and_keeps_raw_html():
    html = str(HTMLTable(["a<b", "code"], [["x & y", "`F3`"], [RawHTML('<a href="l.ipynb">l</a>'), 1]]))
    assert "<th>a&lt;b</th>" in html and "<td>x &amp; y</td>" in html
    assert "<td><code>F3</code></td>" in html
    assert '<td><a href="l.ipynb">l</a></td>' in html


def test_code_in_an_html_table_breaks_only_after_punctuation():
    html = str(HTMLTable(["name"], [["`forward_backward_func()`"], ["`interleaved`"], ["`a<b.c`"]]))
    assert "<code>forward_<wbr>backward_<wbr>func(<wbr>)</code>" in html
    assert "<code>interleaved</code>" in html and "<code>a&lt;b.<wbr>c</code>" in html


def test_stacked_timelines_fit_the_column_and_the_legend_names_the_lighter_chunk():
    tls = [Timeline.from_sim(simulate(build_schedule("1f1b", 4, 8))),
           Timeline.from_sim(simulate(build_schedule("interleaved", 4, 8, 2)))]
    fig = stacked_timelines(tls)
    assert fig.get_size_inches()[0] <= COLUMN_IN
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "lighter: chunk 1" in labels and "idle (bubble)" in labels
    assert all(ax.get_legend() is None for ax in fig.axes)  # one legend, under the figure


def test_memory_rows_mark_every_ranks_peak():
    tls = {name: Timeline.from_sim(simulate(build_schedule(name, 4, 8))) for name in ("gpipe", "1f1b")}
    fig = memory_rows(tls)
    assert sum(g.startswith("peak:") for g in gids(fig)) == 2 * 4
    assert fig.get_size_inches()[0] <= COLUMN_IN


def test_p2p_sequence_shows_the_circular_wait_and_the_completed_exchanges():
    sched = build_schedule("1f1b", 2, 3)
    naive = [runtime_program(sched, r, send="send") for r in range(2)]
    batched = []
    for prog in naive:
        out = []
        for item in prog:
            if isinstance(item, tuple) and item[0] == "recv" and out and isinstance(out[-1], tuple) \
                    and out[-1][0] == "send":
                out[-1] = [out[-1], item]
            else:
                out.append(item)
        batched.append(out)
    fig = p2p_sequence({"naive": naive, "batched": batched})
    left, right = fig.axes
    assert len(arrows(left, "wait")) == 2 and "circular wait" in left.get_title()
    assert not arrows(right, "wait") and len(arrows(right, "msg")) == 2 * 3 and "completes" in right.get_title()


def test_speedup_waterfall_ends_at_the_measured_speedup():
    f = [1.0] * 7 + [2.0]
    rows = decompose_speedup(8, 16, f, [2 * x for x in f], p2p_latency=0.05, measured=2.59)
    fig = speedup_waterfall(rows, result_label="measured")
    ax = fig.axes[0]
    bars = {p.get_gid(): p for p in ax.patches if p.get_gid()}
    assert bars["bar:ideal"].get_height() == 8
    assert abs(bars["bar:result"].get_height() - 2.59) < 1e-9
    for prev, row in zip(rows, rows[1:]):  # each factor's bar spans what it took away
        bar = bars[f"bar:{row.name}"]
        assert abs(bar.get_y() - row.speedup) < 1e-9 and abs(bar.get_height() - (prev.speedup - row.speedup)) < 1e-9
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "measured"


def test_call_flow_draws_one_column_per_family():
    fams = [dict(condition=f"c{i}", name=f"f{i}", steps=["a", "b"]) for i in range(3)]
    fig = call_flow(fams)
    g = gids(fig)
    assert "selector" in g and sum(x.startswith("family:") for x in g) == 3
    assert sum(x.startswith("step:") for x in g) == 6
