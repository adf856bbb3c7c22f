"""A real nbgrader course for the term tests, driven through nbgrader's own Python API in the test's process.

Why the API and not the ``nbgrader`` command: each command starts a fresh interpreter that imports nbgrader for
about 3 s, and a term is a dozen commands; the API runs the same exchange classes (release, fetch, submit, collect,
release and fetch feedback) in well under a second each.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# nbgrader runs `alembic` (from its environment) when it makes a new database
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

CONFIG = """
c.IncludeHeaderFooter.header = ""
c.CourseDirectory.course_id = "pk"
c.Exchange.root = {exchange!r}
c.LateSubmissionPlugin.penalty_method = "zero"
"""


def _config(course: Path, **extra):
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    cfg = Config()
    cfg.merge(config)
    for key, value in extra.items():
        section, _, name = key.partition("__")
        setattr(getattr(cfg, section), name, value)
    return cfg


def _api(course: Path, **extra):
    import logging

    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    cfg = _config(course, **extra)
    api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)
    api.log.setLevel(logging.ERROR)
    return api


def _ok(result: dict) -> dict:
    assert result["success"], result.get("error", "") + result.get("log", "")
    return result


def make_course(root: Path, assignment: str, source: Path, duedate: str, students: list[str]) -> Path:
    """``root/course``: the config above, ``source/<assignment>/`` holding ``source``, the assignment with its due
    date and the students in the database, generated and released into ``root/exchange``."""
    from nbgrader.api import Gradebook
    course, exchange = root / "course", root / "exchange"
    (course / "source" / assignment).mkdir(parents=True)
    exchange.mkdir(mode=0o777)
    os.chmod(exchange, 0o777)
    (course / "nbgrader_config.py").write_text(CONFIG.format(exchange=str(exchange)))
    shutil.copy(source, course / "source" / assignment)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(assignment, duedate=duedate)
        for s in students:
            gb.update_or_create_student(s)
    api = _api(course)
    _ok(api.generate_assignment(assignment))
    _ok(api.release_assignment(assignment))
    return course


def student_dir(course: Path, student: str) -> Path:
    return course.parent / "home" / student


def submit(course: Path, assignment: str, student: str, notebook: Path | None) -> None:
    """``student`` fetches the assignment, puts ``notebook`` in place of the released one (None: hands the released
    one in untouched) and submits, all through nbgrader's exchange."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
    home = student_dir(course, student)
    home.mkdir(parents=True, exist_ok=True)
    cfg = _config(course, Exchange__assignment_dir=str(home), Exchange__cache=str(home / ".cache"))
    for kind in (ExchangeFetchAssignment, ExchangeSubmit):
        if kind is ExchangeSubmit and notebook is not None:
            released = next((home / assignment).glob("*.ipynb"))
            shutil.copy(notebook, released)
        coursedir = CourseDirectory(config=cfg, assignment_id=assignment, student_id=student)
        kind(coursedir=coursedir, authenticator=Authenticator(config=cfg), config=cfg).start()


def collect(course: Path, assignment: str) -> None:
    _ok(_api(course).collect(assignment))


def release_feedback(course: Path, assignment: str) -> None:
    _ok(_api(course).release_feedback(assignment))


def fetch_feedback(course: Path, assignment: str, student: str) -> list[Path]:
    """The feedback pages ``student`` fetched with nbgrader's own fetch_feedback, in their home."""
    home = student_dir(course, student)
    api = _api(course, Exchange__assignment_dir=str(home), Exchange__cache=str(home / ".cache"))
    _ok(api.fetch_feedback(assignment, student))
    return sorted((home / assignment / "feedback").glob("*/*.html"))


def generate(course: Path, assignment: str) -> None:
    _ok(_api(course).generate_assignment(assignment, force=True))


def export(course: Path) -> dict[str, dict]:
    """``nbgrader export``'s rows (its CSV plugin, in this process), by student."""
    import csv

    from nbgrader.apps.exportapp import ExportApp
    out = course / "grades.csv"
    app = ExportApp(config=_config(course))
    app.initialize([f"--to={out}"])
    app.start()
    ExportApp.clear_instance()
    with open(out, newline="") as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh)}
