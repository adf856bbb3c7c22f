"""The hand-drawn timeline grader: full marks for a right drawing, specific feedback for typical wrong ones."""

import json
import subprocess
import sys

import pytest

from pipeline_kit.grading import GridError, check_timeline, parse_grid, timeline_grid
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

ONE_F_ONE_B = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=1))
GPIPE = timeline_grid(simulate(build_schedule("gpipe", 4, 8), fwd=1, bwd=1))


def points(report):
    return {c.name: c.points for c in report.checks}


def test_the_model_answer_scores_full_marks():
    report = check_timeline(ONE_F_ONE_B, 4, 8)
    assert (report.score, report.max_score) == (10, 10)
    assert "the shortest 1f1b step is 22 slots" in report.checks[-1].feedback


def test_multi_slot_backwards():
    grid = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=2))
    assert "B0 -" in grid
    assert check_timeline(grid, 4, 8, bwd_slots=2).score == 10
    with pytest.raises(GridError, match=r"B0 takes 2 slots; write it followed by 1 '-'"):
        parse_grid(grid.replace("B0 -", "B0 .", 1), bwd_slots=2)


def test_backward_too_early_names_rank_slot_op_and_what_it_waited_for():
    early = ONE_F_ONE_B.replace("r2: .  .  F0 F1 .  B0", "r2: .  .  F0 F1 B0 .")
    report = check_timeline(early, 4, 8)
    assert points(report) == {"every op exactly once": 3, "dependencies respected": 0, "schedule order": 1,
                              "shortest makespan": 0}
    assert report.checks[1].feedback == ("rank 2, slot 5: B0 is too early — it needs the gradient of B0 from rank 3, "
                                         "which finishes in slot 5; the earliest slot for it is 6")


def test_forward_before_its_input_arrives():
    wrong = ONE_F_ONE_B.replace("r1: .  F0", "r1: F0 .")
    feedback = check_timeline(wrong, 4, 8).checks[1].feedback
    assert feedback.startswith("rank 1, slot 1: F0 is too early — it needs the activation of F0 from rank 0")


def test_missing_and_duplicate_ops():
    missing = ONE_F_ONE_B.replace("F7 B7", "F7 . ")
    report = check_timeline(missing, 4, 8)
    assert points(report)["every op exactly once"] == 0
    assert "rank 3 never runs B7" in report.checks[0].feedback
    assert report.score == 0
    dup = ONE_F_ONE_B.replace("r0: F0 F1", "r0: F0 F0")
    assert "appears twice" in check_timeline(dup, 4, 8).checks[0].feedback


def test_gpipe_drawn_when_1f1b_asked_loses_only_the_order_point():
    report = check_timeline(GPIPE, 4, 8, schedule="1f1b")
    assert points(report) == {"every op exactly once": 3, "dependencies respected": 4, "schedule order": 0,
                              "shortest makespan": 2}
    assert report.checks[2].feedback.startswith("rank 0: op 5 is F4, but 1f1b runs B0 there")
    assert check_timeline(GPIPE, 4, 8, schedule="gpipe").score == 10


def test_avoidable_idle_costs_the_makespan_points():
    # a correct order drawn as if every P2P hop took a slot: all dependencies hold, but it ends late
    lazy = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=1, p2p_latency=1))
    report = check_timeline(lazy, 4, 8)
    assert points(report) == {"every op exactly once": 3, "dependencies respected": 4, "schedule order": 1,
                              "shortest makespan": 0}
    assert "the shortest 1f1b step is 22 slots" in report.checks[-1].feedback
    assert "avoidable idle" in report.checks[-1].feedback


def test_circular_wait_is_reported():
    stuck = "r0: F0 B0 F1 B1\nr1: . F0 F1 B0 B1\n"
    report = check_timeline(stuck, 2, 2)
    assert "wait on each other" in report.checks[1].feedback


