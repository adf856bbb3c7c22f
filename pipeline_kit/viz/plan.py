"""The planner's picture: every candidate's step time against its worst rank's memory, the budget line and the
Pareto front -- the trade a reader would rather see than read in a table of 150 rows.

A candidate that fits is a dot coloured by family; one refused for memory is a grey cross at the memory it would
need (to the right of the budget line); one a large search left unsimulated, as it cannot tie, is a hollow circle
at its lower bound (:func:`~pipeline_kit.plan.search.settle`); the front joins the candidates no other beats on
both axes; the pick is ringed, and the candidates a reader wants to find (``marks``: their own answer, plain 1F1B)
are stars. Sized for the book's column (:data:`~pipeline_kit.viz.diagrams.COLUMN_IN`).

Why the memory axis has its own ticks: on a logarithmic axis matplotlib labels powers of ten, so memory from 1.1
to 4.3 GB read "10^0" and "2x10^0" -- two labels, in a notation a reader has to decode.  :func:`memory_ticks` picks
5 to 8 round values in GB inside the view instead, written as plain numbers, whoever made the axis logarithmic (the
book's chapter sets the scale itself after the call).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator, NullFormatter

from ..arguments import Arguments
from ..interrupts import atomic_output
from ..plan.search import GB, Candidate, Search
from ..schedules import FAMILIES
from .diagrams import COLUMN_IN
from .figure import KitFigure

FAMILY_COLORS = dict(zip(FAMILIES, ("#9e9e9e", "#1f77b4", "#ff7f0e", "#2ca02c", "#8c564b", "#d62728", "#9467bd",
                                    "#e377c2")))


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (smaller is better), by the first."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def plan_plot(search: Search, width: float = COLUMN_IN, height: float = 4.2, *, show_pick: bool = True,
              marks: Sequence[tuple[str, Candidate]] = ()) -> KitFigure:
    """Step time (ms) against worst-rank memory (GB) for every sized candidate.

    ``show_pick``: ring and name the planner's pick (False leaves it a plain dot, for a reader to find first);
    ``marks``: ``(label, candidate)`` pairs, each a black star with its label, e.g. ``[("yours", mine), ("plain
    1F1B", base)]``; a candidate that does not fit is drawn at its memory on the top edge, as the too-big crosses.
    """
    arg = Arguments("plan_plot")
    arg.boolean("show_pick", show_pick)
    marks = _checked_marks(arg, marks)
    fig = KitFigure(figsize=(width, height))
    ax = fig.add_subplot(1, 1, 1)
    budget = search.hardware.gpu_memory_bytes / GB
    fit = [c for c in search.candidates if c.fits and c.simulated]
    bounded = [search.candidates[i] for i in search.bounded]  # (a large search's: fit, but cannot tie)
    over = [c for c in search.candidates if c.refusal == "memory"]
    for name in FAMILIES:
        mine = [c for c in fit if c.schedule == name]
        if mine:
            ax.scatter([c.worst_memory_bytes / GB for c in mine], [1e3 * c.step_time_s for c in mine], s=18,
                       color=FAMILY_COLORS[name], label=name, alpha=0.85, zorder=3)
    if fit:
        pts = [(c.worst_memory_bytes / GB, 1e3 * c.step_time_s) for c in fit]
        front = pareto_front(pts)
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], color="black", lw=1, ls="--", zorder=2,
                label="Pareto front (of the simulated)" if bounded else "Pareto front")
    if bounded:
        ax.scatter([c.worst_memory_bytes / GB for c in bounded], [1e3 * c.bound_s for c in bounded], s=14,
                   facecolors="none", edgecolors="#888888", lw=0.8, zorder=1,
                   label=f"not simulated ({len(bounded)}; at a lower bound)")
    if fit and show_pick:
        best = search.candidates[search.best]
        ax.scatter([best.worst_memory_bytes / GB], [1e3 * best.step_time_s], s=120, facecolors="none",
                   edgecolors="black", lw=1.5, zorder=4, label="the pick")
        ax.annotate(best.label(), (best.worst_memory_bytes / GB, 1e3 * best.step_time_s), xytext=(8, 6),
                    textcoords="offset points", fontsize=7.5, family="monospace")  # (a label: as the CLI prints it)
    # where what has no step time is drawn: the top of what has one, or a bound
    top = max([1e3 * c.step_time_s for c in fit] + [1e3 * c.bound_s for c in bounded], default=1.0)
    for label, c in marks:
        at = (c.worst_memory_bytes / GB, 1e3 * (c.step_time_s if c.simulated else c.bound_s) if c.fits else top)
        ax.scatter(*at, marker="*", s=110, color="black", zorder=5, gid=f"mark:{label}")
        ax.annotate(label + ("" if c.fits else " (too big)"), at, xytext=(6, -11), textcoords="offset points",
                    fontsize=7.5, fontweight="bold")
    if over:
        ax.scatter([c.worst_memory_bytes / GB for c in over], [top] * len(over), marker="x", color="#bbbbbb",
                   s=14, zorder=1, label=f"too big ({len(over)}; drawn at the top)")
    ax.axvline(budget, color="#c0392b", lw=1.2, label=f"budget {budget:g} GB")
    ax.set_xlabel("worst rank's peak memory (GB)")
    ax.set_ylabel("predicted step time (ms)")
    if over and fit:
        ax.set_xscale("log")
    readable_memory_axis(ax)
    ax.set_title(f"{search.model_name} on {search.hardware.gpus} GPUs: {counts(search)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.subplots_adjust(bottom=0.32)
    return fig


def counts(search: Search) -> str:
    """``4 candidates fit, 107 too big, 5 refused by the family``: every candidate counted once, memory's
    refusals (the crosses) apart from the others, which have no memory to draw, by kind, the commonest first."""
    fit = sum(c.fits for c in search.candidates)
    kinds = search.refusals
    fits = f"{fit} candidate fits" if fit == 1 else f"{fit} candidates fit"
    big, named = kinds.pop("memory", 0), list(kinds)
    refused = sum(kinds.values())
    # one sentence per shape, each a message of its own (pipeline_kit.language): the Chinese edition's title
    if len(named) == 1:
        by = f"the {named[0]}"
    elif len(named) == 2:
        by = f"the {named[0]} or the {named[1]}"
    else:
        by = f"{', '.join(f'the {k}' for k in named[:-1])} or the {named[-1]}"
    if big and refused:
        return f"{fits}, {big} too big, {refused} refused by {by}"
    if big:
        return f"{fits}, {big} too big"
    return f"{fits}, {refused} refused by {by}" if refused else fits


def _checked_marks(arg: Arguments, marks) -> list[tuple[str, Candidate]]:
    if isinstance(marks, (str, bytes, dict)) or not isinstance(marks, Sequence):
        arg.refuse("marks", "a list of (label, Candidate) pairs", marks, wrong=True)
    for i, mark in enumerate(marks):
        if not (isinstance(mark, tuple) and len(mark) == 2 and isinstance(mark[0], str)
                and isinstance(mark[1], Candidate)):
            arg.refuse(f"marks[{i}]", "a (label, Candidate) pair", mark, wrong=True)
        if mark[1].worst_memory_bytes is None:
            arg.fail(f"argument marks[{i}]: {mark[0]!r} ({mark[1].label()}) has no memory to draw: it was refused "
                     f"before it was sized ({mark[1].why_not})")
    return list(marks)


# -- the memory axis ---------------------------------------------------------------------------------------------
NICE = ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8))  # sparse to dense


def memory_ticks(low: float, high: float, least: int = 5, most: int = 8) -> list[float]:
    """Round values between ``low`` and ``high`` (> 0) for a logarithmic axis: the sparsest of :data:`NICE`'s
    series that gives at least ``least``, thinned to at most ``most``; where the view is too narrow for any,
    evenly spaced round values."""
    if not (0 < low < high) or not math.isfinite(high):
        return []
    first, last = math.floor(math.log10(low)), math.floor(math.log10(high))
    ticks: list[float] = []
    for subs in NICE:
        ticks = [v for e in range(first, last + 1) for m in subs if low <= (v := float(f"{m}e{e}")) <= high]
        if len(ticks) >= least:
            break
    else:
        ticks = [float(f"{v:.6g}") for v in MaxNLocator(nbins=most - 1).tick_values(low, high) if low <= v <= high]
    step = math.ceil(len(ticks) / most)
    return ticks[::step]


class MemoryTicks(Locator):
    """:func:`memory_ticks` of the axis's view, in place of matplotlib's powers of ten."""

    def __call__(self):
        low, high = sorted(self.axis.get_view_interval())
        return memory_ticks(low, high)


def readable_memory_axis(ax) -> None:
    """Give ``ax``'s x axis :class:`MemoryTicks` and plain numbers whenever it is logarithmic: now, and again when
    a caller sets the scale later (``set_xscale("log")`` puts matplotlib's own ticks back; the view's change
    after it is when ours return)."""
    def apply(axes) -> None:
        axis = axes.xaxis
        if axes.get_xscale() == "log" and not isinstance(axis.get_major_locator(), MemoryTicks):
            axis.set_major_locator(MemoryTicks())
            axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            axis.set_minor_formatter(NullFormatter())

    apply(ax)
    ax.callbacks.connect("xlim_changed", apply)


def save_plan_plot(search: Search, path: str, **options) -> None:
    """Write :func:`plan_plot` (with ``options``: ``show_pick``, ``marks``) to ``path`` whole (a reader never sees
    half a file)."""
    fig = plan_plot(search, **options)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110)
