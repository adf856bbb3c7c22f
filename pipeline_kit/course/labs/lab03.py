"""Lab 3 (M044, M045: derive the bubble, price what it leaves out, and ask what more microbatches buy).

The checks live by question in :mod:`pipeline_kit.course.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m044 import *  # noqa: F403
from ..questions.m045 import *  # noqa: F403


def fixed_runs() -> None:
    """The jobs this lab starts with fixed arguments, recorded once per class batch: the traced 2-rank run."""
    real_trace()  # noqa: F405
