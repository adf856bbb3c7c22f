"""Lab 2 (GPipe and 1F1B drawn by hand): typical wrong answers lose exactly their rubric points, with the right
feedback."""

import pytest
from lab_grading import assert_partial, grade_answers

from pipeline_kit.grading import timeline_grid
from pipeline_kit.course.labs import lab02
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

LAB = "lab02_timelines"
GPIPE = timeline_grid(simulate(build_schedule("gpipe", 4, 8), fwd=1, bwd=1))
ONE_F_ONE_B = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=1))


def fails(func, *args, match: str) -> None:
    with pytest.raises(LabCheckFailed, match=match):
        func(*args)


# -- fast: the check functions themselves -------------------------------------------------------------

def test_right_answers_pass():
    lab02.check_gpipe_order(GPIPE)
    lab02.check_1f1b_order(ONE_F_ONE_B)
    lab02.check_dependencies(ONE_F_ONE_B)
    lab02.check_peaks({"gpipe": [8, 8, 8, 8], "1f1b": [4, 3, 2, 1]})
    lab02.check_bubble({"gpipe": [6] * 4, "1f1b": [6] * 4}, {"gpipe": 0.273, "1f1b": 0.2727})
    lab02.check_imbalance({"gpipe": 57, "1f1b": 55}, {"gpipe": 6.000000000000085, "1f1b": 16})
    lab02.check_fill([0, 1, 2, 3])
    lab02.check_drain([0, 2, 4, 6])
    lab02.check_rank_idle(lambda pp, m, f, b: (pp - 1) * (f + b), [(4, 8, 1, 2), (3, 2, 2, 3)])
    lab02.check_slow_stage(6, [31, 31, 7, 31])
    lab02.check_f0([1, 2, 3, 4])
    lab02.check_earliest_backward({"op": "B0", "rank": 3, "slot": 5})
    lab02.check_rank0(3, 8)


def test_drawings():
    fails(lab02.check_1f1b_order, GPIPE, match="one_f_one_b_grid runs the GPipe order")
    fails(lab02.check_gpipe_order, ONE_F_ONE_B, match="gpipe_grid runs the 1F1B order .* swapped")
    fails(lab02.check_gpipe_order, "r0:\nr1:\nr2:\nr3:\n", match="gpipe_grid has no ops yet")
    fails(lab02.check_gpipe_order, GPIPE.replace("B6 B7 .  .  .", "B6 .  .  .  ."), match="rank 3 never runs B7")
    early = ONE_F_ONE_B.replace("r2: .  .  F0 F1 .  B0", "r2: .  .  F0 F1 B0 .")
    lab02.check_1f1b_order(early)  # the order is right; only the timing is wrong
    fails(lab02.check_dependencies, early, match=r"rank 2, slot 5: B0 is too early .* the earliest slot for it is 6")
    lazy = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=1, p2p_latency=1))
    fails(lab02.check_dependencies, lazy, match="avoidable idle")


def test_readings():
    fails(lab02.check_peaks, {"gpipe": [8] * 4, "1f1b": [1] * 4}, match="does not keep only the current microbatch")
    fails(lab02.check_peaks, {"gpipe": [8] * 4, "1f1b": [3, 2, 1, 0]}, match="counts only the warmup forwards")
    fails(lab02.check_peaks, {"gpipe": [4, 3, 2, 1], "1f1b": [8] * 4}, match="swapped")
    fails(lab02.check_bubble, {"gpipe": [6, 4, 2, 0], "1f1b": [6] * 4}, {"gpipe": 0.273, "1f1b": 0.273},
          match="counts only the gaps between a rank's first and last op")
    fails(lab02.check_bubble, {"gpipe": [6] * 4, "1f1b": [6] * 4}, {"gpipe": 0.375, "1f1b": 0.375},
          match="the Megatron paper's bubble ratio")
    fails(lab02.check_f0, [0, 1, 2, 3], match="counts slots from 0")
    fails(lab02.check_earliest_backward, {"op": "B0", "rank": 0, "slot": 5},
          match="starts from the loss -- which stage computes it")
    fails(lab02.check_earliest_backward, {"op": "B0", "rank": 3, "slot": 4}, match="one slot early")
    fails(lab02.check_rank0, 4, 8, match="the first of the steady state")
    fails(lab02.check_rank0, 3, 5, match="needs the gradient from rank 1's B0")


