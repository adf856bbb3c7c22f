"""The schedule explorer: change pp, M, chunks, F:B, a slow stage, P2P latency -- see the step change.

:func:`render` is the pure part (a figure and a metrics dict), so it is benchmarked and tested
without a kernel; :func:`explorer` wraps it in ipywidgets for a live notebook.  Where no kernel
runs (the static book), :func:`animation_html` gives a self-contained JS/HTML animation that
steps through a schedule slot by slot.
"""

from __future__ import annotations

import html

from matplotlib.figure import Figure

from ..schedules import CHUNKED, SCHEDULES, ScheduleConfigError, build_schedule
from ..sim import simulate
from .figure import FigureTuple, HTMLText, KitAnimation, KitFigure, png_bytes
from .timeline import Timeline, _boxes_path, draw_timeline


def render(schedule: str = "1f1b", pp: int = 4, microbatches: int = 8, chunks: int = 2, fb_ratio: float = 2.0,
           slow_stage: int = -1, slowdown: float = 1.0, p2p_latency: float = 0.0, *,
           fig: Figure | None = None) -> tuple[Figure, dict]:
    """Simulate and draw one configuration; ``slow_stage = -1`` means every stage is equal.

    ``fig``: redraw into this figure (one ``render`` made) instead of a new one.  The explorer keeps
    one figure for its whole life: matplotlib then reuses its tick artists and its text-size cache,
    which makes a pp = 8, M = 32 redraw about a third cheaper than drawing a fresh figure.

    The pair is a :class:`~pipeline_kit.viz.figure.FigureTuple`: it unpacks as any tuple, and as a
    notebook cell's last value it shows the figure.
    """
    fig = fig if fig is not None else KitFigure(dpi=90)
    ax = fig.axes[0] if fig.axes else fig.subplots()
    for artist in [*fig.texts, *ax.patches, *ax.collections, *ax.lines, *ax.texts, *ax.artists]:
        artist.remove()
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    try:
        sched = build_schedule(schedule, pp, microbatches, chunks if schedule in CHUNKED else None)
    except ScheduleConfigError as exc:
        fig.set_size_inches(8, 1.6)
        ax.set_visible(False)
        fig.text(0.02, 0.5, f"not a valid configuration: {exc}", fontsize=9, wrap=True, va="center")
        return FigureTuple((fig, {"error": str(exc)}))
    factors = [1.0] * pp
    if 0 <= slow_stage < pp:
        factors[slow_stage] = slowdown
    res = simulate(sched, fwd=factors, bwd=[fb_ratio * f for f in factors], p2p_latency=p2p_latency)
    height = 0.42 * pp + 1.5
    fig.set_size_inches(11, height)
    fig.subplots_adjust(left=0.08, right=0.83, bottom=0.55 / height, top=1 - 0.35 / height)
    ax.set_visible(True)
    draw_timeline(Timeline.from_sim(res), ax, labels="auto", tight=False)
    metrics = {"makespan": res.makespan, "ideal_time": res.ideal_time, "bubble_fraction": res.bubble_fraction,
               "bubble_over_ideal": res.bubble_over_ideal, "peak_activations": res.peak_activations,
               "formula": None if sched.splits_backward else (pp - 1) / (sched.chunks * microbatches + pp - 1)}
    return FigureTuple((fig, metrics))


def metrics_html(metrics: dict) -> HTMLText:
    """:func:`render`'s metrics as an HTML table (a ``str``, rendered when it is a cell's value)."""
    if "error" in metrics:
        return HTMLText(f"<p><b>not a valid configuration:</b> {html.escape(metrics['error'])}</p>")
    rows = [("makespan", f"{metrics['makespan']:.4g}"), ("ideal time (busiest rank)", f"{metrics['ideal_time']:.4g}"),
            ("bubble fraction (idle / total)", f"{metrics['bubble_fraction']:.4f}"),
            ("bubble / ideal (Megatron)", f"{metrics['bubble_over_ideal']:.4f}"),
            ("textbook formula", "-" if metrics["formula"] is None else f"{metrics['formula']:.4f}"),
            ("peak live activations per rank", str(metrics["peak_activations"]))]
    body = "".join(f"<tr><td>{k}</td><td style='text-align:right'>{v}</td></tr>" for k, v in rows)
    return HTMLText(f"<table>{body}</table>")


def slow_stage_options(pp: int) -> list[tuple[str, int]]:
    """The slow-stage choices for ``pp`` ranks, as (label, value): "none" (-1), then rank 0 ... pp - 1."""
    return [("none", -1)] + [(f"rank {r}", r) for r in range(pp)]


