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
from .ops import KINDS, Op, OpParseError, Schedule, ScheduleTextError, stage_owner, virtual_stage
from .select import ScheduleFunction, select_schedule
from .validate import ScheduleError, check_ops, dataflow, decode_key, is_valid, validate

__all__ = [
    "KINDS",
    "SCHEDULES",
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
    "decode_key",
    "gpipe",
    "interleaved",
    "interleaved_table",
    "interleaved_warmup",
    "is_valid",
    "no_pipelining",
    "one_f_one_b",
    "select_schedule",
    "stage_owner",
    "validate",
    "virtual_stage",
    "zb_h1",
]
