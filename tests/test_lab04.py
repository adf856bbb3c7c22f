"""Lab 4 (the 1F1B generator): typical wrong generators lose exactly their rubric points, with the right feedback."""

import random

import pytest
from lab_grading import assert_partial, grade_answers

from pipeline_kit.course.labs import lab04
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.course.questions import m043
from pipeline_kit.schedules import Op, one_f_one_b
from pipeline_kit.sim import simulate

LAB = "lab04_1f1b_generator"
CASES = [(4, 8), (2, 3), (4, 2), (2, 1), (1, 3), (8, 16), (5, 3), (3, 1), (6, 9)]
DEADLOCK = {"pp": 2, "microbatches": 2, "ranks": [["F0", "B0", "F1", "B1"], ["F0", "F1", "B0", "B1"]]}


def phases_with(warmup_of, backward_of=lambda warmup, i: i):
    """A generator of 1F1B-shaped phases with a chosen warmup rule and steady-state backward."""
    def phases(pp, microbatches, rank):
        w = warmup_of(pp, microbatches, rank)
        steady = []
        for i in range(microbatches - w):
            steady += [f"F{w + i}", f"B{backward_of(w, i)}"]
        return [f"F{m}" for m in range(w)], steady, [f"B{m}" for m in range(microbatches - w, microbatches)]
    return phases


def order_with(warmup_of):
    phases = phases_with(warmup_of)
    return lambda pp, microbatches, rank: [op for part in phases(pp, microbatches, rank) for op in part]


MEGATRON = phases_with(lambda pp, m, r: min(pp - r - 1, m))


def fails(func, *args, match: str) -> None:
    with pytest.raises(LabCheckFailed, match=match):
        func(*args)


# -- fast: the check functions themselves -------------------------------------------------------------

def test_reference_phases_are_the_kit_order():
    """``shaped`` (the kit's one-rank builder) is ``one_f_one_b``'s rank, op for op, and the peak read off a rank's
    order is the simulator's: on the fixed cases and on drawn ones up to 64 ranks and 256 microbatches."""
    rng = random.Random(43)
    wider = [(rng.randint(2, 64), rng.randint(1, 256)) for _ in range(20)]
    for pp, m in CASES + wider:
        schedule = one_f_one_b(pp, m)
        peaks = simulate(schedule).peak_activations
        assert m043._peaks(pp, m, tuple(range(1, pp))) == {r: peaks[r] for r in range(1, pp)}
        for r in range(pp):
            w = lab04.megatron_warmup(pp, m, r)
            want = [op.text() for op in schedule.ranks[r]]
            assert [op for part in lab04.shaped(w, m) for op in part] == want


def test_right_answers_pass():
    lab04.check_phases(MEGATRON, CASES)
    lab04.check_warmup(MEGATRON, CASES)
    lab04.check_order(order_with(lambda pp, m, r: min(pp - r - 1, m)), CASES)
    lab04.check_p2p_memory(lambda pp, m, r: min(pp - r, m), DEADLOCK, CASES)


def test_phases():
    fails(lab04.check_phases, phases_with(lambda pp, m, r: min(pp - r - 1, m), lambda w, i: w + i), CASES,
          match=r"after F3 the steady state runs the backward of the oldest microbatch in flight, not B3")
    fails(lab04.check_phases, lambda pp, m, r: ([], [t for i in range(m) for t in (f"B{i}", f"F{i}")], []), CASES,
          match="alternates one forward, then one backward, starting with a forward")
    fails(lab04.check_phases, lambda pp, m, r: ([f"F{i}" for i in range(m)], [], [f"B{i}" for i in range(m)][::-1]),
          CASES, match="the cooldown runs the backwards left in microbatch order")
    fails(lab04.check_phases, lambda pp, m, r: [["F0"], []], CASES,
          match="must return a tuple .warmup, steady, cooldown.")
    fails(lab04.check_phases, lambda pp, m, r: 1 / 0, CASES, match="raised ZeroDivisionError")
    lab04.check_phases(phases_with(lambda pp, m, r: min(pp - r, m)), CASES)  # a wrong warmup is the next check's


def test_warmup():
    fails(lab04.check_warmup, phases_with(lambda pp, m, r: min(pp - r, m)), CASES,
          match=r"\(4, 8, 0\): 4 warmup forwards is one too many -- the next forward is already the first of the")
    fails(lab04.check_warmup, phases_with(lambda pp, m, r: min(pp - 1, m)), CASES,
          match="every rank runs 3 warmup forwards, but the warmup differs by rank")
    fails(lab04.check_warmup, phases_with(lambda pp, m, r: min(r, m)), CASES, match="reversed")
    fails(lab04.check_warmup, phases_with(lambda pp, m, r: pp - r - 1), [(4, 2)],
          match="negative count|only M = 2 microbatches")


