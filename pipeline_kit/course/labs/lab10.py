"""Lab 10 (the capstone, beyond the question bank: plan a pipeline for a model under a memory budget).

The checks live in :mod:`pipeline_kit.course.questions.plan`; this module is the name the lab's test cells
call them by."""

from ..questions.plan import *  # noqa: F403
