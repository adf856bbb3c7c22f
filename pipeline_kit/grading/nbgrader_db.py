"""The kit's sandboxed scores, written into an nbgrader course's gradebook database.

Why: formgrader, ``nbgrader export`` and the LMS exports read that database, and under ``nbgrader autograde``
the checks run in the student's own kernel, where they can be replaced.  So the kit grades (sandboxed) and then
sets each grade cell's ``auto_score`` here, by the cell's ``grade_id``, through nbgrader's own ``Gradebook`` API;
the submission is created the way ``autograde`` creates it where it is not there yet.  A cell of a refused
notebook (no lab, unreadable, not the student's own file: the notebook's fault) gets 0, so a stale score of an
earlier run never survives a regrade.  A notebook *not graded* (the machine failed, not the notebook) gets nothing
at all -- no student, no submission, no score -- and a problem line: a machine's failure is never a score.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..argtypes import UsageError
from .batch import NOT_GRADED, Row


def database_url(course: str) -> str:
    """The course's database: nbgrader's default, ``gradebook.db`` in the course folder (a course that sets
    another ``CourseDirectory.db_url`` is not supported: the check below refuses it, naming the file it wanted)."""
    return f"sqlite:///{os.path.abspath(os.path.join(course, 'gradebook.db'))}"


def check_course(course: str, assignments: set[str]) -> str:
    """The database URL, after checking that it holds every assignment graded (nbgrader generate_assignment
    records an assignment's notebooks and grade cells there)."""
    try:
        from nbgrader.api import Gradebook, MissingEntry
    except ImportError:
        raise UsageError("argument --nbgrader: nbgrader is not installed (pip install nbgrader)") from None
    url = database_url(course)
    if not Path(course, "gradebook.db").is_file():
        raise UsageError(f"argument --nbgrader: {course} has no gradebook.db; run `nbgrader generate_assignment "
                         f"ASSIGNMENT` in the course first")
    with Gradebook(url) as gb:
        for name in sorted(assignments):
            try:
                gb.find_assignment(name)
            except MissingEntry:
                raise UsageError(f"argument --nbgrader: assignment {name!r} is not in {course}/gradebook.db; run "
                                 f"`nbgrader generate_assignment {name}` first") from None
    return url


def record(url: str, rows: list[Row]) -> list[str]:
    """Set the scores of ``rows`` (those from an nbgrader course) in the database; returns the problems."""
    import warnings

    from nbgrader.api import Gradebook, MissingEntry

    problems = []
    with Gradebook(url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (SQLAlchemy's autoflush warning inside nbgrader's own add_submission)
        for row in rows:
            if row.assignment is None:
                continue
            if row.status == NOT_GRADED:
                problems.append(f"{row.student} {row.assignment}: not graded ({row.error}); nothing written: "
                                "rerun it")
                continue
            gb.update_or_create_student(row.student)
            try:
                gb.find_submission(row.assignment, row.student)
            except MissingEntry:
                gb.add_submission(row.assignment, row.student)
            try:
                notebook = gb.find_submission_notebook(row.notebook_id, row.assignment, row.student)
            except MissingEntry:
                problems.append(f"{row.student} {row.assignment}: the assignment has no notebook {row.notebook_id!r} "
                                "(a renamed file?); not recorded")
                continue
            points = {c["name"]: c["points"] for c in row.report["checks"]} if row.report else {}
            for grade in notebook.grades:
                if grade.name not in points and row.report:
                    problems.append(f"{row.student} {row.assignment}: grade cell {grade.name!r} is not one of the "
                                    "kit's checks; left as it was")
                    continue
                grade.auto_score = points.get(grade.name, 0.0)
                grade.needs_manual_grade = False
            gb.db.commit()
    return problems
