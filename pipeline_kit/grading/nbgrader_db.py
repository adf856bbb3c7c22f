"""The kit's sandboxed scores, written into an nbgrader course: its gradebook database, and the folders nbgrader's
own commands read (``feedback/`` for ``release_feedback``, ``autograded/`` for formgrader's manual grading).

Why: formgrader, ``nbgrader export`` and the LMS exports read that database, and under ``nbgrader autograde``
the checks run in the student's own kernel, where they can be replaced.  So the kit grades (sandboxed) and then
sets each grade cell's ``auto_score`` here, by the cell's ``grade_id``, through nbgrader's own ``Gradebook`` API;
the submission is created the way ``autograde`` creates it where it is not there yet, with its timestamp, and each
notebook's late penalty is the one :func:`.nbgrader_course.late_penalties` computed with the course's plugin.  A
manually graded cell is left to formgrader: marked as needing a grade where the student answered (0 where not), a
score the instructor gave kept.  A cell of a refused notebook gets 0, so a stale score of an earlier run never
survives a regrade.  A notebook *not graded* (the machine failed, not the notebook) gets nothing at all and a
problem line: a machine's failure is never a score.

Why the database is checked read-only first and written last: it is the course's, and a batch takes minutes.  An
empty or foreign file is refused before any grade (nbgrader would turn it into a new database); the scores are
written only after the kit's gradebook holds them, and a database another program holds locked (formgrader
saving) is waited for, then reported in one line -- the scores are safe in the gradebook, and
``gradebook record`` writes them later.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ..argtypes import UsageError
from ..interrupts import write_file_atomically
from .batch import GRADED, MISSING, NOT_GRADED, Row
from .classlist import printable, small_file

LOCKED_WAIT_S = 60  # how long a locked database is retried before the command reports it
NEEDED_TABLES = {"assignment", "notebook", "grade_cells", "student", "submitted_assignment", "grade", "alembic_version"}


def database_url(course: str) -> str:
    """The course's database: nbgrader's default, ``gradebook.db`` in the course folder (a course that sets
    another ``CourseDirectory.db_url`` is not supported: the check below refuses it, naming the file it wanted)."""
    return f"sqlite:///{os.path.abspath(os.path.join(course, 'gradebook.db'))}"


def check_database(course: str) -> None:
    """``COURSE/gradebook.db`` is nbgrader's database, read-only: a regular, non-empty SQLite file holding nbgrader's
    tables; anything else is one line naming the file (exit 2), and the file is not touched."""
    path = Path(course, "gradebook.db")
    hint = "run `nbgrader generate_assignment ASSIGNMENT` in the course first"
    if not path.is_file() or path.is_symlink():
        raise UsageError(f"argument --nbgrader: {printable(course)} has no gradebook.db (a regular file); {hint}")
    if path.stat().st_size == 0:
        raise UsageError(f"argument --nbgrader: {printable(str(path))} is empty (0 bytes), not nbgrader's database; "
                         f"remove it and {hint}")
    try:
        with sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=LOCKED_WAIT_S) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise UsageError(f"argument --nbgrader: {printable(str(path))} is not a readable SQLite database ({exc}); "
                         "nothing was written") from None
    if not NEEDED_TABLES <= tables:
        raise UsageError(f"argument --nbgrader: {printable(str(path))} is not nbgrader's database (no table "
                         f"{', '.join(sorted(NEEDED_TABLES - tables))}); nothing was written")


def check_course(course: str, assignments: set[str]) -> str:
    """The database URL, after checking that it is nbgrader's and holds every assignment graded (``nbgrader
    generate_assignment`` records an assignment's notebooks and grade cells there)."""
    try:
        from nbgrader.api import Gradebook, MissingEntry
    except ImportError:
        raise UsageError("argument --nbgrader: nbgrader is not installed (pip install nbgrader)") from None
    check_database(course)
    url = database_url(course)
    with Gradebook(url) as gb:
        for name in sorted(assignments):
            try:
                gb.find_assignment(name)
            except MissingEntry:
                raise UsageError(f"argument --nbgrader: assignment {name!r} is not in {course}/gradebook.db; run "
                                 f"`nbgrader generate_assignment {name}` first") from None
    return url


def record(url: str, rows: list[Row]) -> tuple[list[str], bool]:
    """Set the scores of ``rows`` (those from an nbgrader course) in the database, retrying while another program
    holds it locked (at most :data:`LOCKED_WAIT_S` s); returns the problems, one line each, and whether it was
    written."""
    from sqlalchemy.exc import OperationalError
    deadline = time.monotonic() + LOCKED_WAIT_S
    while True:
        try:
            return _record(url, rows), True
        except OperationalError as exc:
            locked = "locked" in str(exc)
            if not locked or time.monotonic() > deadline:
                why = "locked by another program, such as formgrader" if locked else printable(str(exc.orig))
                return [f"gradebook.db could not be written ({why}); nothing was lost: the scores are in the kit's "
                        "gradebook; write them with `python -m pipeline_kit gradebook record GRADEBOOK --nbgrader "
                        "COURSE`"], False
            time.sleep(1)


