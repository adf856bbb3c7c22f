"""Lab 1 (M041: schedule selection, the three control flows, the callback contract).

The checks live by question in :mod:`pipeline_kit.course.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m041 import *  # noqa: F403
