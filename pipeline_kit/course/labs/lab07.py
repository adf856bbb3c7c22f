"""Lab 7 (M049, M050, M054: find the slow stage in a trace, re-cut the model, explain PP8/M16 = 2.59x).

The checks live by question in :mod:`pipeline_kit.course.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.synthetic import *  # noqa: F403
from ..questions.m049 import *  # noqa: F403
from ..questions.m050 import *  # noqa: F403
from ..questions.m054 import *  # noqa: F403
