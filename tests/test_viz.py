"""Figures are checked for what they show: one box per op, the right colours and labels, the bubble, the axes."""

import json
import re
import subprocess
import sys

import pytest

matplotlib = pytest.importorskip("matplotlib")

from matplotlib.colors import to_rgb

from pipeline_kit.schedules import SCHEDULES, build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.viz import (
    KIND_COLORS,
    Timeline,
    animate,
    bubble_vs_microbatches,
    draw_comparison,
    draw_memory,
    draw_timeline,
    efficiency_vs_imbalance,
    interleaved_vs_not,
    live_activations,
    metrics_html,
    peak,
    render,
    to_chrome_trace,
)
from pipeline_kit.viz.timeline import count_boxes


def sim_timeline(name, pp, m, v=None, **costs):
    return Timeline.from_sim(simulate(build_schedule(name, pp, m, v), **costs))


def op_patches(ax):
    return {p.get_gid(): p for p in ax.patches if (p.get_gid() or "").startswith("ops:")}


def labels_of(ax):
    out = []
    for line in ax.lines:
        gid = line.get_gid() or ""
        if gid.startswith("labels:"):
            out += [int(gid[7:])] * len(line.get_xdata())
    return sorted(out)


@pytest.mark.parametrize("name,v", [("gpipe", None), ("1f1b", None), ("interleaved", 2), ("zb-h1", None),
                                    ("looped-bfs", 2), ("interleaved-zb", 2), ("zbv", None), ("dualpipev", None)])
def test_one_box_per_op_with_its_kind_colour_and_microbatch_label(name, v):
    tl = sim_timeline(name, 4, 8, v)
    ax = draw_timeline(tl)
    patches = op_patches(ax)
    sched = build_schedule(name, 4, 8, v)
    assert sum(count_boxes(p) for p in patches.values()) == sched.num_ops
    for kind in "FBIW":
        n = sum(1 for ops in sched.ranks for op in ops if op.kind == kind)
        assert sum(count_boxes(p) for g, p in patches.items() if g.startswith(f"ops:{kind}:")) == n
    for gid, patch in patches.items():
        kind, chunk = gid.split(":")[1], int(gid.split(":")[2])
        if chunk == 0:  # chunk 0 in the kind's own colour; later chunks lighter
            assert patch.get_facecolor()[:3] == pytest.approx(to_rgb(KIND_COLORS[kind]))
        else:
            assert sum(patch.get_facecolor()[:3]) > sum(to_rgb(KIND_COLORS[kind]))
    assert labels_of(ax) == sorted(op.microbatch for ops in sched.ranks for op in ops)
    expected = [f"rank {r}" + (f"\nstages {', '.join(map(str, sorted(sched.stages_of(r))))}" if sched.chunks > 1
                               else "") for r in range(4)]
    assert sorted(t.get_text() for t in ax.get_yticklabels()) == expected
    assert ax.get_xlabel() == "time units"
    assert ax.get_xlim()[1] >= tl.makespan


def test_kind_colours_are_distinct_and_colour_blind_safe():
    assert len(set(KIND_COLORS.values())) == 4
    assert KIND_COLORS == {"F": "#0072B2", "B": "#D55E00", "I": "#E69F00", "W": "#009E73"}  # Okabe-Ito


def test_bubble_is_drawn_where_ranks_idle():
    tl = sim_timeline("1f1b", 4, 8, fwd=1, bwd=2)
    ax = draw_timeline(tl)
    idle = [c for c in ax.collections if c.get_gid() == "idle"]
    assert len(idle) == 1 and idle[0].get_hatch() == "////"
    total_idle = sum(b - a for r in range(4) for a, b in tl.idle_gaps(r))
    assert total_idle == pytest.approx(4 * 33 - 4 * 24)  # idle = pp x makespan - busy, bubble 9/33 per rank


def test_phases_and_first_backward_answer_m043():
    tl = sim_timeline("1f1b", 4, 8, fwd=1, bwd=2)
    fb = tl.first_backward()
    assert (fb["op"], fb["rank"], fb["start"]) == ("B0", 3, 4)  # the last stage, right after F0 reaches it
    # rank 0: warmup F0-F2, steady F3 B0 ... F7 B4 (it waits for B0 inside the first pair), cooldown B5-B7
    assert tl.phases(0) == {"warmup": (0, 3), "steady": (3, 24), "cooldown": (25, 33)}
    assert set(tl.phases(3)) == {"steady"}  # the last rank has no warmup and no cooldown
    ax = draw_timeline(tl, phases=True, first_backward=True, arrows=True)
    assert {p.get_gid() for p in ax.patches if (p.get_gid() or "").startswith("phase:0:")} == \
        {"phase:0:warmup", "phase:0:steady", "phase:0:cooldown"}
    assert any(line.get_gid() == "first-backward" for line in ax.lines)
    assert sum(1 for t in ax.texts if t.get_gid() == "arrows") == len(tl.transfers) == 2 * 3 * 8


