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
from .multi_stage import dualpipev, interleaved_zero_bubble, looped_bfs, zbv
from .ops import KINDS, Op, OpParseError, Schedule, ScheduleTextError, stage_owner, virtual_stage
from .select import ScheduleFunction, select_schedule
from .validate import ScheduleError, check_ops, dataflow, decode_key, is_valid, validate

__all__ = [
    "CHUNKED",
    "FAMILIES",
    "Family",
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
    "describe",
    "dualpipev",
    "gpipe",
    "interleaved",
    "interleaved_table",
    "interleaved_warmup",
    "interleaved_zero_bubble",
    "is_valid",
    "looped_bfs",
    "no_pipelining",
    "one_f_one_b",
    "one_f_one_b_phases",
    "select_schedule",
    "stage_owner",
    "validate",
    "virtual_stage",
    "zb_h1",
    "zbv",
]
