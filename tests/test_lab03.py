"""Lab 3 (M044, M045): typical wrong answers lose exactly their points, with feedback naming the mistake."""

import random
from fractions import Fraction

import pytest
from lab_grading import assert_partial, grade_answers

from pipeline_kit.course.labs import lab03
from pipeline_kit.course.questions import m045
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.layout import PRESETS, boundary_bytes, even_layout, stage_costs
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

LAB = "lab03_bubble"


# -- one whole notebook, graded: each wrong answer costs exactly its checks -------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """(pp-1)/M for the idle share, the measured makespan as 'achievable', GPipe's memory, b as a confounder --
    and pp8 rounded to 3 decimals (0.438 for 7/16), which is right."""
    answers = {
        "formula": """
from fractions import Fraction
def makespan(pp, microbatches, f, b):
    return (microbatches + pp - 1) * (f + b)
def bubble_fraction(pp, microbatches):
    return Fraction(pp - 1, microbatches)
def bubble_over_ideal(pp, microbatches):
    return Fraction(pp - 1, microbatches)
""",
        "number": 'pp8 = {"bubble": 0.304, "utilisation": 0.696, "bubble_over_ideal": 0.438}',
        "timeline_plan": """
def timeline_plan(trace):
    fwd, bwd, _ = stage_fwd_bwd(service_times(trace))
    chunks = trace["chunks"]
    sched = build_schedule(trace["schedule"], trace["pp"], trace["microbatches"], chunks if chunks > 1 else None)
    balanced = simulate(sched, fwd=sum(fwd) / len(fwd) * chunks, bwd=sum(bwd) / len(bwd) * chunks)
    return {"measured": trace["makespan"], "achievable": trace["makespan"], "balanced": balanced.makespan}
""",
        "fixed_gbs": """
def fixed_gbs_point(pp, gbs, M, alpha, beta):
    b = gbs / M
    f = alpha + beta * b
    result = simulate(build_schedule("1f1b", pp, M), fwd=f, bwd=2 * f)
    return {"step_time": result.makespan, "peak_sequences": M * b}
""",
        "confounders": """
def confounders(run_a, run_b):
    return {k for k in run_a if k != "microbatches" and run_a[k] != run_b[k]}
