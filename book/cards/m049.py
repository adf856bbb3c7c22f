"""M049's numbers: the bank-pp8 endpoints (parameters against work) and how well a simulation from a real
run's measured service times reproduces its step -- the chapter's calls."""

import json
from pathlib import Path

from pipeline_kit.layout import PRESETS, even_layout, stage_costs
from pipeline_kit.layout.measure import simulate_from_trace

DATA = Path(__file__).resolve().parent.parent / "data"


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, 8), spec, 8)
    params = [c.params for c in costs]
    flops = [c.fwd_flops for c in costs]
    trace = json.loads((DATA / "run-1f1b-pp2.json").read_text())
    predicted, actual = simulate_from_trace(trace, scale=1e3).makespan, trace["makespan"] * 1e3
    return {"param_ratio": max(params) / min(params), "first_params": params[0] / params[1],
            "first_work": flops[0] / flops[1], "last_work": flops[-1] / flops[1],
            "trace_error": abs(predicted - actual) / actual}
