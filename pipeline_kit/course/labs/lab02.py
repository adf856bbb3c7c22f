"""Lab 2 (M042 and the M043 follow-up: GPipe and 1F1B drawn by hand, then read off and measured).

The checks live by question in :mod:`pipeline_kit.course.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m042 import *  # noqa: F403
from ..questions.m043 import check_dependencies, check_earliest_backward, check_f0, check_rank0  # noqa: F401

DRAWING_CHECKS = {"gpipe": ("gpipe_grid", ["m042_main_gpipe_order"]),
                  "1f1b": ("one_f_one_b_grid", ["m042_main_1f1b_order", "m043_follow_dependencies"])}


def drawing_report(grid, schedule: str):
    """The lab's checks of one drawing, with the lab's points and feedback -- what its check cells give it.

    ``check_timeline`` is the kit's general timeline checker, with its own rubric; this is the lab's
    (``print(lab02.drawing_report(one_f_one_b_grid, "1f1b").text())``)."""
    import sys

    from ...grading.tutor import run_checks

    if schedule not in DRAWING_CHECKS:
        raise ValueError(f"schedule must be one of {', '.join(map(repr, DRAWING_CHECKS))}, got {schedule!r}")
    name, grade_ids = DRAWING_CHECKS[schedule]
    return run_checks(grade_ids, {name: grid, "lab02": sys.modules[__name__]}, name)
