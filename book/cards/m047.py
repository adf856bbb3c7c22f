"""M047's numbers: the endpoint imbalance of the question bank's PP8 model (even split), in parameters and in time."""

from pipeline_kit.layout import PRESETS, even_layout, stage_costs
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    pp, m = 8, 16
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    params = [c.params for c in costs]
    flops = [c.fwd_flops for c in costs]
    sched = build_schedule("1f1b", pp, m)

    def run(weights):
        return simulate(sched, fwd=weights, bwd=[2 * w for w in weights])

    equal = run([1] * pp)
    by_params = run([p / min(params) for p in params])
    by_flops = run([f / min(flops) for f in flops])
    return {"layers_per_stage": spec.layers // pp, "p_first_m": params[0] / 1e6, "p_mid_m": params[1] / 1e6,
            "p_last_m": params[-1] / 1e6, "p_ratio": max(params) / min(params),
            "f_first": flops[0] / flops[1], "f_last": flops[-1] / flops[1],
            "mk_params": by_params.makespan / equal.makespan, "mk_flops": by_flops.makespan / equal.makespan}