def test_order():
    fails(lab04.check_order, order_with(lambda pp, m, r: min(pp - r, m)), CASES,
          match=(r"pp=4, M=8, rank 0, op 5: got F4, not 1F1B's op there -- on rank 0 your order runs 5 forwards "
                 r"before its first backward, more than 1F1B: its warmup, then the first forward of the steady "
                 r"state"))
    fails(lab04.check_order, order_with(lambda pp, m, r: m), CASES,
          match="rank 0 your order runs 8 forwards before its first")
    fails(lab04.check_order, order_with(lambda pp, m, r: [3, 2, 1, 2][r] if pp == 4 else min(pp - r - 1, m)), CASES,
          match=r"these orders deadlock, the validator says: deadlock, circular wait rank 2 -> rank 3 -> rank 2")
    fails(lab04.check_order, lambda pp, m, r: [f"F{i}" for i in range(m)], CASES, match="run no backward at all")
    # the kit's own generator, by any route, is refused by running the answer cells without the kit: that needs
    # a notebook's cells, so tests/test_sandbox_attacks.py grades it (test_the_kit_generator_by_a_hidden_route)


def test_memory_and_deadlock():
    deadlock = DEADLOCK
    fails(lab04.check_p2p_memory, lambda pp, m, r: pp - r - 1, deadlock, CASES, match="counts only the warmup")
    fails(lab04.check_p2p_memory, lambda pp, m, r: pp - r, deadlock, CASES, match="only M = 2 microbatches")
    fails(lab04.check_p2p_memory, lambda pp, m, r: m, deadlock, CASES, match="GPipe's peak")
    fine = {"pp": 2, "microbatches": 2, "ranks": [["F0", "F1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]}
    fails(lab04.check_p2p_memory, lambda pp, m, r: min(pp - r, m), fine, CASES, match="runs to the end")
    local = {"pp": 2, "microbatches": 2, "ranks": [["B0", "F0", "F1", "B1"], ["F0", "F1", "B0", "B1"]]}
    fails(lab04.check_p2p_memory, lambda pp, m, r: min(pp - r, m), local, CASES, match="stuck on one rank")


def test_same_warmup_on_every_rank_misses_the_order():
    fails(lab04.check_order, order_with(lambda pp, m, r: min(pp - 1, m)), [(4, 8)],
          match="rank 1 your order runs 4 forwards before its first backward")


# -- one whole notebook: each wrong answer costs exactly its checks ---------------------------------------

@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """A warmup one too long, an order without the cap at M (so it fails only hidden cases), and a peak that
    counts only the warmup -- each in its own answer cell, each costing its own check."""
    answers = {
        "phases": """
def one_f_one_b_phases(pp, microbatches, rank):
    warmup = min(pp - rank, microbatches)
    steady = []
    for i in range(microbatches - warmup):
        steady += [f"F{warmup + i}", f"B{i}"]
    return [f"F{m}" for m in range(warmup)], steady, [f"B{m}" for m in range(microbatches - warmup, microbatches)]
""",
        "order": """
def one_f_one_b_order(pp, microbatches, rank):
    order = [f"F{m}" for m in range(pp - rank - 1)]
    for m in range(pp - rank - 1, microbatches):
        order += [f"F{m}", f"B{m - (pp - rank - 1)}"]
    return order + [f"B{m}" for m in range(microbatches - (pp - rank - 1), microbatches)]
""",
        "p2p_memory": """
def max_in_flight(pp, microbatches, rank):
    return min(pp - rank - 1, microbatches)

deadlock_example = {"pp": 2, "microbatches": 2, "ranks": [["F0", "F1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]}
""",
    }
    report = grade_answers(tmp_path, LAB, answers)
    assert_partial(report, {"m043_main_warmup": "one too many",
                            "m043_main_dependencies": "microbatches are numbered from 0",
                            "m043_main_p2p_memory": "counts only the warmup forwards"})


# -- fair grading (issue 27): one mistake costs once, and each part earns its share ------------------------

def test_an_order_joined_from_the_students_own_phases_costs_only_the_phases():
    too_long = phases_with(lambda pp, m, r: min(pp - r, m))
    joined = order_with(lambda pp, m, r: min(pp - r, m))
    lab04.check_order(joined, CASES, phases=too_long)  # the warmup check charges the warmup, once
    fails(lab04.check_order, joined, CASES, MEGATRON, match="rank 0 your order runs 5 forwards")  # not the phases'
    deadlock = phases_with(lambda pp, m, r: [3, 2, 1, 2][r] if pp == 4 else min(pp - r - 1, m))
    joined_deadlock = order_with(lambda pp, m, r: [3, 2, 1, 2][r] if pp == 4 else min(pp - r - 1, m))
    fails(lab04.check_order, joined_deadlock, CASES, deadlock, match="these orders deadlock")  # still validated


def test_parts_share_the_points():
    with pytest.raises(LabCheckFailed) as exc:
        lab04.check_p2p_memory(lambda pp, m, r: pp - r - 1, {"pp": 2, "microbatches": 1, "ranks": []}, CASES)
    assert exc.value.lost == 1.0 and "counts only the warmup" in str(exc.value) and "deadlock_example" in str(exc.value)
    with pytest.raises(LabCheckFailed) as exc:
        lab04.check_p2p_memory(lambda pp, m, r: min(pp - r, m), {"pp": 2, "microbatches": 1, "ranks": []}, CASES)
    assert exc.value.lost == 0.5
    reversed_cooldown = phases_with(lambda pp, m, r: min(pp - r - 1, m))
    with pytest.raises(LabCheckFailed) as exc:
        lab04.check_phases(lambda pp, m, r: (lambda w, s, c: (w, s, c[::-1]))(*reversed_cooldown(pp, m, r)), CASES)
    assert abs(exc.value.lost - 1 / 3) < 1e-9 and "microbatch order" in str(exc.value)


def test_fixed_hidden_cases_come_first():
    for per_rank in (False, True):
        first = lab04.hidden_order_cases(random.Random(0), per_rank=per_rank)[:8]
        assert first == lab04.hidden_order_cases(random.Random(1), per_rank=per_rank)[:8]
        assert {(4, 2), (2, 1), (1, 3), (3, 1)} <= set(first)


# -- the wide hidden cases (issue 33): a few ranks of deep pipelines, fast, with feedback that stays short -------

DEEP = [(1000, 3000, (0, 17, 640, 999)), (700, 5, (0, 3, 350, 699)), (3, 8192, (0, 1, 2))]


def test_deep_drawn_cases_check_only_their_ranks():
    asked = []

    def phases(pp, m, r):
        asked.append((pp, m, r))
        return MEGATRON(pp, m, r)

    lab04.check_phases(phases, DEEP)
    lab04.check_warmup(phases, DEEP)
    assert sorted(set(asked)) == sorted((pp, m, r) for pp, m, ranks in DEEP for r in ranks)
    lab04.check_p2p_memory(lambda pp, m, r: min(pp - r, m), DEADLOCK, DEEP)
    lab04.check_order(order_with(lambda pp, m, r: min(pp - r - 1, m)), [(256, 128), (2, 4096)])
    # ops as Op objects, or with spaces, are fine too (they take the long way, not the kit's texts)
    lab04.check_order(lambda pp, m, r: [Op.parse(t) for t in order_with(lambda *a: min(a[0] - a[2] - 1, a[1]))(
        pp, m, r)], [(64, 100)])
    lab04.check_phases(lambda pp, m, r: tuple([f" {t}" for t in part] for part in MEGATRON(pp, m, r)), DEEP[:1])


def test_feedback_on_deep_cases_stays_short():
    reversed_cooldown = phases_with(lambda pp, m, r: min(pp - r - 1, m))
    with pytest.raises(LabCheckFailed) as exc:
        lab04.check_phases(lambda pp, m, r: (lambda w, s, c: (w, s, c[::-1]))(*reversed_cooldown(pp, m, r)),
                           DEEP[:1])
    text = str(exc.value)
    assert "(1000, 3000, 0): the cooldown runs the backwards left in microbatch order; got B2999 B2998 B2997 " \
           "B2996 B2995 B2994 ... B2002 B2001 (999 ops)" in text
    assert len(text) < 400
    fails(lab04.check_warmup, phases_with(lambda pp, m, r: min(pp - 1, m)), DEEP[:1],
          match=r"\(1000, 3000, 17\): ranks 0, 17, 640, 999 all run 999 warmup forwards, but the warmup differs")
    fails(lab04.check_warmup, phases_with(lambda pp, m, r: min(r, m)), DEEP[:1], match="reversed")
    fails(lab04.check_p2p_memory, lambda pp, m, r: pp - r - 1, DEADLOCK, DEEP[1:2],
          match=r"max_in_flight\(700, 5, 0\) = 699 is more than the microbatches 1F1B keeps on rank 0 at its peak")
    with pytest.raises(LabCheckFailed) as exc:  # a deadlock of 100 ranks: the validator's first clauses
        lab04.check_order(order_with(lambda pp, m, r: min(r, m)), [(100, 50)])
    assert str(exc.value).startswith("pp=100, M=50: these orders deadlock, the validator says: deadlock, circular "
                                     "wait rank 0 -> rank 1 -> rank 0: rank 0 is blocked at B0 (op 2)")
    assert str(exc.value).endswith("; ...") and len(str(exc.value)) < 320
    fails(lab04.check_order, order_with(lambda pp, m, r: min(pp - r, m)), [(256, 128)],
          match=r"pp=256, M=128, rank 129, op 128: got F127, not 1F1B's op there")  # (128: the same ops)
