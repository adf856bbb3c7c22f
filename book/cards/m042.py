"""M042's numbers: GPipe against 1F1B at PP4/M8 (fwd=1, bwd=2), equal stages and stage 2 twice as slow."""

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

PP, M = 4, 8
SLOW_F = [1, 1, 2, 1]                                   # stage 2 twice as slow, as in the chapter


def _beat(res, rank: int = 0) -> float:
    """The interval between a rank's second and third backward: the steady-state beat."""
    starts = sorted(e.start for e in res.events if e.rank == rank and e.op.kind == "B")
    return float(starts[2] - starts[1])


def numbers() -> dict:
    gp, ob = build_schedule("gpipe", PP, M), build_schedule("1f1b", PP, M)
    res_gp, res_ob = simulate(gp, fwd=1, bwd=2), simulate(ob, fwd=1, bwd=2)
    slow = simulate(ob, fwd=SLOW_F, bwd=[2 * x for x in SLOW_F])
    lat = 0.1

    def hops(s, r):  # how many latencies the step grows by: the transfers on its critical path
        return round((simulate(s, fwd=1, bwd=2, p2p_latency=lat).makespan - r.makespan) / lat)
    return {"peak_gp": max(res_gp.peak_activations), "peak_ob": max(res_ob.peak_activations),
            "peak_gp_m32": max(simulate(build_schedule("gpipe", PP, 32), fwd=1, bwd=2).peak_activations),
            "peak_ob_m32": max(simulate(build_schedule("1f1b", PP, 32), fwd=1, bwd=2).peak_activations),
            "bubble_gp": float(res_gp.bubble_fraction), "bubble_ob": float(res_ob.bubble_fraction),
            "beat_equal": _beat(res_ob), "beat_slow": _beat(slow), "slow_bubble": float(slow.bubble_fraction),
            "idle_r0_equal": float(res_ob.idle[0]), "idle_r0_slow": float(slow.idle[0]),
            "hops_gp": hops(gp, res_gp), "hops_ob": hops(ob, res_ob)}
