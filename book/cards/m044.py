"""M044's numbers: the bubble of the question bank's PP8/M16 1F1B, both definitions, from the simulator; the
endpoint parameter imbalance of its follow-up, from the bank-pp8 preset."""

from fractions import Fraction

from pipeline_kit.layout import PRESETS, even_layout, stage_costs
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    params = [c.params for c in stage_costs(even_layout(spec.layers, 8), spec, 8)]
    res = simulate(build_schedule("1f1b", 8, 16), fwd=1, bwd=2)
    share = Fraction(res.bubble_fraction).limit_denominator(1000)
    return {"bubble_pp8": float(res.bubble_fraction), "bubble_pp8_frac": f"{share.numerator}/{share.denominator}",
            "bubble_over_ideal_pp8": float(res.bubble_over_ideal), "utilisation_pp8": 1 - float(res.bubble_fraction),
            "params_ratio": max(params) / min(params)}
