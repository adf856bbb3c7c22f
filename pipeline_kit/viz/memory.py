"""Live activations per rank over time (M052): why 1F1B saves memory and interleaving costs some back.

The count itself (:func:`~pipeline_kit.trace.live_activations`) is the trace module's; this draws it.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from ..trace import Timeline, live_activations, peak
from .figure import KitFigure

__all__ = ["draw_memory", "live_activations", "peak"]  # live_activations, peak: re-exported from the trace module

RANK_COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


def draw_memory(timelines: dict[str, Timeline], unit_per_chunk: bool = True) -> Figure:
    """One panel per timeline, one step line per rank, each rank's peak marked.

    With ``unit_per_chunk`` the count is scaled by ``1/chunks`` so panels compare in microbatches'
    worth of one rank's share of the model (an interleaved chunk holds ``1/v`` of it).
    """
    names = list(timelines)
    fig = KitFigure(figsize=(4.2 * len(names) + 1.2, 3.4))
    axes = fig.subplots(1, len(names), sharey=True, squeeze=False)[0]
    for ax, name in zip(axes, names):
        tl = timelines[name]
        draw_memory_panel(ax, tl, unit_per_chunk)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(tl.unit)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("live activations\n(microbatches of a rank's share)" if unit_per_chunk
                       else "live activations (microbatch-chunks)")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def draw_memory_panel(ax, tl: Timeline, unit_per_chunk: bool = True, peak_size: float = 5) -> None:
    """One panel: each rank's live activations over time as a step line, its peak marked.

    The one drawing of a memory panel, whatever the figure around it (side by side here, stacked rows in
    :func:`pipeline_kit.viz.diagrams.memory_rows`)."""
    scale = 1.0 / tl.chunks if unit_per_chunk else 1.0
    for r in range(tl.pp):
        steps = live_activations(tl, r)
        xs = [t for t, _ in steps] + [tl.makespan]
        ys = [n * scale for _, n in steps] + [steps[-1][1] * scale]
        color = RANK_COLORS[r % len(RANK_COLORS)]
        ax.step(xs, ys, where="post", color=color, lw=1.4, label=f"rank {r}", gid=f"memory:{r}")
        t_peak, n_peak = peak(steps)
        ax.plot([t_peak], [n_peak * scale], marker="o", color=color, ms=peak_size, gid=f"peak:{r}")
