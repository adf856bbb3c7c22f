"""Lab 4 (M043: write the non-interleaved 1F1B order from its three phases).

The checks live by question in :mod:`pipeline_kit.course.questions`; this module is the name the lab's
test cells (and the book) call them by."""

from ..questions.m043 import (  # noqa: F401
    check_order, check_p2p_memory, check_phases, check_warmup, hidden_order_cases, megatron_warmup,
    order_grid, shaped,
)
