"""Grading: rubric reports for hand-drawn timelines and lab notebooks.  Imports no torch and no matplotlib.

``timeline`` grades a hand-drawn grid; ``engine`` grades a lab notebook with every check in the grader's
process and the student's code in a sandboxed kernel (``kernel``, ``sandbox``), talking plain data
(``wire``, ``serve``, ``remote``).  README.md in this folder is the contract lab authors write against.
"""

from .remote import grading_seed, hidden_rng, probe
from .report import Check, ManualCheck, Report
from .timeline import GridError, check_timeline, parse_grid, timeline_grid

__all__ = ["Check", "GridError", "ManualCheck", "Report", "check_timeline", "grading_seed", "hidden_rng", "parse_grid",
           "probe", "timeline_grid"]