def test_trace_timeline_draws_waits_as_idle(tmp_path):
    res = simulate(build_schedule("1f1b", 2, 2), fwd=0.001, bwd=0.002)
    trace = {**res.to_dict(), "waits": [{"rank": 1, "peer": 0, "start": 0.0, "end": 0.001}]}
    trace["timeline"] = [{**e, "start": 0.0 if (e["rank"], e["op"]) == (1, "F0") else e["start"]}
                         for e in trace["timeline"]]  # a measured op includes the wait for its input
    tl = Timeline.from_trace(trace)
    f0 = next(o for o in tl.ops if (o["rank"], o["op"]) == (1, "F0"))
    assert f0["start"] == pytest.approx(1.0) and tl.unit == "ms"  # drawn from the end of the wait
    ax = draw_timeline(tl)
    assert any(line.get_gid() == "wait" for line in ax.lines)


def test_simulated_and_measured_share_one_time_axis():
    fig = draw_comparison(sim_timeline("1f1b", 4, 8), sim_timeline("gpipe", 4, 8))
    top, bottom = fig.axes
    assert top.get_shared_x_axes().joined(top, bottom)


@pytest.mark.parametrize("name,v", [("gpipe", None), ("1f1b", None), ("interleaved", 2), ("zb-h1", None)])
def test_memory_peaks_equal_the_simulator(name, v):
    res = simulate(build_schedule(name, 4, 8, v))
    tl = Timeline.from_sim(res)
    assert [peak(live_activations(tl, r))[1] for r in range(4)] == res.peak_activations
    fig = draw_memory({name: tl})
    ax = fig.axes[0]
    assert sorted(line.get_gid() for line in ax.lines if line.get_gid().startswith("memory:")) == \
        [f"memory:{r}" for r in range(4)]
    peaks = {line.get_gid(): line.get_ydata()[0] for line in ax.lines if line.get_gid().startswith("peak:")}
    assert [peaks[f"peak:{r}"] for r in range(4)] == pytest.approx([p / res.schedule.chunks
                                                                    for p in res.peak_activations])


def test_memory_side_by_side():
    fig = draw_memory({n: sim_timeline(n, 4, 8, v) for n, v in (("gpipe", None), ("1f1b", None),
                                                               ("interleaved", 2))})
    assert [ax.get_title() for ax in fig.axes] == ["gpipe", "1f1b", "interleaved"]


def test_sweeps_draw_the_formula_over_exact_simulated_points():
    ax = bubble_vs_microbatches(pps=(2, 4), microbatches=range(1, 9)).axes[0]
    lines = {line.get_gid(): line for line in ax.lines}
    for pp in (2, 4):
        assert list(lines[f"simulated:{pp}"].get_ydata()) == pytest.approx(list(lines[f"formula:{pp}"].get_ydata()))
    ax = interleaved_vs_not(pp=4, microbatches=(4, 8), chunks=(1, 2)).axes[0]
    lines = {line.get_gid(): line for line in ax.lines}
    assert list(lines["simulated:v2"].get_ydata()) == pytest.approx([3 / 11, 3 / 19])
    ax = efficiency_vs_imbalance(pp=4, microbatches=8, slowdowns=(1.0, 2.0)).axes[0]
    eff = {line.get_gid(): list(line.get_ydata()) for line in ax.lines}["simulated"]
    assert eff[0] == pytest.approx(8 / 11) and eff[1] < eff[0]


def test_chrome_trace_has_one_event_per_op_on_one_track_per_rank():
    tl = sim_timeline("interleaved", 2, 2, 2)
    trace = to_chrome_trace(tl)
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(ops) == 16 and {e["tid"] for e in ops} == {0, 1}
    assert {e["name"] for e in ops} >= {"F0c0", "B1c1"}
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    json.dumps(trace)


