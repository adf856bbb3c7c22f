"""M054's numbers: the question bank's PP8/M16 2.59x, factor by factor, with the case-study chapter's model.

Same calls as the chapter: the ``bank-pp8`` preset, stage times from FLOPs at 100 TFLOP/s, and an assumed
PCIe-class P2P of 20 us + boundary bytes / (10 GB/s) (not a measurement).
"""

from pipeline_kit.layout import PRESETS, balance, boundary_bytes, decompose_speedup, even_layout, stage_costs
from pipeline_kit.layout.balance import plan_for
from pipeline_kit.layout.commands import item_times_from_flops

PP, M, MEASURED = 8, 16, 2.59              # the question bank's setup and measured speedup
LATENCY_S, BANDWIDTH = 20e-6, 10e9         # assumed P2P link


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    params = [c.params for c in stage_costs(even_layout(spec.layers, PP), spec, PP)]
    items = item_times_from_flops(spec, 100.0)
    plan = plan_for(even_layout(16, 8), items, PP, M)
    times = [f + b for f, b in zip(plan.stage_fwd, plan.stage_bwd)]
    p2p = LATENCY_S + boundary_bytes(spec) / BANDWIDTH
    rows = {r.name: r for r in decompose_speedup(PP, M, plan.stage_fwd, plan.stage_bwd, p2p_latency=p2p,
                                                 measured=MEASURED)}
    bal = balance(items, PP, microbatches=M)
    balanced = decompose_speedup(PP, M, bal.best.stage_fwd, bal.best.stage_bwd, p2p_latency=p2p)
    mean_over_slow = (sum(times) / PP) / max(times)
    return {"measured": MEASURED, "bubble": (PP - 1) / (M + PP - 1), "bound": PP * M / (M + PP - 1),
            "eff": MEASURED / PP, "params_ratio": max(params) / min(params),
            "slow_over_mean": 1 / mean_over_slow,
            "f_bubble": rows["bubble"].factor, "f_imbalance": rows["stage imbalance"].factor,
            "f_p2p": rows["P2P"].factor, "f_remainder": rows["remainder"].factor,
            "s_imbalance": rows["stage imbalance"].speedup, "even_speedup": rows["P2P"].speedup,
            "p2p_us": p2p * 1e6, "limit": PP * mean_over_slow,
            "bal_layout": str(bal.best.layout), "bal_speedup": balanced[-1].speedup}
