"""What an nbgrader course decides about its grades, read from the course itself: each check's points (its
``source/`` notebooks), when each notebook was handed in (``timestamp.txt``), who should have handed in (its
students), the late penalty (its own policy, nbgrader's plugin), and where a student's feedback goes.

Why from the course and not the kit: in a term the course is the record.  An instructor who raises a check from 3
to 4 points in ``source/lab04`` expects 4 in every export, and ``nbgrader export`` computes late penalties with the
course's ``LateSubmissionPlugin`` settings -- so the kit reads the same settings and calls the same plugin, and its
numbers are nbgrader's.  Where the course's cells and the kit's checks disagree in anything but points (a cell
added, removed, renamed or re-pointed), grading would put a check's score into a cell that means something else, so
the command stops before any grade and says which cells.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..argtypes import UsageError
from ..inputs import listed
from .batch import MISSING, Row
from .classlist import Submission, printable
from .notebook import GradeError, is_manual, is_test, lab_name, nbgrader_meta, read_notebook, source_dir
from .report import Check, Report


@dataclass
class CourseNotebook:
    """One notebook of an assignment's ``source/`` folder, and the kit's lab it is."""

    assignment: str
    notebook_id: str
    lab: str
    points: dict[str, float]                       # the automatic checks (test cells): grade_id -> points
    manual: dict[str, float] = field(default_factory=dict)  # the manually graded cells: grade_id -> points
    kit: dict[str, float] = field(default_factory=dict)     # every grade cell's points in the kit's own notebook


def grade_cells(nb: dict) -> tuple[dict[str, tuple[float, str]], dict[str, float]]:
    """``({test cell grade_id: (points, source)}, {manual cell grade_id: points})`` of a notebook.  A manual cell is
    nbgrader's ``grade`` and ``solution`` together (the student writes, the instructor scores)."""
    tests, manual = {}, {}
    for cell in nb["cells"]:
        meta = nbgrader_meta(cell)
        gid, points = meta.get("grade_id"), meta.get("points", 0)
        if not gid or not meta.get("grade"):
            continue
        points = float(points) if isinstance(points, (int, float)) and not isinstance(points, bool) else 0.0
        if is_manual(cell):
            manual[gid] = points
        elif is_test(cell):
            tests[gid] = (points, cell["source"].strip())
    return tests, manual


def course_notebooks(course: str, assignments: set[str], sources: Path | None) -> dict[str, list[CourseNotebook]]:
    """Each assignment's notebooks in ``COURSE/source/<assignment>/``, compared with the kit's canonical notebooks:
    a :class:`UsageError` naming every cell that disagrees (before any grade); a course without a ``source/``
    folder for an assignment gets ``[]`` (the kit's own points are used, and the summary says so)."""
    sources = sources or source_dir()
    out: dict[str, list[CourseNotebook]] = {}
    for assignment in sorted(assignments):
        folder = Path(course, "source", assignment)
        out[assignment] = []
        for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
            try:
                nb = read_notebook(path)
                lab = lab_name(nb, path, sources)
                kit = read_notebook(sources / f"{lab}.ipynb")
            except GradeError:
                continue  # (a notebook of the course that is no lab of the kit's: nbgrader's alone)
            out[assignment].append(_compare(path, lab, nb, kit, assignment))
    return out


def _compare(path: Path, lab: str, nb: dict, kit: dict, assignment: str) -> CourseNotebook:
    (tests, manual), (kit_tests, kit_manual) = grade_cells(nb), grade_cells(kit)
    problems = []
    for what, names in (("removed or renamed", (kit_tests.keys() | kit_manual.keys()) - tests.keys() - manual.keys()),
                        ("added", (tests.keys() - kit_tests.keys()) | (manual.keys() - kit_manual.keys())),
                        ("changed (their test code is not the kit's)",
                         {g for g in tests.keys() & kit_tests.keys() if tests[g][1] != kit_tests[g][1]})):
        if names:
            problems.append(f"grade cell(s) {listed(sorted(names), 5)} {what}")
    if problems:
        raise UsageError(f"argument --nbgrader: {printable(str(path))} disagrees with the kit's {lab}: "
                         f"{'; '.join(problems)}. Copy the kit's solutions/{lab}.ipynb into source/{assignment}/ "
                         f"again (points may differ) and run `nbgrader generate_assignment --force {assignment}`")
    return CourseNotebook(assignment, path.stem, lab, {g: p for g, (p, _) in tests.items()}, manual,
                          {**{g: p for g, (p, _) in kit_tests.items()}, **kit_manual})


def points_changed(notebooks: dict[str, list[CourseNotebook]]) -> list[str]:
    """The checks whose points the course changed, for the summary: ``lab04 m043_main_x 3 -> 4``."""
    return [f"{cn.assignment} {g} {cn.kit[g]:g} -> {p:g}" for nbs in notebooks.values() for cn in nbs
            for g, p in {**cn.points, **cn.manual}.items() if g in cn.kit and cn.kit[g] != p]


