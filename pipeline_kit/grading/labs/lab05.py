"""Lab 5 (M046, M053: what crosses a stage boundary, and P2P orders that cannot hang).

The checks live by question in :mod:`pipeline_kit.grading.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m046 import *  # noqa: F403
from ..questions.m053 import *  # noqa: F403
