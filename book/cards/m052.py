"""M052's numbers: per-rank memory of the question bank's PP8/M16 model under 1F1B and GPipe, from the simulator.

The same calls as the chapter (chapters/memory.md, "From counts to bytes"): the ``bank-pp8`` preset split evenly over
8 stages, 16 microbatches, and the chapter's assumption of 16 bytes per local parameter (mixed-precision Adam, no
optimizer sharding) for the resident part.
"""

from pipeline_kit.layout import PRESETS, even_layout, stage_costs
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

GiB, MiB = 2**30, 2**20


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    pp8, m16, adam_bytes = 8, 16, 16
    costs = stage_costs(even_layout(spec.layers, pp8), spec, pp8)
    act = [c.activation_bytes for c in costs]
    one_f = simulate(build_schedule("1f1b", pp8, m16), activation_bytes=act)
    gpipe = simulate(build_schedule("gpipe", pp8, m16), activation_bytes=act)
    naive = adam_bytes * sum(c.params for c in costs) / pp8
    totals = [adam_bytes * c.params + a for c, a in zip(costs, one_f.peak_activation_bytes)]
    assert totals.index(max(totals)) == 0  # the card names rank 0 as the fullest under 1F1B
    return {
        "max_total_gib": max(totals) / GiB,
        "naive_gib": naive / GiB,
        "res0_ratio": adam_bytes * costs[0].params / naive,
        "alive_1f1b": ", ".join(map(str, one_f.peak_activations)),
        "gpipe_max_mib": max(gpipe.peak_activation_bytes) / MiB,
        "rank1_total_gib": totals[1] / GiB,
        "last_total_gib": totals[-1] / GiB,
        "last_over_rank1_params": costs[-1].params / costs[1].params,
    }
