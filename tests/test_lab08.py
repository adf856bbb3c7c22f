"""Lab 8 (M051, M052): typical wrong answers lose exactly their points, with feedback naming the mistake."""

import random
from fractions import Fraction

import nbformat

import pytest
from fairness_catalogue.lab08 import NO_DTYPE, NO_POSITIONS, STRICT  # the catalogue's wrong answers
from lab_grading import SOLUTIONS, assert_partial, grade_answers, replayed_torchrun, with_answers

from pipeline_kit.grading.engine import grade
from pipeline_kit.course.labs import lab08
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.layout import PRESETS, ModelSpec, even_layout, stage_costs
from pipeline_kit.schedules import build_schedule, interleaved_warmup
from pipeline_kit.sim import simulate

LAB = "lab08_interleaved"


# -- one whole notebook, graded: each wrong answer costs exactly its checks -------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """Contiguous chunks, the interview question bank's (1/v) bubble, a warmup without the M x v cap, and the last
    rank freeing nothing with chunks -- each in its own answer cell; the real torchrun job replayed."""
    definition = """
def owner(stage, pp):
    return stage % pp, stage // pp

def rank_layers(rank, pp, v, layers):
    per_rank = layers // pp
    return list(range(rank * per_rank, (rank + 1) * per_rank))
"""
    mechanism = """
def interleaved_bubble(pp, M, v):
    return Fraction(1, v) * Fraction(pp - 1, M + pp - 1)
"""
    costs = """
def warmup(pp, rank, M, v):
    return 2 * (pp - rank - 1) + (v - 1) * pp

def p2p_messages(pp, M, v):
    return 2 * M * (pp * v - 1)

peak_share = {v: simulate(schedule_for(4, 8, v)).peak_activations[0] / v for v in (1, 2, 4)}
"""
    measurement = """
def predict_run(summary):
    pp, M, v = summary["pp"], summary["microbatches"], summary["chunks"]
    sched = build_schedule(summary["schedule"], pp, M, v if v > 1 else None)
    cfg = summary["config"]
    one = cfg["seq_len"] * summary["micro_batch_size"] * cfg["hidden"] * 4
    return {"peak_activations": simulate(sched).peak_activations,
            "deallocated_output_bytes": [v * M * one if r < pp - 1 else 0 for r in range(pp)]}

measurement_steps = ["warmup", "reset", "measure", "read", "gather"]
"""
    answers = {"definition": definition, "mechanism": mechanism, "costs": costs, "measurement": measurement}
    report = grade_answers(tmp_path, LAB, answers, timeout=180)
    assert_partial(report, {"m051_main_definition": "non-interleaved split",
                            "m051_main_mechanism": "question bank's model answer (1/v)(pp-1)/(M+pp-1)",
                            "m051_main_costs": "a rank cannot warm up with more",
                            "m052_main_measurement": "the last rank still sends the outputs of its chunks"})


def _solution_cell(gid: str) -> str:
    nb = nbformat.read(str(SOLUTIONS / f"{LAB}.ipynb"), as_version=4)
    return next(c.source for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid)




@pytest.mark.slow
def test_three_mistakes_score_the_same_under_two_seeds(tmp_path):
    """No d/2 scaling, no position embedding (reused by memory_terms and fullest: it costs once, at
    m052_main_endpoints) and a strict `<` in snapshot: the same score and points under two seeds, each feedback
    starting with the same (visible or fixed) case; the hidden cases listed after it are each seed's own draw."""
    answers = {gid: _solution_cell(gid) + "\n\n" + code for gid, code in
               (("determinants", NO_DTYPE), ("endpoints", NO_POSITIONS), ("follow_052", STRICT))}
    path = with_answers(tmp_path, LAB, answers)
    with replayed_torchrun():
        reports = [grade(path, timeout=180, seed=seed) for seed in (3, 11)]
    verdicts = [[(c.name, c.points, c.feedback.split("; ")[0]) for c in r.checks] for r in reports]
    assert verdicts[0] == verdicts[1]
    assert reports[0].score == reports[1].score
    assert_partial(reports[0], {"m052_main_determinants": "scale by dtype_bytes / 2",
                                "m052_main_endpoints": "position embedding",
                                "m052_follow_snapshot": "exactly t"})


