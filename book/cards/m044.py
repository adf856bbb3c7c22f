"""M044's numbers: the bubble of the question bank's PP8/M16 1F1B, both definitions, from the simulator."""

from fractions import Fraction

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate


def numbers() -> dict:
    res = simulate(build_schedule("1f1b", 8, 16), fwd=1, bwd=2)
    share = Fraction(res.bubble_fraction).limit_denominator(1000)
    return {"bubble_pp8": float(res.bubble_fraction), "bubble_pp8_frac": f"{share.numerator}/{share.denominator}",
            "bubble_over_ideal_pp8": float(res.bubble_over_ideal), "utilisation_pp8": 1 - float(res.bubble_fraction)}
