"""The book's column-width figures and diagrams (pipeline_kit.viz.diagrams) show what they claim."""

import matplotlib

matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.markers import MarkerStyle  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402
from matplotlib.path import Path  # noqa: E402

from pipeline_kit.layout import decompose_speedup  # noqa: E402
from pipeline_kit.schedules import build_schedule  # noqa: E402
from pipeline_kit.sim import simulate  # noqa: E402
from pipeline_kit.sim.blocking_p2p import runtime_program  # noqa: E402
from pipeline_kit.schedules import FAMILIES  # noqa: E402
from pipeline_kit.viz import Timeline  # noqa: E402
from pipeline_kit.viz.timeline import LABEL_PT  # noqa: E402
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


# The book's figure of the eight families: two to a figure (book/chapters/zero-bubble.md).
FAMILY_PAIRS = [("gpipe", "1f1b"), ("interleaved", "looped-bfs"), ("zb-h1", "interleaved-zb"), ("zbv", "dualpipev")]


def numbered_boxes(fig) -> list[dict]:
    """Every box of a drawn figure, as the final layout puts it on the canvas (pixels), with the number drawn in it:
    its width and height in pixels (0 when the box has none) and its size in points."""
    FigureCanvasAgg(fig).draw()  # the layout as saved
    px_per_pt = fig.dpi / 72
    out = []
    for ax in fig.axes:
        boxes = []
        for patch in ax.artists + ax.patches:
            if not (patch.get_gid() or "").startswith("ops:"):
                continue
            path = patch.get_path()
            corners = ax.transData.transform(path.vertices)  # 5 vertices a box: MOVETO, 3 LINETO, CLOSEPOLY
            for i in [i for i, c in enumerate(path.codes) if c == Path.MOVETO]:
                (x0, y0), (x1, y1) = corners[i], corners[i + 2]
                boxes.append({"kind": patch.get_gid().split(":")[1], "x0": x0, "x1": x1, "y0": y0, "y1": y1,
                              "w": 0.0, "h": 0.0, "pt": 0.0})
        for line in ax.lines:
            if not (line.get_gid() or "").startswith("labels:"):
                continue
            style = MarkerStyle(line.get_marker())
            ext = style.get_path().transformed(style.get_transform()).get_extents()  # at markersize 1
            size = line.get_markersize()
            for x, y in ax.transData.transform(list(zip(line.get_xdata(), line.get_ydata()))):
                box = next(b for b in boxes if b["x0"] < x < b["x1"] and b["y0"] < y < b["y1"])
                assert box["w"] == 0, "two numbers in one box"
                box.update(w=ext.width * size * px_per_pt, h=ext.height * size * px_per_pt, pt=ext.height * size)
        out += boxes
    return out


def test_every_number_fits_inside_its_box_when_timelines_share_a_long_time_axis():
    """The why-pp figure: one piece (makespan 96) above 1F1B's eight microbatches (33) on one axis.  Numbers sized
    for a timeline's own makespan read "04152637" across the short one's boxes; they must fit the box as drawn."""
    naive = Timeline.from_sim(simulate(build_schedule("1f1b", 4, 1), fwd=8, bwd=16))
    piped = Timeline.from_sim(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=2))
    boxes = numbered_boxes(stacked_timelines([naive, piped]))
    numbered = [b for b in boxes if b["w"]]
    assert numbered and all(b["w"] < b["x1"] - b["x0"] and b["h"] < b["y1"] - b["y0"] for b in numbered)
    assert all(b["pt"] >= LABEL_PT[0] for b in numbered)  # what is drawn is readable; the rest is left out
    assert all(b["w"] for b in boxes if b["kind"] == "B")  # the backwards are wide enough to carry theirs


def test_the_eight_families_are_drawn_two_to_a_figure_each_legible_at_the_column_width():
    assert sorted(sum(FAMILY_PAIRS, ())) == sorted(FAMILIES)
    for pair in FAMILY_PAIRS:
        tls = [Timeline.from_sim(simulate(build_schedule(name, 4, 8), fwd=1, bwd=2), title=name) for name in pair]
        fig = stacked_timelines(tls, row_in=0.42)
        w, h = fig.get_size_inches()
        assert w <= COLUMN_IN and h <= 1.5 * w, (pair, w, h)
        assert [ax.get_title() for ax in fig.axes] == list(pair)  # each panel titled
        boxes = numbered_boxes(fig)
        assert len(boxes) == sum(build_schedule(name, 4, 8).num_ops for name in pair)
        # every box carries its microbatch number, readable and inside the box
        assert all(b["pt"] >= LABEL_PT[0] and b["w"] < b["x1"] - b["x0"] for b in boxes), pair
        hatched = {p.get_gid().split(":")[1]: bool(p.get_hatch()) for ax in fig.axes for p in ax.artists
                   if (p.get_gid() or "").startswith("ops:")}
        assert not any(hatched.get(k) for k in "FBI") and hatched.get("W", True)  # W hatched, the others plain
        legend = {t.get_text(): h for leg in fig.legends for t, h in zip(leg.get_texts(), leg.legend_handles)}
        if "W" in hatched:  # the figure's own legend shows W as it is drawn
            assert legend["weight-grad"].get_hatch() and not legend["input-grad"].get_hatch()


def test_dependency_arrows_reach_from_row_to_row_thick_enough_to_see():
    tl = Timeline.from_sim(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=2))
    fig = stacked_timelines([tl], arrows=True, phases=True, row_in=0.55)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    row_px = abs(ax.transData.transform((0, 1))[1] - ax.transData.transform((0, 0))[1])
    arrows = [a for a in ax.texts if a.get_gid() == "arrows"]
    assert len(arrows) == len(tl.transfers)
    renderer = canvas.get_renderer()
    for a in arrows:
        bbox = a.arrow_patch.get_window_extent(renderer)
        assert bbox.height >= 0.35 * row_px and bbox.width >= 6  # a line across the gap and a head you can see
        assert a.arrow_patch.get_linewidth() >= 1.0 and a.get_zorder() > 3  # drawn over the boxes and their numbers
