"""Why PP8/M16 gives 2.59x, not 8x: a speedup decomposed into computed factors (M044, M054).

Starting from the ideal ``pp``-fold speedup, each factor is the ratio of two simulated (or
measured) step times, so the product of the factors is exactly the measured speedup:

1. the bubble bound -- a perfectly balanced pipeline still fills and drains: ``M / (M + pp - 1)``;
2. stage imbalance -- the same work, cut as it really is, makes the slowest stage set the beat;
3. P2P -- every boundary crossing costs latency (and bytes / bandwidth);
4. the remainder -- what the model does not explain (kernel efficiency of smaller stages, launch
   overhead, synchronisation, the measurement itself).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arguments import Arguments
from ..schedules import build_schedule
from ..sim import simulate


@dataclass
class Factor:
    name: str
    speedup: float  # what is left after this factor
    factor: float  # this factor's own ratio (speedup / previous speedup)
    explanation: str


def decompose_speedup(pp: int, microbatches: int, stage_fwd: list[float], stage_bwd: list[float],
                      p2p_latency: float = 0.0, measured: float | None = None) -> list[Factor]:
    """Decompose the speedup of a 1F1B pipeline over one device running the same model.

    ``stage_fwd`` / ``stage_bwd``: per-stage times of one microbatch (any unit); the single device
    runs every stage back to back for every microbatch.  A step of no work at all has no speedup to decompose:
    all-zero stage times are refused, and so is a ``measured`` speedup of 0.
    """
    arg = Arguments("decompose_speedup")
    arg.integer("pp", pp, limit="MAX_RANKS")
    arg.integer("microbatches", microbatches, limit="MAX_MICROBATCHES")
    stage_fwd = arg.numbers("stage_fwd", stage_fwd, length=pp, per=f"one per stage of pp={pp}")
    stage_bwd = arg.numbers("stage_bwd", stage_bwd, length=pp, per=f"one per stage of pp={pp}")
    if not any(stage_fwd) and not any(stage_bwd):
        arg.fail("arguments stage_fwd and stage_bwd: expected some stage time above 0, got only zeros (a step that "
                 "takes no time has no speedup)")
    arg.number("p2p_latency", p2p_latency)
    arg.number("measured", measured, positive=True, none=True)
    sched = build_schedule("1f1b", pp, microbatches)
    single = microbatches * (sum(stage_fwd) + sum(stage_bwd))
    mean_f, mean_b = sum(stage_fwd) / pp, sum(stage_bwd) / pp
    balanced = simulate(sched, fwd=mean_f, bwd=mean_b).makespan
    imbalanced = simulate(sched, fwd=list(stage_fwd), bwd=list(stage_bwd)).makespan
    with_p2p = simulate(sched, fwd=list(stage_fwd), bwd=list(stage_bwd), p2p_latency=p2p_latency).makespan
    rows = [Factor("ideal", float(pp), 1.0, f"{pp} devices, no bubble, no imbalance, free P2P")]

    def add(name: str, speedup: float, why: str) -> None:
        rows.append(Factor(name, speedup, speedup / rows[-1].speedup, why))

    add("bubble", single / balanced, f"fill and drain: M/(M+pp-1) = {microbatches}/{microbatches + pp - 1}")
    add("stage imbalance", single / imbalanced,
        f"slowest stage {max(f + b for f, b in zip(stage_fwd, stage_bwd)) / (mean_f + mean_b):.2f}x the mean")
    add("P2P", single / with_p2p, f"{p2p_latency:.3g} per transfer, on the critical path at every hop")
    if measured is not None:
        add("remainder", measured, "not explained by the model: kernel efficiency, launch overhead, sync, noise")
    return rows


def format_factors(rows: list[Factor]) -> str:
    lines = [f"{'factor':<16} {'x factor':>9} {'speedup left':>13}  why"]
    for r in rows:
        lines.append(f"{r.name:<16} {r.factor:>9.3f} {r.speedup:>12.2f}x  {r.explanation}")
    return "\n".join(lines)
