"""M052's numbers: per-rank memory of the question bank's PP8/M16 model under 1F1B and GPipe, from the simulator.

The same calls as the chapter (chapters/memory.md, "From counts to bytes"): the ``bank-pp8`` preset split evenly over
8 stages, 16 microbatches, and the chapter's assumption of 16 bytes per local parameter (mixed-precision Adam, no
optimizer sharding) for the resident part.

And Korthikanti et al.'s accounting, which the card quotes: a decoder layer keeps ``s b h (34 + 5 a s / h)`` bytes per
microbatch (16-bit, no tensor parallelism, no recomputation, attention scores kept), and under 1F1B the first rank
keeps ``p`` microbatches of ``L / p`` layers -- ``L`` layers' worth whatever ``p`` is -- times
``1 + (p - 1) / (p v)`` with ``v`` interleaved chunks.  Both are checked against the simulator here.
"""

from fractions import Fraction

from pipeline_kit.layout import PRESETS, even_layout, stage_costs
from pipeline_kit.layout.costs import layer_activation_bytes
from pipeline_kit.plan.memory import layer_activation_bytes_kept
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

GiB, MiB = 2**30, 2**20


def _first_rank_layers(layers: int, pp: int, m: int, v: int = 1) -> Fraction:
    """Rank 0's activation peak in layers' worth (one layer, one microbatch = 1), simulated."""
    sched = build_schedule("1f1b", pp, m) if v == 1 else build_schedule("interleaved", pp, m, v)
    per_stage = [Fraction(layers, pp * v)] * (pp * v)
    return Fraction(simulate(sched, activation_bytes=per_stage).peak_activation_bytes[0])


def _korthikanti(spec) -> dict:
    layers = spec.layers
    worth = {pp: _first_rank_layers(layers, pp, 2 * pp) for pp in (2, 4, 8, 16)}
    assert set(worth.values()) == {layers}, worth  # L layers' worth on the first rank, whatever p is
    pp, v, m = 4, 2, 8
    factor = _first_rank_layers(layers, pp, m, v) / layers
    assert factor == 1 + Fraction(pp - 1, pp * v), factor  # Korthikanti's interleaved factor
    return {"layer_mib": layer_activation_bytes(spec) / MiB, "layer_fused_mib": layer_activation_bytes_kept(spec) / MiB,
            "first_layers": layers, "first_mib": layers * layer_activation_bytes(spec) / MiB,
            "vpp_factor": float(factor), "vpp_p": pp, "vpp_v": v}


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
        **_korthikanti(spec),
    }
