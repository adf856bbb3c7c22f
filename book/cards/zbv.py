"""ZB-V's numbers (lab 9): bubble, speedup and P2P messages against 1F1B at PP8/M16, from the simulator; and what
"zero bubble" means and what ZB-V's memory costs in bytes, from the simulator and the planner's memory model.

The same calls as the chapter's cheat sheet (chapters/zero-bubble.md, ``family_figures`` behind ``cheat_sheet``)
and lab 9's costs: every chunk op F, I, W takes one unit (``fwd=2, bwd=4`` per rank share), P2P is free.  Under
those costs the simulator's bubble is ``(p - 1) / (6M + p - 1)`` for ``M >= 2p`` (lab 9's domain; below it the
warmup cannot fill), checked here at several sizes so that the card can quote the formula; and every rank works
without a gap from its first op to its last, which is what PyTorch's ``ScheduleZBVZeroBubble`` (after Qi et al.,
arXiv 2401.10241, section 6) calls zero bubble when F = I = W.  The step still pays the ramp of ``p - 1`` chunk
forwards before the last rank starts.

Memory: in microbatches over equal stages every rank peaks at 1F1B's worst rank, ``p`` rank shares; in bytes more,
because W keeps the linear layers' inputs and the output gradients until it runs, and the V puts both end stages
on rank 0 (``rank_memory``: the ``bank-pp8`` preset split evenly, Adam with bf16 weights, no recomputation).
"""

from fractions import Fraction

from pipeline_kit.layout import PRESETS, even_layout
from pipeline_kit.plan.memory import rank_memory
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.sim.compare import family_figures

GiB = 2**30


def _gaps(result) -> float:
    """Idle time inside the ranks' own spans (first op start to last op end), summed over ranks."""
    out = 0.0
    for r in range(result.schedule.pp):
        ops = [e for e in result.events if e.rank == r]
        out += max(e.end for e in ops) - min(e.start for e in ops) - sum(e.end - e.start for e in ops)
    return out


def _worst_rank_gib(spec, family: str, pp: int, m: int) -> float:
    sched = build_schedule(family, pp, m)
    return max(r.total for r in rank_memory(spec, even_layout(spec.layers, sched.stages), sched)) / GiB


def numbers() -> dict:
    pp, m = 8, 16
    zbv, f1b = family_figures("zbv", sizes=((pp, m),)), family_figures("1f1b", sizes=((pp, m),))
    run = simulate(build_schedule("zbv", pp, m), fwd=2, bwd=4)
    mk_f1b = simulate(build_schedule("1f1b", pp, m), fwd=2, bwd=4).makespan
    for p, n in ((2, 4), (3, 7), (4, 8), (4, 13), (8, 16), (8, 64)):  # the card's formula, M >= 2p
        got = simulate(build_schedule("zbv", p, n), fwd=2, bwd=4).bubble_fraction
        assert Fraction(got).limit_denominator(10**6) == Fraction(p - 1, 6 * n + p - 1), (p, n, got)
    assert zbv.peak_activations[pp, m] == f1b.peak_activations[pp, m] == pp  # 1F1B's worst rank, in rank shares
    bubble = Fraction(zbv.bubble[pp, m]).limit_denominator(10**6)
    spec = PRESETS["bank-pp8"][0]
    return {
        "zbv_bubble": float(zbv.bubble[pp, m]),
        "zbv_frac": f"{bubble.numerator}/{bubble.denominator}",
        "f1b_bubble": float(f1b.bubble[pp, m]),
        "speedup": float(mk_f1b / run.makespan),
        "zbv_messages": zbv.p2p_messages[pp, m],
        "f1b_messages": f1b.p2p_messages[pp, m],
        "rank_gaps": _gaps(run),
        "ramp": pp - 1,
        "peak_shares": zbv.peak_activations[pp, m],
        "mem_1f1b_gib": _worst_rank_gib(spec, "1f1b", pp, m),
        "mem_zbh1_gib": _worst_rank_gib(spec, "zb-h1", pp, m),
        "mem_zbv_gib": _worst_rank_gib(spec, "zbv", pp, m),
    }