def _record(url: str, rows: list[Row]) -> list[str]:
    import warnings

    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import parse_utc

    problems = []
    with Gradebook(url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (SQLAlchemy's autoflush warning inside nbgrader's own add_submission)
        for row in rows:
            if row.assignment is None or row.status == MISSING:
                continue  # (no submission: nbgrader's export counts it 0 by itself)
            if row.status == NOT_GRADED:
                problems.append(f"{row.student} {row.assignment}: not graded ({row.error}); nothing written: "
                                "rerun it")
                continue
            gb.update_or_create_student(row.student)
            try:
                submission = gb.find_submission(row.assignment, row.student)
            except MissingEntry:
                submission = gb.add_submission(row.assignment, row.student)
            if row.timestamp:
                submission.timestamp = parse_utc(row.timestamp)
            try:
                notebook = gb.find_submission_notebook(row.notebook_id, row.assignment, row.student)
            except MissingEntry:
                problems.append(f"{row.student} {row.assignment}: the assignment has no notebook {row.notebook_id!r} "
                                "(its lab is not one of the assignment's); not recorded")
                continue
            _set_grades(row, notebook, problems)
            notebook.late_submission_penalty = row.penalty if row.penalty else None
            gb.db.commit()
    return problems


def _set_grades(row: Row, notebook, problems: list[str]) -> None:
    points = {c["name"]: c["points"] for c in row.report["checks"]} if row.report else {}
    manual = {m["name"]: m for m in row.manual}
    for grade in notebook.grades:
        if grade.name in manual:  # formgrader's: 0 if unanswered, else waiting for the instructor (nbgrader's rule)
            grade.auto_score = None if manual[grade.name].get("answered") else 0.0
            grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            continue
        if grade.name not in points and row.report:
            problems.append(f"{row.student} {row.assignment}: grade cell {grade.name!r} is not one of the "
                            "kit's checks; left as it was")
            continue
        grade.auto_score = points.get(grade.name, 0.0)
        grade.needs_manual_grade = False


def write_course(course: str, url: str, rows: list[Row], sources: Path | None) -> tuple[list[str], bool]:
    """Everything the course gets from a grade, once the kit's gradebook holds it: the scores into the database,
    then each student's page into ``feedback/``; returns the problems, one line each, and whether the database
    was written."""
    problems, written = record(url, rows)
    return problems + deliver(course, rows, sources), written


def deliver(course: str, rows: list[Row], sources: Path | None) -> list[str]:
    """Put each graded student's feedback page where ``nbgrader release_feedback`` takes it,
    ``COURSE/feedback/<student>/<assignment>/<notebook>.html``, with the submission's ``timestamp.txt`` and
    ``submission_secret.txt`` beside it (release_feedback reads both), and the submitted notebook into
    ``autograded/<student>/<assignment>/`` (formgrader shows it to the instructor who grades its manual cells).
    Only graded rows: a refused notebook may be a link, which is never followed (its page stays in the kit's
    gradebook).  Returns the problems."""
    from .gradebook import feedback_page, hidden_checks
    problems, hidden = [], {}
    for row in rows:
        if row.assignment is None or row.status != GRADED or not row.notebook_id:
            continue
        submitted = Path(course, "submitted", row.student, row.assignment)
        if not submitted.is_dir():  # (a name the kit had to escape: not nbgrader's folder name)
            problems.append(f"{row.student} {row.assignment}: no folder submitted/{row.student}/{row.assignment}; "
                            "its feedback is only in the kit's gradebook")
            continue
        try:
            extra = {name: small_file(submitted / name) for name in ("timestamp.txt", "submission_secret.txt")}
            if extra["submission_secret.txt"] is None:
                problems.append(f"{row.student} {row.assignment}: no submission_secret.txt in its submission (not "
                                "collected by `nbgrader collect`?): `nbgrader release_feedback` cannot hand it back")
            for top in ("feedback", "autograded"):
                folder = Path(course, top, row.student, row.assignment)
                folder.mkdir(parents=True, exist_ok=True)
                for name, text in extra.items():
                    if text is not None:
                        write_file_atomically(str(folder / name), text)
            if row.lab not in hidden:
                hidden[row.lab] = hidden_checks(row.lab, sources)
            write_file_atomically(str(Path(course, "feedback", row.student, row.assignment,
                                           f"{row.notebook_id}.html")), feedback_page(row, hidden[row.lab]))
            write_file_atomically(str(Path(course, "autograded", row.student, row.assignment,
                                           f"{row.notebook_id}.ipynb")), Path(row.notebook).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{row.student} {row.assignment}: feedback not delivered ({printable(str(exc))})")
    return problems
