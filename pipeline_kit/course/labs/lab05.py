"""Lab 5 (M046, M053: what crosses a stage boundary, and P2P orders that cannot hang).

The checks live by question in :mod:`pipeline_kit.course.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m046 import *  # noqa: F403
from ..questions.m053 import *  # noqa: F403


def fixed_runs() -> None:
    """The jobs this lab starts with fixed arguments, recorded once per class batch: the given cell's hang, the
    hidden test's, and the given cell's crash."""
    from ...launch import torchrun
    for fault in ("skip-send:rank=1,mb=3", "skip-send:rank=2,mb=5"):
        real_hang(fault)  # noqa: F405
    torchrun(4, *RUN, "--inject", "crash:rank=2,mb=1", timeout=120)  # noqa: F405