def test_measurements():
    fails(lab02.check_imbalance, {"gpipe": 41, "1f1b": 40}, {"gpipe": 6, "1f1b": 16},
          match="slows only stage 2's forward")
    fails(lab02.check_imbalance, {"gpipe": 57, "1f1b": 55}, {"gpipe": 6, "1f1b": 6}, match="is GPipe's count")
    fails(lab02.check_imbalance, {"gpipe": 57, "1f1b": 55}, {"gpipe": 48, "1f1b": 48},
          match="every transfer of the step")
    fails(lab02.check_fill, [3, 2, 1, 0], match="reversed")
    fails(lab02.check_drain, [0, 1, 2, 3], match="is too short: the drain is backwards")
    fails(lab02.check_rank_idle, lambda pp, m, f, b: (pp - 1) * f, [(4, 8, 1, 2)], match="only one direction")
    fails(lab02.check_rank_idle, lambda pp, m, f, b: (pp - 1) / (m + pp - 1), [(4, 8, 1, 2)], match="changes with M")
    fails(lab02.check_rank_idle, lambda pp, m, f, b: 1 / 0, [(4, 8, 1, 2)], match="raised ZeroDivisionError")
    fails(lab02.check_slow_stage, 3, [31, 31, 7, 31], match="the beat with equal stages")
    fails(lab02.check_slow_stage, 6, [9, 9, 7, 9], match="the slowness propagates")


# -- one whole notebook: each wrong answer costs exactly its checks ---------------------------------------

@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """Swapped drawings, a backward drawn too early, the 'current microbatch' myth, B0 on rank 0 and a warmup
    one too long -- and Fraction / numpy answers, which are right."""
    early = ONE_F_ONE_B.replace("r2: .  .  F0 F1 .  B0", "r2: .  .  F0 F1 B0 .")
    answers = {
        "gpipe_grid": f'gpipe_grid = """\n{ONE_F_ONE_B}"""',
        "one_f_one_b_grid": f'one_f_one_b_grid = """\n{early}"""',
        "peak_live": 'peak_live = {"gpipe": [8, 8, 8, 8], "1f1b": [1, 1, 1, 1]}',
        "bubble": ("from fractions import Fraction\nimport numpy as np\n"
                   'idle_slots = {"gpipe": np.array([6, 6, 6, 6]), "1f1b": [np.int64(6)] * 4}\n'
                   'bubble_fraction = {"gpipe": Fraction(3, 11), "1f1b": np.float64(3 / 11)}'),
        "reading": ("f0_slots = [1, 2, 3, 4]\n"
                    "earliest_backward = {'op': 'B0', 'rank': 0, 'slot': 8}\n"
                    "rank0_warmup = 4\n"
                    "rank0_b0_slot = 8\n"),
    }
    report = grade_answers(tmp_path, LAB, answers)
    assert_partial(report, {"m042_main_gpipe_order": "gpipe_grid runs the 1F1B order",
                            "m043_follow_dependencies": "rank 2, slot 5: B0 is too early",
                            "m042_main_activations": "does not keep only the current microbatch",
                            "m043_follow_earliest_b0": "backward starts from the loss -- which stage computes it",
                            "m043_follow_stage0_warmup": "the first of the steady state"})


# -- fair grading (issue 27): each part earns its share, and the fixed hidden cases come first --------------

def test_parts_share_the_points():
    with pytest.raises(LabCheckFailed) as exc:
        lab02.check_bubble({"gpipe": [6] * 4, "1f1b": [6] * 4}, {"gpipe": 0.375, "1f1b": 0.375})
    assert exc.value.lost == 0.5 and "bubble ratio" in str(exc.value)
    with pytest.raises(LabCheckFailed) as exc:  # a fraction right for the student's own idle slots costs nothing more
        lab02.check_bubble({"gpipe": [0, 0, 0, 0], "1f1b": [6] * 4}, {"gpipe": 0.0, "1f1b": 0.273})
    assert exc.value.lost == 0.25
    with pytest.raises(LabCheckFailed) as exc:
        lab02.check_rank0(4, 8)
    assert exc.value.lost == 0.5
    with pytest.raises(LabCheckFailed) as exc:
        lab02.check_earliest_backward({"op": "B0", "rank": 0, "slot": 8})
    assert abs(exc.value.lost - 1 / 3) < 1e-9
    with pytest.raises(LabCheckFailed, match=r"a dict \{'gpipe'"):
        lab02.check_peaks([8, 8, 8, 8])


def test_fixed_hidden_cases_come_first():
    import random
    assert lab02.hidden_rank_idle_cases(random.Random(0))[:4] == lab02.hidden_rank_idle_cases(random.Random(5))[:4]
    fails(lab02.check_rank_idle, lambda pp, m, f, b: min(m, pp - 1) * (f + b),
          lab02.hidden_rank_idle_cases(random.Random(0))[:4], match=r"rank_idle\(5, 1, 0.5, 1.5\)")
