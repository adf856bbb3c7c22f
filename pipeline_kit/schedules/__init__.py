"""Schedules: the per-rank op orders, their generators and their validator.  Imports no torch."""

from .generators import (
    SCHEDULES,
    ScheduleConfigError,
    build_schedule,
    gpipe,
    interleaved,
    interleaved_table,
    interleaved_warmup,
    no_pipelining,
    one_f_one_b,
    zb_h1,
)
from .messages import Message, message_plan, op_messages, receives, sends
from .ops import KINDS, PLACEMENTS, Op, OpParseError, Schedule, ScheduleTextError, stage_owner, virtual_stage
from .select import ScheduleFunction, select_schedule
from .validate import Dep, ScheduleError, check_ops, dataflow, is_valid, validate

__all__ = [
    "KINDS",
    "PLACEMENTS",
    "SCHEDULES",
    "Dep",
    "Message",
    "Op",
    "OpParseError",
    "Schedule",
    "ScheduleConfigError",
    "ScheduleError",
    "ScheduleFunction",
    "ScheduleTextError",
    "build_schedule",
    "check_ops",
    "dataflow",
    "gpipe",
    "interleaved",
    "interleaved_table",
    "interleaved_warmup",
    "is_valid",
    "message_plan",
    "no_pipelining",
    "one_f_one_b",
    "op_messages",
    "receives",
    "select_schedule",
    "sends",
    "stage_owner",
    "validate",
    "virtual_stage",
    "zb_h1",
]
