"""M050's numbers: the balancer's layout for the bank-pp8 model against the even split and the question
bank's "one layer off each endpoint" -- step, idle, P2P volume, peak activations -- the chapter's calls; and a
layout with an empty stage that Megatron-Core 0.19 accepts (one of its own unit tests', checked against its
rules by ``megatron_layout``), beside the flag's help-text example, which those rules refuse."""

from pipeline_kit.layout import (
    PRESETS,
    LayoutError,
    balance,
    even_layout,
    megatron_layout,
    p2p_volume,
    parse_layout,
    stage_costs,
)
from pipeline_kit.layout.balance import plan_for
from pipeline_kit.layout.commands import item_times_from_flops
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate


# tests/unit_tests/pipeline_parallel/test_pipeline_layout.py (core_v0.19.0), PP4 with two chunks, 8 layers, 1 MTP
EMPTY_EXAMPLE, EMPTY_PP, EMPTY_LAYERS, EMPTY_MTP = "E|t|t*2|t||t|t|t*2mL", 4, 8, 1
HELP_EXAMPLE = "E|(t|)*3,m|m||L"  # megatron/training/arguments.py's help for --pipeline-model-parallel-layout


def _empty_stage() -> dict:
    lay = megatron_layout(EMPTY_EXAMPLE, EMPTY_PP, EMPTY_LAYERS, EMPTY_MTP)
    rank, chunk = next((r, v) for r in range(lay.pp) for v, held in enumerate(lay.rank_stages(r)) if not held)
    for pp in (4, 8):  # the help text's example: 3 layers, 2 MTP layers; refused at every pp it divides
        try:
            megatron_layout(HELP_EXAMPLE, pp, 3, 2)
        except LayoutError:
            continue
        raise AssertionError(f"{HELP_EXAMPLE} passed Megatron's rules at pp={pp}; the card says it does not")
    return {"empty_example": EMPTY_EXAMPLE, "empty_pp": lay.pp, "empty_vpp": lay.vpp, "empty_rank": rank,
            "empty_chunk": chunk, "help_example": HELP_EXAMPLE}


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    even = even_layout(spec.layers, 8)
    items = item_times_from_flops(spec, 100.0).scaled(1e3)
    bal = balance(items, pp=8, microbatches=16)
    steps, peaks = {}, {}
    for name, text in (("even", str(even)), ("ends", "Et|t*3|t*2|t*2|t*2|t*2|t*3|tL"), ("best", str(bal.best.layout))):
        lay = parse_layout(text, pp=8, layers=16)
        plan = plan_for(lay, items, 8, 16)
        act = [c.activation_bytes for c in stage_costs(lay, spec, 8)]
        res = simulate(build_schedule("1f1b", 8, 16), fwd=plan.stage_fwd, bwd=plan.stage_bwd, activation_bytes=act)
        steps[name], peaks[name] = plan.makespan, max(res.peak_activation_bytes) / 2**20
    return {"best_layout": str(bal.best.layout), "gain": bal.even.makespan / bal.best.makespan,
            "ends_gain": steps["even"] / steps["ends"], "idle_even": bal.even.bubble_fraction,
            "idle_best": bal.best.bubble_fraction, "formula_bubble": (8 - 1) / (16 + 8 - 1),
            "p2p_even_mib": p2p_volume(bal.even.layout, spec, 16)["total_per_step"] / 2**20,
            "p2p_best_mib": p2p_volume(bal.best.layout, spec, 16)["total_per_step"] / 2**20,
            "peak_even_mib": peaks["even"], "peak_best_mib": peaks["best"], **_empty_stage()}
