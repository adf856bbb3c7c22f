"""Lab 2 (M042 and the M043 follow-up: GPipe and 1F1B drawn by hand, then read off and measured).

The checks live by question in :mod:`pipeline_kit.grading.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m042 import *  # noqa: F403
from ..questions.m043 import check_dependencies, check_earliest_backward, check_f0, check_rank0  # noqa: F401