def test_explorer_render_and_metrics():
    _, metrics = render("interleaved", 4, 8, 2, slow_stage=1, slowdown=2.0, p2p_latency=0.1)
    assert metrics["makespan"] > 0 and len(metrics["peak_activations"]) == 4
    assert "<table>" in metrics_html(metrics)
    _, metrics = render("interleaved", 4, 6, 2)
    assert "last group would hold 2 < pp=4" in metrics["error"]
    assert "not a valid configuration" in metrics_html(metrics)
    # every family is in the explorer; the textbook formula only for those without a split backward
    _, metrics = render("looped-bfs", 4, 8, 2)
    assert metrics["formula"] == pytest.approx(3 / 19) == pytest.approx(metrics["bubble_fraction"])
    _, metrics = render("zbv", 4, 8, 3)
    assert 'zbv needs --chunks 2, got 3: "ZBV requires exactly 2 stages per rank' in metrics["error"]
    assert render("dualpipev", 4, 8)[1]["formula"] is None


def test_explorer_redraws_into_one_figure_exactly_as_a_fresh_one():
    """The explorer reuses one figure: nothing of an earlier configuration (or error) may linger in it."""
    from pipeline_kit.viz.figure import png_bytes
    fig = render("interleaved", 8, 32, 4, slow_stage=3, slowdown=2.0, p2p_latency=0.2)[0]
    assert "error" in render("interleaved", 4, 6, 2, fig=fig)[1]
    assert render("gpipe", 2, 4, fig=fig)[0] is fig
    assert png_bytes(fig, tight=False) == png_bytes(render("gpipe", 2, 4)[0], tight=False)


def test_explorer_widget_draws_a_picture_and_redraws_it():
    """The timeline is PNG bytes in an ``ipywidgets.Image`` (no backend involved); a control redraws it."""
    w = pytest.importorskip("ipywidgets")
    from pipeline_kit.viz import explorer
    panel = explorer()
    sliders = [c for box in panel.children[:2] for c in box.children]
    assert [s.description for s in sliders] == ["schedule", "pp", "microbatches", "chunks (v)", "B / F",
                                               "slow stage", "slowdown", "P2P latency"]
    ctl = {s.description: s for s in sliders}
    image, table = panel.children[2:]
    assert isinstance(image, w.Image) and bytes(image.value).startswith(b"\x89PNG")
    before = (bytes(image.value), table.value)
    ctl["microbatches"].value = 9
    assert bytes(image.value) != before[0] and "0.2500" in table.value and "0.2727" in before[1]
    assert list(ctl["schedule"].options) == list(SCHEDULES)
    ctl["schedule"].value = "zbv"
    assert not ctl["chunks (v)"].disabled and "0.0588" not in table.value  # M = 9: bubble 3/(6*9+3)
    assert f"{3 / 57:.4f}" in table.value


def test_explorer_slow_stage_is_a_choice_of_rank():
    pytest.importorskip("ipywidgets")
    from pipeline_kit.viz import explorer
    ctl = {c.description: c for box in explorer(pp=4).children[:2] for c in box.children}
    slow = ctl["slow stage"]
    assert slow.options == (("none", -1), ("rank 0", 0), ("rank 1", 1), ("rank 2", 2), ("rank 3", 3))
    assert slow.label == "none" and ctl["slowdown"].disabled
    slow.value = 3
    assert not ctl["slowdown"].disabled
    ctl["pp"].value = 6  # more ranks: the choice stays
    assert slow.value == 3 and slow.options[-1] == ("rank 5", 5)
    ctl["pp"].value = 2  # rank 3 is gone: back to none
    assert slow.value == -1 and [label for label, _ in slow.options] == ["none", "rank 0", "rank 1"]
    with pytest.raises(TypeError, match="no control"):
        explorer(stages=4)


def test_animation_steps_slot_by_slot():
    tl = sim_timeline("1f1b", 2, 2)
    anim = animate(tl)
    starts = sorted({o["start"] for o in tl.ops})
    assert len(list(anim.new_frame_seq())) == len(starts)
    anim._func(0)
    first = sum(count_boxes(p) for p in anim._fig.axes[0].patches if (p.get_gid() or "").startswith("ops:"))
    anim._func(len(starts) - 1)
    last = sum(count_boxes(p) for p in anim._fig.axes[0].patches if (p.get_gid() or "").startswith("ops:"))
    assert (first, last) == (1, len(tl.ops))  # frame 0: only F0 on rank 0 has started
    html = anim.to_jshtml()
    assert "<script" in html and html.count("frames[") >= len(starts)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.slow