""",
    }
    report = grade_answers(tmp_path, LAB, answers, timeout=180)
    assert_partial(report, {"m044_main_bubble_fraction": "bubble over the *ideal* time",
                            "m044_follow_plan": "that is the measured makespan",
                            "m045_main_memory": "GPipe's peak",
                            "m045_main_design": "part of the treatment"})


# -- the checks themselves, called directly (milliseconds) ------------------------------------
def right_formula():
    return (lambda pp, m, f, b: (m + pp - 1) * (f + b), lambda pp, m: Fraction(pp - 1, m + pp - 1),
            lambda pp, m: Fraction(pp - 1, m))


def test_formula_right_and_wrong_terms():
    makespan, frac, over = right_formula()
    lab03.check_makespan(makespan, [(4, 8), (2, 1), (8, 4)])
    lab03.check_bubble_fraction(frac, [(4, 8), (2, 1), (8, 4)])
    lab03.check_bubble_over_ideal(over, [(4, 8), (2, 1), (8, 4)])
    lab03.check_bubble_fraction(lambda pp, m: (pp - 1) / (m + pp - 1), [(4, 8)])  # a float is as good
    with pytest.raises(LabCheckFailed, match="the numerator counts one stage offset too many"):
        lab03.check_bubble_fraction(lambda pp, m: Fraction(pp, m + pp - 1), [(4, 8)])
    with pytest.raises(LabCheckFailed, match="the denominator counts one slot too many"):
        lab03.check_bubble_fraction(lambda pp, m: Fraction(pp - 1, m + pp), [(4, 8)])
    with pytest.raises(LabCheckFailed, match="drain is missing"):
        lab03.check_makespan(lambda pp, m, f, b: m * (f + b) + (pp - 1) * f, [(4, 8)])
    with pytest.raises(LabCheckFailed, match="idle share of the step"):
        lab03.check_bubble_over_ideal(frac, [(4, 8)])


def test_assumptions_flip_is_explained():
    right = {k: k in lab03.WHY_EXACT for k in lab03.SCENARIOS}
    lab03.check_assumptions(right)
    with pytest.raises(LabCheckFailed, match=r"fill and drain still cost the same slots"):
        lab03.check_assumptions({**right, "1f1b, M < pp (pp=8, M=4)": False})
    with pytest.raises(LabCheckFailed, match="chunk-sized steps"):
        lab03.check_assumptions({**right, "interleaved, v=2": True})


def test_pp8_percentages_and_mixed_definitions():
    r = simulate(build_schedule("1f1b", 8, 16))
    right = {"bubble": r.bubble_fraction, "utilisation": 1 - r.bubble_fraction,
             "bubble_over_ideal": r.bubble_over_ideal}
    lab03.check_pp8(right)
    with pytest.raises(LabCheckFailed, match="not a percentage"):
        lab03.check_pp8({**right, "bubble": 30.43})
    with pytest.raises(LabCheckFailed, match="mixes the definitions"):
        lab03.check_pp8({**right, "utilisation": 1 - 7 / 16})


def test_pp8_rounding():
    """Any value rounded correctly to the decimals it shows (at least 3) is right; a wrong rounding is a
    precision issue, not a wrong definition."""
    import numpy as np
    lab03.check_pp8({"bubble": 0.304, "utilisation": 0.6957, "bubble_over_ideal": 0.438})
    lab03.check_pp8({"bubble": Fraction(7, 23), "utilisation": np.float32(16 / 23), "bubble_over_ideal": 0.4375})
    with pytest.raises(LabCheckFailed, match="rounded the wrong way .* precision issue"):
        lab03.check_pp8({"bubble": 0.305, "utilisation": 0.696, "bubble_over_ideal": 0.438})
    with pytest.raises(LabCheckFailed, match="give at least 3 .*precision issue"):
        lab03.check_pp8({"bubble": 0.3, "utilisation": 0.696, "bubble_over_ideal": 0.438})
    with pytest.raises(LabCheckFailed, match="the other definition"):
        lab03.check_pp8({"bubble": 0.438, "utilisation": 0.696, "bubble_over_ideal": 0.438})


def test_losses_scaled_by_parameters():
    right = lab03.expected_losses()
    lab03.check_losses(right, "kernel", "imbalance")
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, 8), spec, 8)
    rel = [c.params / costs[1].params for c in costs]
    wrong = {**right, "imbalance": simulate(build_schedule("1f1b", 8, 16), fwd=rel, bwd=[2 * x for x in rel])}
    with pytest.raises(LabCheckFailed, match="time follows FLOPs"):
        lab03.check_losses(wrong, "kernel", "imbalance")
    with pytest.raises(LabCheckFailed, match="not 1.2x"):
        lab03.check_losses({**right, "kernel": simulate(build_schedule("1f1b", 8, 16), fwd=1.2, bwd=2.4)},
                           "kernel", "imbalance")
    with pytest.raises(LabCheckFailed, match="busy time, not idle time"):
        lab03.check_losses(right, "p2p", "imbalance")


def test_measured_bubble_mistakes():
    traces = lab03.hidden_trace_cases(random.Random(0))
    lab03.check_measured_bubble(lab03.idle_share, traces)
    with pytest.raises(LabCheckFailed, match="the formula's value"):
        lab03.check_measured_bubble(lambda t: Fraction(t["pp"] - 1, t["microbatches"] + t["pp"] - 1), traces)

    def ignores_waits(trace):
        ops = trace["timeline"]
        end = max(o["end"] for o in ops)
        return 1 - sum(o["end"] - o["start"] for o in ops) / (trace["pp"] * end)

    with pytest.raises(LabCheckFailed, match="P2P wait inside each op"):
        lab03.check_measured_bubble(ignores_waits, traces)


def test_plan_balanced_with_slowest_stage():
    traces = lab03.hidden_trace_cases(random.Random(0))
    lab03.check_plan(lab03.expected_plan, traces)

    def slowest(trace):
        out = lab03.expected_plan(trace)
        fwd, bwd, _ = lab03.stage_fwd_bwd(lab03.service_times(trace))
        sched = build_schedule(trace["schedule"], trace["pp"], trace["microbatches"])
        return {**out, "balanced": simulate(sched, fwd=max(fwd), bwd=max(bwd)).makespan}

    with pytest.raises(LabCheckFailed, match="slowest stage"):
        lab03.check_plan(slowest, traces)


def test_decomposition_checks():
    factors, latency = lab03.expected_factors()
    lab03.check_follow_bubble(2.59 / 8, 8 * 16 / 23, factors)
    with pytest.raises(LabCheckFailed, match="not by the 16 microbatches"):
        lab03.check_follow_bubble(2.59 / 16, 8 * 16 / 23, factors)
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, 8), spec, 8)
    ratio = max(c.params for c in costs) / min(c.params for c in costs)
    lab03.check_follow_imbalance(ratio, factors)
    with pytest.raises(LabCheckFailed, match="follow FLOPs"):
        lab03.check_follow_imbalance(ratio, {**factors, "stage imbalance": 1 / ratio})
    lab03.check_follow_p2p(latency, factors)
    with pytest.raises(LabCheckFailed, match="only the fixed 20 us"):
        lab03.check_follow_p2p(20e-6, factors)
    with pytest.raises(LabCheckFailed, match="one transfer carries one tensor"):
        lab03.check_follow_p2p(20e-6 + 2 * boundary_bytes(spec) / 10e9, factors)


def test_gbs_and_design_checks():
    with pytest.raises(LabCheckFailed, match="data-parallel replicas each run M microbatches too"):
        lab03.check_gbs(lambda b, m, dp: b * m, lambda s, b, m, dp: s // (b * m * dp),
                        lambda g, m, dp: g // (m * dp), [(2, 8, 4, 1000)])
    base = {"pp": 8, "dp": 2, "microbatches": 16, "micro_batch_size": 4, "seq_len": 2048, "layout": "even",
            "gpu": "H100"}
    with pytest.raises(LabCheckFailed, match="misses 'global_batch'"):
        lab03.check_confounders(lambda a, b: {k for k in a if k not in lab03.STUDIED and a[k] != b[k]},
                                [(base, {**base, "microbatches": 32})])


def test_follow_up_choices():
    lab03.check_methods({"mechanism": "simulate", "production": "fixed_gbs"})
    with pytest.raises(LabCheckFailed, match="per-step costs are amortised"):
        lab03.check_methods({"mechanism": "fixed_b", "production": "fixed_gbs"})
    with pytest.raises(LabCheckFailed, match="not the bubble|mechanism under study"):
        lab03.check_confounder("bubble", 1.0)
    _, _, fixed_gbs = m045._sweeps()
    best = max(fixed_gbs, key=fixed_gbs.get)
    lab03.check_conclusion({"fixed_b": True, "fixed_gbs": False}, best)
    with pytest.raises(LabCheckFailed, match="holds in one scheme only"):
        lab03.check_conclusion({"fixed_b": True, "fixed_gbs": True}, best)
    with pytest.raises(LabCheckFailed, match="per-step overhead is missing"):
        lab03.check_schemes(lambda pp, m, a, be, o, b=None, gbs=None: m * b / simulate(
            build_schedule("1f1b", pp, m), fwd=a + be * b, bwd=2 * (a + be * b)).makespan,
                            [(8, 16, 0.5, 1.0, 50.0, {"b": 4})])
