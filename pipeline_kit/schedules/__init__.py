"""Schedules: the per-rank op orders, their generators and their validator.  Imports no torch."""

from .families import CHUNKED, FAMILIES, SCHEDULES, Family, build_schedule, describe
from .generators import (
    ScheduleConfigError,
    gpipe,
    interleaved,
    interleaved_table,
    interleaved_warmup,
    no_pipelining,
    one_f_one_b,
    one_f_one_b_phases,
    zb_h1,
)
from .messages import Message, message_plan, op_messages, receives, sends
from .multi_stage import dualpipev, interleaved_zero_bubble, looped_bfs, zbv
from .ops import KINDS, PLACEMENTS, Op, OpParseError, Schedule, ScheduleTextError, stage_owner, virtual_stage
from .select import ScheduleFunction, select_schedule
from .validate import Dep, ScheduleError, check_ops, dataflow, is_valid, validate

__all__ = [
    "CHUNKED",
    "FAMILIES",
    "Family",
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
    "describe",
    "dualpipev",
    "gpipe",
    "interleaved",
    "interleaved_table",
    "interleaved_warmup",
    "interleaved_zero_bubble",
    "is_valid",
    "looped_bfs",
    "message_plan",
    "no_pipelining",
    "one_f_one_b",
    "one_f_one_b_phases",
    "op_messages",
    "receives",
    "select_schedule",
    "sends",
    "stage_owner",
    "validate",
    "virtual_stage",
    "zb_h1",
    "zbv",
]