def test_draw_command_png_svg_perfetto(tmp_path):
    png, svg, pf = tmp_path / "t.png", tmp_path / "t.svg", tmp_path / "t.json"
    proc = run_cli("draw", "--schedule", "zbv", "--pp", "4", "--microbatches", "8", "-o", str(png), "--perfetto",
                   str(pf), "--phases", "--first-backward", "--arrows")
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert len([e for e in json.loads(pf.read_text())["traceEvents"] if e["ph"] == "X"]) == 4 * 8 * 2 * 3  # F, I, W
    trace = tmp_path / "run.json"
    res = simulate(build_schedule("gpipe", 2, 2), fwd=0.001, bwd=0.002)
    trace.write_text(json.dumps({**res.to_dict(), "waits": []}))
    proc = run_cli("draw", "--trace", str(trace), "-o", str(svg))
    assert proc.returncode == 0, proc.stderr
    assert svg.read_text().lstrip().startswith("<?xml")
    proc = run_cli("draw", "--trace", str(trace), "--compare", "-o", str(png))
    assert proc.returncode == 0, proc.stderr


def test_simulation_from_a_trace_reproduces_it_on_one_time_axis():
    from pipeline_kit.layout.measure import simulate_from_trace
    res = simulate(build_schedule("1f1b", 4, 8), fwd=[0.001, 0.001, 0.002, 0.001], bwd=[0.002, 0.002, 0.004, 0.002])
    trace = {**res.to_dict(), "waits": []}
    sim = Timeline.from_sim(simulate_from_trace(trace, scale=1e3), unit="ms")
    real = Timeline.from_trace(trace)
    assert sim.makespan == pytest.approx(real.makespan)
    fig = draw_comparison(sim, real)
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()


@pytest.mark.parametrize("args,message", [
    (["draw", "--pp", "4", "-o", "x.png"], "give --pp and --microbatches"),
    (["draw", "--pp", "4", "-m", "4", "-o", "x.jpg"], "argument -o: 'x.jpg' must end in .png, .svg or .pdf"),
    (["draw", "--pp", "4", "-m", "4"], "nothing to write"),
    (["draw", "--pp", "4", "-m", "4", "--compare", "-o", "x.png"], "--compare needs --trace FILE"),
    (["draw", "--trace", "/nonexistent.json", "-o", "x.png"], "--trace /nonexistent.json: cannot read it"),
])
def test_draw_bad_input_one_line(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def test_v_placement_is_labelled_on_the_rows_legend_and_title():
    ax = draw_timeline(sim_timeline("zbv", 4, 8))
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "rank 0\nstages 0, 7", "rank 1\nstages 1, 6", "rank 2\nstages 2, 5", "rank 3\nstages 3, 4"]
    assert "lighter: chunk 1 = stage 7-rank (V)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_title() == "zbv, pp=4, M=8, v=2, V placement"


# -- the planner's plot ------------------------------------------------------------------------------------------
def _plan(gpus=8, gb=1.5, batch=16, schedules=None):
    from pipeline_kit.layout import load_model_spec
    from pipeline_kit.plan import GB, Hardware, plan
    return plan(load_model_spec("bank-pp8"), Hardware(gpus, gb * GB), global_batch=batch, model_name="bank-pp8",
                schedules=schedules)


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _x_labels(ax):
    ax.figure.draw_without_rendering()
    return [t.get_text() for t in ax.get_xticklabels() if t.get_text()]


def test_plan_plot_counts_every_candidate_once_as_its_legend_does():
    """The title's counts add up to every candidate, and its "too big" is the legend's crosses."""
    from pipeline_kit.viz.plan import plan_plot
    for search, title in (
            (_plan(), "24 candidates fit, 65 too big, 4 refused by the family"),
            (_plan(gb=0.7, batch=12), "0 candidates fit, 48 too big, 26 refused by the batch or the family"),
            (_plan(gb=1.0, batch=12), "1 candidate fits, 47 too big, 26 refused by the batch or the family"),
            (_plan(gpus=2, gb=2, schedules=["interleaved"]), "5 candidates fit, 1 too big, 4 refused by the family"),
            (_plan(gb=80), "89 candidates fit, 4 refused by the family")):
        ax = plan_plot(search).axes[0]
        assert ax.get_title() == f"bank-pp8 on {search.hardware.gpus} GPUs: {title}"
        numbers = [int(n) for n in re.findall(r"(\d+) (?:candidates? fits?|too big|refused)", title)]
        assert sum(numbers) == len(search.candidates)
        big = sum(c.refusal == "memory" for c in search.candidates)
        assert [t for t in _legend(ax) if t.startswith("too big")] == ([f"too big ({big}; drawn at the top)"]
                                                                       if big else [])
        assert (f"{big} too big" in title) == bool(big)


