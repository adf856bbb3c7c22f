"""Grading: rubric reports for hand-drawn timelines (and, later, notebooks).  Imports no torch."""

from .report import Check, Report
from .timeline import GridError, check_timeline, parse_grid, timeline_grid

__all__ = ["Check", "GridError", "Report", "check_timeline", "parse_grid", "timeline_grid"]
