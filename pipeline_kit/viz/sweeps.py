"""Ready-made sweep figures for the book: simulated points with the textbook formula drawn over them."""

from __future__ import annotations

from matplotlib.figure import Figure

from ..schedules import build_schedule
from ..sim import simulate
from .figure import KitFigure
from .memory import RANK_COLORS


def bubble_vs_microbatches(pps=(2, 4, 8), microbatches=range(1, 33)) -> Figure:
    """1F1B bubble fraction against M for several pp: simulation (dots) and (pp-1)/(M+pp-1) (line)."""
    fig = KitFigure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    ms = list(microbatches)
    for i, pp in enumerate(pps):
        color = RANK_COLORS[i % len(RANK_COLORS)]
        sim = [simulate(build_schedule("1f1b", pp, m)).bubble_fraction for m in ms]
        ax.plot(ms, [(pp - 1) / (m + pp - 1) for m in ms], color=color, lw=1.2, gid=f"formula:{pp}",
                label=f"pp={pp}: (pp-1)/(M+pp-1)")
        ax.plot(ms, sim, ls="none", marker="o", ms=3.5, color=color, gid=f"simulated:{pp}", label=f"pp={pp}: simulated")
    ax.set_xlabel("microbatches M")
    ax.set_ylabel("bubble fraction (idle / total)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def interleaved_vs_not(pp: int = 4, microbatches=(4, 8, 12, 16, 24, 32), chunks=(1, 2, 4)) -> Figure:
    """Bubble fraction of 1F1B (v=1) and interleaved (v>1) against M: simulation and (pp-1)/(vM+pp-1)."""
    fig = KitFigure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    ms = [m for m in microbatches if m % pp == 0]
    for i, v in enumerate(chunks):
        color = RANK_COLORS[i % len(RANK_COLORS)]
        name = "1f1b" if v == 1 else "interleaved"
        sim = [simulate(build_schedule(name, pp, m, v if v > 1 else None)).bubble_fraction for m in ms]
        ax.plot(ms, [(pp - 1) / (v * m + pp - 1) for m in ms], color=color, lw=1.2, gid=f"formula:v{v}",
                label=f"v={v}: (pp-1)/(vM+pp-1)")
        ax.plot(ms, sim, ls="none", marker="o", ms=4, color=color, gid=f"simulated:v{v}", label=f"v={v}: simulated")
    ax.set_title(f"pp={pp}", fontsize=10)
    ax.set_xlabel("microbatches M")
    ax.set_ylabel("bubble fraction")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def efficiency_vs_imbalance(pp: int = 8, microbatches: int = 16, slowdowns=(1.0, 1.25, 1.5, 2.0, 2.5, 3.0),
                            slow_stage: int | None = None) -> Figure:
    """Pipeline efficiency (balanced ideal / makespan) when one stage is ``x`` times slower."""
    slow_stage = pp - 1 if slow_stage is None else slow_stage
    fig = KitFigure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    balanced = simulate(build_schedule("1f1b", pp, microbatches)).makespan
    eff, bound = [], []
    for x in slowdowns:
        factors = [1.0] * pp
        factors[slow_stage] = x
        res = simulate(build_schedule("1f1b", pp, microbatches), fwd=factors, bwd=[2 * f for f in factors])
        ideal = microbatches * 3.0 * sum(factors) / pp  # the same work, perfectly balanced, no bubble
        eff.append(ideal / res.makespan)
        bound.append(microbatches / (microbatches + pp - 1) * sum(factors) / (pp * x))
    ax.plot(slowdowns, eff, marker="o", color=RANK_COLORS[0], gid="simulated", label="simulated")
    ax.plot(slowdowns, bound, ls="--", color=RANK_COLORS[1], gid="bound",
            label="estimate: M/(M+pp-1) x mean/slowest stage")
    ax.set_xlabel(f"slowdown of stage {slow_stage}")
    ax.set_ylabel("efficiency (ideal / makespan)")
    ax.set_title(f"1F1B, pp={pp}, M={microbatches}; balanced: {balanced:g}", fontsize=10)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