def explorer(**initial):
    """An ipywidgets panel: controls on top, the timeline picture and a metrics table below.

    ``initial`` sets controls by :func:`render`'s argument names, e.g. ``explorer(pp=8, microbatches=32)``.

    The timeline is rasterised here with Agg and shipped as PNG bytes in an ``ipywidgets.Image``, not
    shown with ``display(fig)`` in an ``Output``: the picture then appears in any kernel, whatever
    matplotlib backend is (or is not) active, and a redraw replaces one image's bytes in place
    instead of clearing and re-rendering an output area (no flicker, no layout jump).
    """
    import ipywidgets as w

    controls = {
        "schedule": w.Dropdown(options=list(SCHEDULES), value="1f1b", description="schedule"),
        "pp": w.IntSlider(value=4, min=1, max=8, description="pp"),
        "microbatches": w.IntSlider(value=8, min=1, max=32, description="microbatches"),
        "chunks": w.IntSlider(value=2, min=2, max=4, description="chunks (v)"),
        "fb_ratio": w.FloatSlider(value=2.0, min=0.5, max=4.0, step=0.25, description="B / F"),
        "slow_stage": w.Dropdown(options=slow_stage_options(4), value=-1, description="slow stage"),
        "slowdown": w.FloatSlider(value=1.5, min=1.0, max=4.0, step=0.25, description="slowdown"),
        "p2p_latency": w.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.05, description="P2P latency"),
    }
    for c in controls.values():
        c.style.description_width = "initial"  # "microbatches" in full, not "microbatc..."
    unknown = set(initial) - set(controls)
    if unknown:
        raise TypeError(f"explorer() has no control {sorted(unknown)}; it has {list(controls)}")
    if "pp" in initial:
        controls["slow_stage"].options = slow_stage_options(initial["pp"])
    for name, value in initial.items():
        controls[name].value = value
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))
    table = w.HTML()
    fig = KitFigure(dpi=90)  # one figure, redrawn in place (see render)
    holding = []  # non-empty while the controls are being adjusted together: one redraw afterwards

    def update(_=None):
        if holding:
            return
        values = {k: c.value for k, c in controls.items()}
        controls["chunks"].disabled = values["schedule"] not in CHUNKED
        controls["slowdown"].disabled = values["slow_stage"] < 0
        _, metrics = render(**values, fig=fig)
        image.value = png_bytes(fig, tight=False)  # render() fixed the margins: one draw, no bbox search
        table.value = str(metrics_html(metrics))

    def follow_pp(change):  # the slow-stage menu lists the ranks there are; a vanished rank becomes "none"
        slow = controls["slow_stage"]
        holding.append(True)
        try:
            keep = slow.value if slow.value < change["new"] else -1
            slow.options = slow_stage_options(change["new"])
            slow.value = keep
        finally:
            holding.pop()

    controls["pp"].observe(follow_pp, names="value")  # registered first: runs before the redraw
    for c in controls.values():
        c.observe(update, names="value")
    update()
    return w.VBox([w.HBox(list(controls.values())[:4]), w.HBox(list(controls.values())[4:]), image, table])


def animate(tl: Timeline, max_frames: int = 60, interval_ms: int = 250) -> KitAnimation:
    """Reveal the timeline slot by slot: frame k shows every op started by the k-th start time.

    A ``FuncAnimation`` (``.save``, ``.to_jshtml`` ...) that, as a notebook cell's last value, shows
    the JS/HTML player of :func:`animation_html`.
    """
    ax = draw_timeline(tl, labels=False)
    fig = ax.figure
    y_of = {r: tl.pp - 1 - r for r in range(tl.pp)}
    starts = sorted({o["start"] for o in tl.ops})
    if len(starts) > max_frames:
        step = len(starts) / max_frames
        starts = [starts[int(i * step)] for i in range(max_frames)] + [starts[-1]]
    groups = []  # (patch, ops) for every drawn (kind, chunk)
    for patch in [p for p in ax.patches if (p.get_gid() or "").startswith("ops:")]:
        _, kind, chunk = patch.get_gid().split(":")
        groups.append((patch, [o for o in tl.ops if o["kind"] == kind and o["chunk"] == int(chunk)]))
    cursor = ax.axvline(0, color="black", lw=1.0)

    def frame(i):
        t = starts[i]
        for patch, ops in groups:
            patch.set_path(_boxes_path([o for o in ops if o["start"] <= t], y_of))
        cursor.set_xdata([t, t])
        return [p for p, _ in groups] + [cursor]

    return KitAnimation(fig, frame, frames=len(starts), interval=interval_ms, blit=False)


def animation_html(tl: Timeline, max_frames: int = 60) -> HTMLText:
    """A self-contained HTML/JS player of :func:`animate` (no kernel needed): a ``str`` to write into a
    page, which renders as the player when it is a notebook cell's value."""
    return HTMLText(animate(tl, max_frames).to_jshtml(default_mode="once"))
