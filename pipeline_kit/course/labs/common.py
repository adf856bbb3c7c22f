"""The checks' vocabulary, under the name the lab modules used before the checks moved to
:mod:`pipeline_kit.course.questions`."""

from ..questions.common import *  # noqa: F403
from ..questions.common import LabCheckFailed  # noqa: F401
