"""ZB-V's numbers (lab 9): bubble, speedup and P2P messages against 1F1B at PP8/M16, from the simulator.

The same calls as the chapter's cheat sheet (chapters/zero-bubble.md, ``family_figures`` behind ``cheat_sheet``)
and lab 9's costs: every chunk op F, I, W takes one unit (``fwd=2, bwd=4`` per rank share), P2P is free.
"""

from fractions import Fraction

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.sim.compare import family_figures


def numbers() -> dict:
    pp, m = 8, 16
    zbv, f1b = family_figures("zbv", sizes=((pp, m),)), family_figures("1f1b", sizes=((pp, m),))
    mk_zbv = simulate(build_schedule("zbv", pp, m), fwd=2, bwd=4).makespan
    mk_f1b = simulate(build_schedule("1f1b", pp, m), fwd=2, bwd=4).makespan
    # the ramp of p - 1 chunk forwards per rank
    assert abs(zbv.bubble[pp, m] - Fraction(pp - 1, 6 * m + pp - 1)) < 1e-12
    assert zbv.peak_activations[pp, m] == f1b.peak_activations[pp, m] == pp  # 1F1B's worst rank, in rank shares
    return {
        "zbv_bubble": float(zbv.bubble[pp, m]),
        "f1b_bubble": float(f1b.bubble[pp, m]),
        "speedup": float(mk_f1b / mk_zbv),
        "zbv_messages": zbv.p2p_messages[pp, m],
        "f1b_messages": f1b.p2p_messages[pp, m],
    }