# -- the checks themselves, called directly (milliseconds) ------------------------------------
def test_owner_and_layers():
    lab08.check_owner(lambda k, pp: (k % pp, k // pp), [(4, 2), (3, 3)])
    with pytest.raises(LabCheckFailed, match="swapped"):
        lab08.check_owner(lambda k, pp: (k // pp, k % pp), [(4, 2)])
    with pytest.raises(LabCheckFailed, match="contiguous"):
        lab08.check_owner(lambda k, pp: (k // 2, k % 2), [(4, 2)])


def test_bubble_definitions():
    lab08.check_bubble(lambda pp, m, v: Fraction(pp - 1, v * m + pp - 1), [(4, 8, 2), (4, 8, 1), (2, 2, 4)])
    with pytest.raises(LabCheckFailed, match="ideal time"):
        lab08.check_bubble(lambda pp, m, v: Fraction(pp - 1, v * m), [(4, 8, 2)])
    with pytest.raises(LabCheckFailed, match="v did not enter"):
        lab08.check_bubble(lambda pp, m, v: Fraction(pp - 1, m + pp - 1), [(4, 8, 2)])


def test_warmup_and_messages():
    lab08.check_warmup(lambda pp, r, m, v: interleaved_warmup(pp, r, m, v, pp), [(4, 4, 2), (2, 6, 3)])
    with pytest.raises(LabCheckFailed, match="travel down to the last rank and the gradient to come back"):
        lab08.check_warmup(lambda pp, r, m, v: min(pp - r - 1 + (v - 1) * pp, m * v), [(4, 8, 2)])
    with pytest.raises(LabCheckFailed, match="rank 0 runs all its chunk forwards before its first backward, every one"):
        # the forwards before the first backward, minus one: right below the cap, one short at it
        lab08.check_warmup(lambda pp, r, m, v: min(2 * (pp - r - 1) + (v - 1) * pp, m * v - 1), [(4, 4, 2)])
    with pytest.raises(LabCheckFailed, match="one hop too many"):
        lab08.check_warmup(lambda pp, r, m, v: min(2 * (pp - r) + (v - 1) * pp, m * v), [(4, 8, 2)])
    lab08.check_p2p_messages(lambda pp, m, v: 2 * m * (pp * v - 1), [(4, 8, 4)])
    with pytest.raises(LabCheckFailed, match="wrap-arounds"):
        lab08.check_p2p_messages(lambda pp, m, v: 2 * m * v * (pp - 1), [(4, 8, 2)])
    with pytest.raises(LabCheckFailed, match="divide by v"):
        lab08.check_peak_share({v: simulate(build_schedule("1f1b", 4, 8) if v == 1 else build_schedule(
            "interleaved", 4, 8, v)).peak_activations[0] for v in (1, 2, 4)})


def test_accepted_names_the_kits_reason():
    def rule(pp, m, v):
        return pp >= 2 and v >= 2 and m >= pp and m % pp == 0
    lab08.check_accepted(rule, [(4, 8, 2), (4, 6, 2), (1, 4, 2), (4, 8, 1), (4, 2, 2)])
    with pytest.raises(LabCheckFailed, match="last group would hold"):
        lab08.check_accepted(lambda pp, m, v: pp >= 2 and v >= 2 and m >= pp, [(4, 6, 2)])
    with pytest.raises(LabCheckFailed, match="chunks"):
        lab08.check_accepted(lambda pp, m, v: pp >= 2 and m % pp == 0, [(4, 8, 1)])


def test_follow_051():
    lab08.check_facts(lambda pp, v, n: lab08.expected_facts(pp, v, n), [(4, 2, 16)])
    with pytest.raises(LabCheckFailed, match="adds no GPUs"):
        lab08.check_facts(lambda pp, v, n: {**lab08.expected_facts(pp, v, n), "gpus": pp * v}, [(4, 2, 16)])
    lab08.check_fill(lambda pp, v, f: Fraction(pp - 1) * f / v, [(4, 2, 1), (2, 2, 3)])
    with pytest.raises(LabCheckFailed, match="last \\*virtual\\* stage"):
        lab08.check_fill(lambda pp, v, f: (pp * v - 1) * f / v, [(4, 2, 1)])
    lab08.check_breakeven(0.375)
    with pytest.raises(LabCheckFailed, match="still faster"):
        lab08.check_breakeven(0.2)
    with pytest.raises(LabCheckFailed, match="refuses v=2"):
        lab08.check_choose_v(lambda pp, m, lat: 2, [(4, 6, 0.0)])


def test_stage_bytes_terms():
    spec = ModelSpec(vocab=1000, seq_len=128, hidden=256, heads=8, layers=8, micro_batch_size=4, dtype_bytes=4)

    def right(spec, n, emb, loss, logits_bytes=4, attention=True, scale=True):
        s, b, h, a, v, d = spec.seq_len, spec.micro_batch_size, spec.hidden, spec.heads, spec.vocab, spec.dtype_bytes
        per_layer = s * b * h * (34 + (5 * a * s / h if attention else 0)) * (d / 2 if scale else 1)
        return n * per_layer + (s * b * h * d if emb else 0) + (s * b * v * logits_bytes + s * b * h * d if loss else 0)

    cases = [("Et*3|t*3|t*2L", spec, 3)]
    lab08.check_stage_bytes(right, cases)
    with pytest.raises(LabCheckFailed, match="attention-scores term"):
        lab08.check_stage_bytes(lambda *a: right(*a, attention=False), cases)
    with pytest.raises(LabCheckFailed, match="scale by dtype_bytes / 2"):
        lab08.check_stage_bytes(lambda *a: right(*a, scale=False), cases)
    with pytest.raises(LabCheckFailed, match="fp32"):
        lab08.check_stage_bytes(lambda sp, n, e, end: right(sp, n, e, end, logits_bytes=sp.dtype_bytes if end else 4),
                                [("Et*4|t*4|t*4|t*4L", PRESETS["bank-pp8"][0], 4)])


def test_alive_and_resident():
    lab08.check_alive(lambda s, pp, m, r, v=1: lab08.expected_alive(s, pp, m, r, v), [("interleaved", 4, 4, 2)])
    with pytest.raises(LabCheckFailed, match="the warmup only"):
        lab08.check_alive(lambda s, pp, m, r, v=1: min(pp - r - 1, m), [("1f1b", 4, 8, 1)])
    with pytest.raises(LabCheckFailed, match="GPipe's count"):
        lab08.check_alive(lambda s, pp, m, r, v=1: m, [("1f1b", 4, 8, 1)])
    bank_model = PRESETS["bank-pp8"][0]
    lab08.check_resident(lambda sp, pp, bpp: lab08.expected_resident(sp, pp, bpp), [(bank_model, 8, 16)])
    with pytest.raises(LabCheckFailed, match="parameters / PP"):
        lab08.check_resident(lambda sp, pp, bpp: [sum(lab08.expected_resident(sp, pp, bpp)) / pp] * pp,
                             [(bank_model, 8, 16)])


def test_measurement_steps():
    lab08.check_steps(lab08.STEPS)
    with pytest.raises(LabCheckFailed, match="no GPU experiences the mean"):
        lab08.check_steps(lab08.STEPS + ["average"])
    with pytest.raises(LabCheckFailed, match="before the warm-up"):
        lab08.check_steps(["reset", "warmup", "measure", "read", "gather"])
    summaries = lab08.hidden_summary_cases(random.Random(0))
    lab08.check_predict_run(lab08.expected_run, summaries)
    with pytest.raises(LabCheckFailed, match="fp32"):
        lab08.check_predict_run(lambda s: {**lab08.expected_run(s), "deallocated_output_bytes": [
            x // 2 for x in lab08.expected_run(s)["deallocated_output_bytes"]]}, summaries)


def test_follow_052():
    bank_model = PRESETS["bank-pp8"][0]
    cases = [(bank_model, 8, 16, "1f1b", 16)]
    lab08.check_terms(lambda *a: lab08.expected_terms(*a), cases)
    with pytest.raises(LabCheckFailed, match="even split"):
        def even_resident(*a):
            terms = lab08.expected_terms(*a)
            return {**terms, "resident": [sum(terms["resident"]) / 8] * 8}
        lab08.check_terms(even_resident, cases)
    lab08.check_lifetime(lambda *a: lab08.expected_lifetime(*a), [("1f1b", 4, 8, 0, 0)])

    def f_end_to_b_start(schedule, pp, m, rank, mb):
        r = simulate(build_schedule(schedule, pp, m), fwd=1, bwd=2)
        ev = {(e.op.kind, e.op.microbatch): e for e in r.rank_events(rank)}
        return ev[("B", mb)].start - ev[("F", mb)].end

    with pytest.raises(LabCheckFailed, match="leaves out the two ops"):
        lab08.check_lifetime(f_end_to_b_start, [("1f1b", 4, 8, 0, 0)])
    totals, naive = lab08.bank_totals("1f1b")
    lab08.check_fullest({"1f1b": 0, "gpipe": 7}, max(totals) / naive)
    with pytest.raises(LabCheckFailed, match="so the largest bytes per microbatch decide"):
        lab08.check_fullest({"1f1b": 0, "gpipe": 0}, max(totals) / naive)
    cases = lab08.hidden_snapshot_cases(random.Random(0))
    lab08.check_snapshot(lab08.expected_snapshot, cases)

    def by_forward_end(result, t):
        out = []
        for r in range(result.schedule.pp):
            ev = result.rank_events(r)
            out.append(sum(e.op.kind == "F" and e.end <= t for e in ev)
                       - sum(e.op.kind == "B" and e.end <= t for e in ev))
        return out

    with pytest.raises(LabCheckFailed, match="middle of a forward"):
        lab08.check_snapshot(by_forward_end, cases)


def test_even_layout_helpers_agree_with_stage_costs():
    """The checks' expected resident bytes are the layout model's parameters, per rank."""
    spec = PRESETS["tiny"][0]
    costs = stage_costs(even_layout(spec.layers, 4), spec, 4)
    assert lab08.expected_resident(spec, 4, 2) == [2 * c.params for c in costs]


def test_fixed_hidden_cases_catch_the_known_mistakes_under_every_seed():
    """The hidden draws start with fixed edge cases: the d/2 omission, the strict `<`, an unsorted list, a
    schedule-blind prediction fail on them whatever the seed, and each listing starts with the same fixed case."""
    def no_dtype(spec, n, emb, loss):
        s, b, h, a, v, d = spec.seq_len, spec.micro_batch_size, spec.hidden, spec.heads, spec.vocab, spec.dtype_bytes
        return n * s * b * h * (34 + 5 * a * s / h) + (s * b * h * d if emb else 0) + (
            s * b * v * 4 + s * b * h * d if loss else 0)

    def strict(result, t):
        return [sum(e.op.kind == "F" and e.start < t for e in result.rank_events(r))
                - sum(e.op.kind == "B" and e.end <= t for e in result.rank_events(r))
                for r in range(result.schedule.pp)]

    def blind(summary):
        pp, m, v = summary["pp"], summary["microbatches"], summary["chunks"]
        sched = build_schedule("1f1b", pp, m) if v == 1 else build_schedule("interleaved", pp, m, v)
        return {**lab08.expected_run(summary), "peak_activations": simulate(sched).peak_activations}

    feedback = set()
    for seed in range(4):
        rng = random.Random(seed)
        with pytest.raises(LabCheckFailed, match="scale by dtype_bytes / 2") as err:
            lab08.check_stage_bytes(no_dtype, lab08.hidden_stage_cases(rng))
        feedback.add(str(err.value).split("; ")[0])  # the fixed case first; then this seed's own draws
        with pytest.raises(LabCheckFailed, match="exactly t") as err:
            lab08.check_snapshot(strict, lab08.hidden_snapshot_cases(rng))
        feedback.add(str(err.value).split("; ")[0])  # the fixed case first; then this seed's own draws
        with pytest.raises(LabCheckFailed, match="GPipe keeps all M") as err:
            lab08.check_predict_run(blind, lab08.hidden_summary_cases(rng))
        assert err.value.lost == 0.5
        feedback.add(str(err.value).split("; ")[0])  # the fixed case first; then this seed's own draws
    assert len(feedback) == 3


def test_stated_forms_and_partial_credit():
    with pytest.raises(LabCheckFailed, match="ascending"):
        lab08.check_rank_layers(lambda r, pp, v, n: sorted(lab08_rank_layers(r, pp, v, n), reverse=True), [(4, 2, 16)])
    summaries = [lab08.hidden_summary_cases(random.Random(0))[0]]
    with pytest.raises(LabCheckFailed, match="must return a dict .*'peak_activations'.*the values are right"):
        lab08.check_predict_run(lambda s: tuple(lab08.expected_run(s).values()), summaries)
    with pytest.raises(LabCheckFailed, match="resets the peak before the warm-up") as err:
        lab08.check_steps(["reset", "warmup", "measure", "read", "gather"])
    assert err.value.lost == pytest.approx(1 / 3)


def lab08_rank_layers(rank, pp, v, layers):
    layout = even_layout(layers, pp * v)
    return [i for k, st in enumerate(layout.stages) if k % pp == rank for i in st.layers]


def test_a_helper_mistake_costs_once():
    """memory_terms and fullest reuse the student's own resident_bytes: judged against it, they pass."""
    def no_positions(spec, pp, bpp):
        out = lab08.expected_resident(spec, pp, bpp)
        return [out[0] - spec.seq_len * spec.hidden * bpp] + out[1:]

    def terms(spec, pp, m, schedule, bpp):
        return {**lab08.expected_terms(spec, pp, m, schedule, bpp), "resident": no_positions(spec, pp, bpp)}

    cases = lab08.hidden_terms_cases(random.Random(0))
    lab08.check_terms(terms, cases, resident_bytes=no_positions)
    with pytest.raises(LabCheckFailed, match="'resident'") as err:
        lab08.check_terms(terms, cases)  # without the helper, the same answer is wrong
    assert err.value.lost == pytest.approx(1 / 3)
    totals = {}
    for name in ("1f1b", "gpipe"):
        t = terms(PRESETS["bank-pp8"][0], 8, 16, name, 16)
        totals[name] = [r + n * a for r, n, a in zip(t["resident"], t["alive"], t["bytes_per_microbatch"])]
    naive = sum(terms(PRESETS["bank-pp8"][0], 8, 16, "1f1b", 16)["resident"]) / 8
    fullest = {k: v.index(max(v)) for k, v in totals.items()}
    lab08.check_fullest(fullest, max(totals["1f1b"]) / naive, terms)
    with pytest.raises(LabCheckFailed, match="fullest_over_naive"):
        lab08.check_fullest(fullest, max(totals["1f1b"]) / naive)
