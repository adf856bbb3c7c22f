"""M051's numbers: 1F1B against interleaved for the chapter's pp = 4, M = 8 example -- bubble, P2P messages,
rank 0's activation peak, a slow last stage -- and the textbook formula's worst error, the chapter's calls."""

from fractions import Fraction

from pipeline_kit.layout import PRESETS, even_layout, stage_costs
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate


def sched(pp, m, v):
    return build_schedule("1f1b", pp, m) if v == 1 else build_schedule("interleaved", pp, m, v)


def numbers() -> dict:
    res = {v: simulate(sched(4, 8, v), fwd=Fraction(1), bwd=Fraction(2)) for v in (1, 2)}
    worst = 0.0
    for pp, m, v in [(4, 8, 1), (4, 4, 2), (4, 8, 2), (4, 8, 4), (4, 32, 2), (8, 8, 2), (8, 16, 2), (8, 16, 4),
                     (8, 64, 2)]:
        exact = Fraction(pp - 1, v * m + pp - 1)
        textbook = Fraction(1, v) * Fraction(pp - 1, m + pp - 1)
        worst = min(worst, float((textbook - exact) / exact))
    msgs = {v: len(simulate(sched(4, 8, v)).transfers) for v in (1, 2)}
    spec = PRESETS["bank-pp8"][0]
    peak0 = {}
    for v in (1, 2):
        act = [c.activation_bytes for c in stage_costs(even_layout(16, 4 * v), spec, 4)]
        peak0[v] = simulate(sched(4, 8, v), activation_bytes=act).peak_activation_bytes[0]
    per_vs = [0.5] * 8
    per_vs[-1] = 1.0                          # the extra half-share sits in the last virtual stage only
    delay1 = simulate(sched(4, 8, 1), fwd=[1, 1, 1, 1.5], bwd=[2, 2, 2, 3]).makespan - float(res[1].makespan)
    delay2 = simulate(sched(4, 8, 2), fwd=per_vs, bwd=[2 * x for x in per_vs]).makespan - float(res[2].makespan)
    s2 = sched(4, 8, 2)
    return {"bubble_v1": float(res[1].bubble_fraction), "bubble_v2": float(res[2].bubble_fraction),
            "textbook_error": -worst, "msg_ratio": msgs[2] / msgs[1], "peak0_ratio": peak0[2] / peak0[1],
            "ranks": s2.pp, "virtual_stages": s2.pp * s2.chunks, "slow_delay_v1": delay1, "slow_delay_v2": delay2}
