"""The planner's picture: every candidate's step time against its worst rank's memory, the budget line and the
Pareto front -- the trade a reader would rather see than read in a table of 150 rows.

A candidate that fits is a dot coloured by family; one refused for memory is a grey cross at the memory it
would need (to the right of the budget line); the front joins the candidates no other beats on both axes; the
pick is ringed.  Sized for the book's column (:data:`~pipeline_kit.viz.diagrams.COLUMN_IN`).
"""

from __future__ import annotations

from ..interrupts import atomic_output
from ..plan.search import GB, Search
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


def plan_plot(search: Search, width: float = COLUMN_IN, height: float = 4.2) -> KitFigure:
    """Step time (ms) against worst-rank memory (GB) for every sized candidate."""
    fig = KitFigure(figsize=(width, height))
    ax = fig.add_subplot(1, 1, 1)
    budget = search.hardware.gpu_memory_bytes / GB
    fit = [c for c in search.candidates if c.fits]
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
                label="Pareto front")
        best = search.candidates[search.best]
        ax.scatter([best.worst_memory_bytes / GB], [1e3 * best.step_time_s], s=120, facecolors="none",
                   edgecolors="black", lw=1.5, zorder=4, label="the pick")
        ax.annotate(best.label(), (best.worst_memory_bytes / GB, 1e3 * best.step_time_s), xytext=(8, 6),
                    textcoords="offset points", fontsize=7.5)
    if over:
        top = max((1e3 * c.step_time_s for c in fit), default=1.0)
        ax.scatter([c.worst_memory_bytes / GB for c in over], [top] * len(over), marker="x", color="#bbbbbb",
                   s=14, zorder=1, label=f"too big ({len(over)}; drawn at the top)")
    ax.axvline(budget, color="#c0392b", lw=1.2, label=f"budget {budget:g} GB")
    ax.set_xlabel("worst rank's peak memory (GB)")
    ax.set_ylabel("predicted step time (ms)")
    if over and fit:
        ax.set_xscale("log")
    ax.set_title(f"{search.model_name} on {search.hardware.gpus} GPUs: {len(fit)} candidates fit, "
                 f"{len(search.candidates) - len(fit)} refused", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.subplots_adjust(bottom=0.32)
    return fig


def save_plan_plot(search: Search, path: str) -> None:
    """Write :func:`plan_plot` to ``path`` whole (a reader never sees half a file)."""
    fig = plan_plot(search)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110)