def test_a_logarithmic_memory_axis_has_round_plain_labels():
    from pipeline_kit.viz.plan import memory_ticks, plan_plot
    search = _plan()
    ax = plan_plot(search).axes[0]
    assert ax.get_xscale() == "log"
    labels = _x_labels(ax)
    assert labels == ["1", "1.2", "1.5", "2", "2.5", "3"]  # GB, plain numbers, across the data
    memory = [c.worst_memory_bytes / 1e9 for c in search.candidates if c.worst_memory_bytes]
    assert float(labels[0]) < 1.5 * min(memory) and float(labels[-1]) > max(memory) / 1.5
    # the book sets the scale itself after the call: the labels are still round numbers, not powers of ten
    ax = plan_plot(_plan(gb=80)).axes[0]
    assert ax.get_xscale() == "linear"
    ax.set_xscale("log")
    assert _x_labels(ax) == ["1", "2", "5", "10", "20", "50"]
    # any view: 5 to 8 labels where round values allow, plain numbers
    assert memory_ticks(0.02, 3000) == [0.1, 1, 10, 100, 1000]
    assert memory_ticks(1e-3, 1e5) == [0.001, 0.1, 10, 1000, 100000]  # (nine decades: every other one)
    narrow = memory_ticks(1.21, 1.29)
    assert len(narrow) >= 4 and all(1.21 <= v <= 1.29 for v in narrow) and f"{narrow[1]:g}" == "1.23"
    assert memory_ticks(0, 1) == memory_ticks(2, 1) == []


def test_plan_plot_marks_candidates_and_can_leave_the_pick_unmarked(tmp_path):
    """``marks`` draws each candidate as a labelled black star (one that does not fit: at its memory on the top
    edge, as the crosses); ``show_pick=False`` leaves out the pick's ring and name; the default keeps them."""
    from pipeline_kit.arguments import ArgumentError
    from pipeline_kit.viz.plan import plan_plot, save_plan_plot
    search = _plan()
    best = search.candidates[search.best]
    ax = plan_plot(search).axes[0]
    assert "the pick" in _legend(ax) and [t.get_text() for t in ax.texts] == [best.label()]
    assert not [c for c in ax.collections if (c.get_gid() or "").startswith("mark:")]
    mine = next(c for c in search.candidates if c.refusal == "memory" and c.schedule == "zbv")
    base = next(c for c in search.candidates if c.fits and c.schedule == "1f1b" and c.layout_kind == "even")
    ax = plan_plot(search, show_pick=False, marks=[("yours", mine), ("plain 1F1B", base)]).axes[0]
    assert "the pick" not in _legend(ax) and best.label() not in [t.get_text() for t in ax.texts]
    assert sorted(t.get_text() for t in ax.texts) == ["plain 1F1B", "yours (too big)"]
    stars = {c.get_gid(): c for c in ax.collections if (c.get_gid() or "").startswith("mark:")}
    top = max(1e3 * c.step_time_s for c in search.candidates if c.fits)
    assert stars["mark:yours"].get_offsets().tolist() == [[mine.worst_memory_bytes / 1e9, top]]
    assert stars["mark:plain 1F1B"].get_offsets().tolist() == [[base.worst_memory_bytes / 1e9,
                                                                 1e3 * base.step_time_s]]
    assert all(to_rgb(c.get_facecolor()[0]) == (0, 0, 0) for c in stars.values())
    out = tmp_path / "plan.png"
    save_plan_plot(search, str(out), show_pick=False, marks=[("yours", mine)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # marks that cannot be drawn: one line naming the mark
    family = next(c for c in search.candidates if c.refusal == "family")
    for marks, words in (([("x", "1f1b")], "argument marks[0]: expected a (label, Candidate) pair, got ('x', '1f1b')"),
                         ("yours", "argument marks: expected a list of (label, Candidate) pairs, got str"),
                         ([("yours", family)], "argument marks[0]: 'yours' (")):
        with pytest.raises(ArgumentError) as err:
            plan_plot(search, marks=marks)
        assert str(err.value).startswith("plan_plot: ") and words in str(err.value), str(err.value)
    assert "has no memory to draw: it was refused before it was sized (interleaved refuses" in str(err.value)
    with pytest.raises(ArgumentError, match="argument show_pick: expected True or False"):
        plan_plot(search, show_pick="no")