def with_course_points(report: dict, cn: CourseNotebook) -> dict:
    """``report`` with each check's points scaled to the course's (the same share of a check's points: 2 of 3
    becomes 2.67 of 4), its questions' subtotals and totals recomputed, and its manual cells' points the course's."""
    checks = []
    for c in report["checks"]:
        new = cn.points.get(c["name"], c["max_points"])
        share = c["points"] / c["max_points"] if c["max_points"] else 0.0
        checks.append({**c, "points": round(share * new, 2), "max_points": new})
    redone = Report(report.get("notebook", ""), [Check(c["name"], c["points"], c["max_points"], c["feedback"])
                                                 for c in checks], lab=cn.lab)
    manual = [{**m, "max_points": cn.manual.get(m["name"], m["max_points"])} for m in report.get("manual") or []]
    return {**report, "checks": checks, "questions": redone.questions(), "score": redone.score,
            "max_score": redone.max_score, **({"manual": manual} if manual else {})}


def missing_rows(course: str, url: str, notebooks: dict[str, list[CourseNotebook]], subs: list[Submission],
                 students: list[str] | None) -> list[Row]:
    """A ``no submission`` row (0 points, as ``nbgrader export`` counts it) for every student of the course's
    database (or of ``--student``) who handed in no notebook of an assignment graded."""
    from nbgrader.api import Gradebook
    with Gradebook(url) as gb:
        roster = students or [s.id for s in gb.students]
    handed = {(s.student, s.assignment) for s in subs}
    rows = []
    for assignment, nbs in notebooks.items():
        for student in sorted(set(roster)):
            if (printable(student), assignment) in handed:
                continue
            for cn in nbs:
                checks = [{"name": g, "points": 0.0, "max_points": p, "feedback": "no submission"}
                          for g, p in cn.points.items()]
                manual = [{"name": g, "max_points": p, "answered": False, "points": None} for g, p in cn.manual.items()]
                report = {"score": 0.0, "max_score": round(sum(cn.points.values()), 2), "questions": {},
                          "checks": checks, **({"manual": manual} if manual else {})}
                rows.append(Row(printable(student), cn.lab, "", None, report=report, assignment=assignment,
                                notebook_id=cn.notebook_id, status=MISSING))
    return rows


# -- the late penalty, by the course's own policy ---------------------------------------------------------------

def _course_config(course: str):
    """The course's nbgrader configuration, read as nbgrader reads it: the Jupyter config folders, then the
    course's own ``nbgrader_config.py`` (which wins)."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    config = Config()
    for folder in [*reversed(jupyter_config_path()), os.path.abspath(course)]:
        if os.path.isfile(os.path.join(folder, "nbgrader_config.py")):
            config.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
    return config


def late_penalties(course: str, url: str, rows: list[Row]) -> None:
    """Set each row's ``late_seconds`` and ``penalty`` as ``nbgrader autograde`` would: seconds past the assignment's
    due date plus the student's extension (nbgrader's ``total_seconds_late``), and the penalty the course's
    ``AssignLatePenalties.plugin_class`` gives for the notebook's score, kept between 0 and the score.  Reads the
    database only (it is written after the gradebook is safe)."""
    import logging

    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import AssignLatePenalties
    from nbgrader.utils import parse_utc
    late = [r for r in rows if r.timestamp and r.report and r.assignment]
    if not late:
        return
    assigner = AssignLatePenalties(config=_course_config(course))
    assigner.log.setLevel(logging.ERROR)
    assigner.init_plugin()
    assigner.plugin_inst.log.setLevel(logging.ERROR)
    with Gradebook(url) as gb:
        for row in late:
            due = gb.find_assignment(row.assignment).duedate
            if due is None:
                continue
            try:
                extension = gb.find_submission(row.assignment, row.student).extension
            except MissingEntry:
                extension = None
            seconds = max(0.0, (parse_utc(row.timestamp) - (due + extension if extension else due)).total_seconds())
            row.late_seconds, row.penalty = seconds, None
            if seconds > 0:
                raw = row.score
                penalty = assigner.plugin_inst.late_submission_penalty(row.student, raw, seconds)
                if penalty is not None:
                    row.penalty = round(min(max(float(penalty), 0.0), raw), 2)


def manual_scores(url: str, rows: list[Row]) -> None:
    """The manual cells' points the instructor has given in formgrader so far, into the rows (read only)."""
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(url) as gb:
        for row in rows:
            if not (row.manual and row.assignment and row.notebook_id):
                continue
            try:
                grades = {g.name: g for g in gb.find_submission_notebook(row.notebook_id, row.assignment,
                                                                         row.student).grades}
            except MissingEntry:
                continue
            for m in row.manual:
                g = grades.get(m["name"])
                m["points"] = None if g is None or g.manual_score is None else float(g.manual_score)
