"""Lab 9 (beyond the question bank: ZB-V and DualPipe-V, stages in a V and the zero-bubble schedules).

The checks live in :mod:`pipeline_kit.course.questions.zbv`; this module is the name the lab's test cells
call them by."""

from ..questions.zbv import *  # noqa: F403