@pytest.mark.parametrize("grid,message", [
    ("r0: F0 X1\nr1: F0\n", "row 1 (r0), column 2: 'X1' is not an op"),
    ("hello\n", "row 1: expected 'rK: op op ...'"),
    ("r0: F0 -\n", "row 1 (r0), column 2: '-' continues an op"),
    ("", "no rows found"),
])
def test_unreadable_drawings_score_zero_with_row_and_column(grid, message):
    report = check_timeline(grid, 2, 2)
    assert report.score == 0 and all(message in c.feedback for c in report.checks)


def test_wrong_number_of_rows():
    report = check_timeline("r0: F0 B0\n", 2, 1)
    assert report.score == 0 and "missing ['r1']" in report.checks[0].feedback


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_check_timeline_command_json_contract(tmp_path):
    path = tmp_path / "drawing.txt"
    path.write_text(ONE_F_ONE_B)
    out = json.loads(run_cli("check-timeline", str(path), "--pp", "4", "--microbatches", "8", "--json").stdout)
    assert set(out) == {"notebook", "score", "max_score", "checks"}
    assert (out["score"], out["max_score"]) == (10, 10)
    assert set(out["checks"][0]) == {"name", "points", "max_points", "feedback"}
    text = run_cli("check-timeline", str(path), "--pp", "4", "-m", "8", "--schedule", "gpipe").stdout
    assert "9 / 10" in text.splitlines()[0]
    proc = run_cli("check-timeline", str(tmp_path / "nope.txt"), "--pp", "4", "-m", "8")
    assert proc.returncode == 2 and "argument FILE: cannot read" in proc.stderr


ZB_H1 = timeline_grid(simulate(build_schedule("zb-h1", 4, 8), fwd=1, bwd=2))  # F = I = W = 1 slot


def test_zb_h1_drawings_grade_like_the_others(tmp_path):
    """Split-backward grids once crashed the grader with a KeyError on the first W."""
    assert "W0" in ZB_H1 and check_timeline(ZB_H1, 4, 8, "zb-h1").score == 10
    assert "the shortest zb-h1 step is 27 slots" in check_timeline(ZB_H1, 4, 8, "zb-h1").checks[-1].feedback
    wide = timeline_grid(simulate(build_schedule("zb-h1", 3, 4), fwd=2, bwd=4))  # I = W = 2 slots
    assert check_timeline(wide, 3, 4, "zb-h1", fwd_slots=2, bwd_slots=2).score == 10
    # W0 on rank 3 moved into its I0's slot: too early, named as such
    early = ZB_H1.replace("r3: .  .  .  F0 I0 F1 I1 F2 I2 F3 I3 W0", "r3: .  .  .  F0 I0 F1 I1 F2 I2 F3 W0 I3")
    report = check_timeline(early, 4, 8, "zb-h1")
    assert points(report)["dependencies respected"] == 4 and points(report)["schedule order"] == 0
    late_w = ZB_H1.replace("r0: F0 F1 F2 F3 .  .  .  I0 W0", "r0: F0 F1 F2 F3 .  .  .  W0 I0")
    assert check_timeline(late_w, 4, 8, "zb-h1").checks[1].feedback == (
        "this order can never run: rank 0 runs W0 (op 5) before I0 (op 6), but W0 waits for I0: a weight-grad (W) "
        "needs its input-grad (I) first")
    # a drawing with full backwards is the same work: B takes I's and W's slots, so 1F1B cannot be shorter
    one_f_one_b = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=2))
    report = check_timeline(one_f_one_b, 4, 8, "zb-h1")
    assert points(report)["shortest makespan"] == 0 and "ends after slot 33" in report.checks[-1].feedback
    path = tmp_path / "zb.txt"
    path.write_text(ZB_H1)
    proc = run_cli("check-timeline", str(path), "--pp", "4", "-m", "8", "--schedule", "zb-h1", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["score"] == 10, proc.stderr
