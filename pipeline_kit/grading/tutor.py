"""The notebook as a tutor: under every check cell a ✓ or ✗ line with the rubric point and its points, and the
whole grade from a cell (:func:`grade_me`).

Why it lives in the student's kernel and still changes no grade: a grade is decided only by the grader's own
process (:mod:`.engine`), which never reads what this module shows.  What it shows is worked out the way the grader
works it out -- the cell's statements run one by one by :func:`.parts.run_test_cell`, the parts sharing the cell's
points -- so the notebook and the grade agree on every visible case.  The lab's first given cell imports this module;
in an IPython kernel that adds an input transformer which recognises a lab's check cell by its text (the visible
part of a canonical test cell; hidden tests, where nbgrader or a solution put them back, run too) and runs it
through :func:`run_check_cell`.  Any other cell runs as it was written.  A failing check cell still raises, so
nbgrader and nbval still count it as a failed cell; IPython shows the exception's ``_render_traceback_``
(:mod:`.verdict`) instead of the kit's frames, and ``%tb`` shows them all.  A manually graded cell (words the
instructor scores) has no verdict of its own: a markdown cell never runs, and the self-grade lists it as "graded by
your instructor" (``verdict.manual_headline``), never as a ✗.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from pathlib import Path

from ..inputs import excerpt
from . import names, parts, self_grade, verdict
from ..language import environment_language, notebook_language, set_language, translated
from .notebook import DEFAULT_TIMEOUT, GradeError, cell_kind, nbgrader_meta, read_notebook, source_dir
from .report import Report

__all__ = ["CheckFailed", "grade_me", "register", "run_check_cell", "run_checks"]

LABS_DIR = source_dir().parent / "labs"


@dataclass(frozen=True)
class CheckCell:
    lab: str
    grade_id: str
    points: float
    hidden: bool | None  # whether the grade adds hidden cases (None: the canonical notebook is not readable here)
    timeout: float = DEFAULT_TIMEOUT  # the grade's limit for the cell, and for one call of the student's code


def _limit_from(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and 0 < value <= 86400 else None


# a limit for every check cell instead of each cell's own, from PIPELINE_KIT_CHECK_LIMIT (seconds): a shorter one in
# the kit's tests, a longer one on a slow laptop -- it changes only what this notebook shows, never a grade
LIMIT_S: float | None = _limit_from(os.environ.get("PIPELINE_KIT_CHECK_LIMIT"))


def _key(source: str) -> str:
    return names.normalized(names.visible_part(source))


@lru_cache(maxsize=1)
def check_cells() -> dict[str, CheckCell | None]:
    """Each lab check cell's visible text -> what it grades (None where two labs' cells read the same).

    From the released labs (``labs/``) and the canonical notebooks (``solutions/``, which also say which cells have
    hidden cases), whichever this machine has; a notebook that cannot be read adds nothing."""
    found: dict[str, CheckCell | None] = {}
    hidden: dict[tuple[str, str], bool] = {}
    for folder, canonical in ((source_dir(), True), (LABS_DIR, False)):
        for path in sorted(folder.glob("lab[0-9][0-9]_*.ipynb")) if folder.is_dir() else []:
            try:
                nb = read_notebook(path)
            except GradeError:
                continue
            for cell in nb["cells"]:
                if cell_kind(cell) != "test":
                    continue
                meta = nbgrader_meta(cell)
                gid, source = str(meta.get("grade_id", "")), cell["source"]
                if canonical:
                    hidden[(path.stem, gid)] = names.visible_part(source) != source
                points = meta.get("points", 0)
                limit = (cell.get("metadata", {}).get("pipeline_kit") or {}).get("timeout", DEFAULT_TIMEOUT)
                cell_info = CheckCell(path.stem, gid, float(points) if isinstance(points, (int, float)) else 0.0,
                                      hidden.get((path.stem, gid)),
                                      float(limit) if isinstance(limit, (int, float)) else DEFAULT_TIMEOUT)
                key = _key(source)
                if key in found and found[key] is not None and found[key].grade_id != gid:
                    found[key] = None  # the same text grades two things: show nothing rather than a guess
                elif key not in found:
                    found[key] = cell_info
    return found


def check_cell_for(source: str) -> CheckCell | None:
    return check_cells().get(_key(source)) if source.strip() else None


# -- the verdicts ------------------------------------------------------------------------------------------------

class Verdict:
    """A passed check cell's line, as text and as HTML (JupyterLab and the classic notebook show the HTML)."""

    def __init__(self, cell: CheckCell, earned: float, note: str):
        self.line, self.note = verdict.headline(cell.grade_id, earned, cell.points), note

    def __repr__(self) -> str:
        return f"{self.line}\n  {self.note}"

    def _repr_html_(self) -> str:
        return (f'<div class="pk-verdict pk-pass"><b style="color:#137333">{escape(self.line)}</b> '
                f'<span style="color:#5f6368">· {escape(self.note)}</span></div>')


class CheckFailed(AssertionError):
    """A check cell that did not earn all its points: the cell fails, and IPython shows :meth:`_render_traceback_`."""

    def __init__(self, cell: CheckCell, earned: float, outcome: parts.CellOutcome, note: str):
        self.title = verdict.headline(cell.grade_id, earned, cell.points)
        self.messages = [m for _, text, exc in outcome.failures for m in _items(text, exc)] or [outcome.feedback]
        self.errors = [exc for _, _, exc in outcome.failures]
        self.note = note
        super().__init__(f"{self.title}: {outcome.feedback}")

    def _render_traceback_(self) -> list[str]:
        """The verdict when the cell fails; asked again (``%tb``), the full traceback, every frame of the kit's and
        the student's own exception behind it."""
        if getattr(self, "_shown", False):
            return verdict.traceback_lines(self, self.__traceback__)
        self._shown = True
        return verdict.failure_lines(self.title, self.messages, self.errors,
                                     f"{self.note} · {translated(verdict.FULL_TRACEBACK)}")


class _OutOfTime(parts.OutOfTime):
    """The check cell ran past its limit (raised by the alarm; a ``BaseException``, so no check can swallow it)."""


@contextmanager
def _time_limit(seconds: float):
    """Interrupt the block after ``seconds`` (``SIGALRM``; where there is none, or off the main thread, no limit:
    the kernel's stop button still works)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum, frame):
        raise _OutOfTime()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class Stopped(CheckFailed):
    """A check cell stopped before its end, by its time limit or by the student (the stop button): a ✗ verdict
    that says which, and the line of the student's code that was running -- never the kit's frames."""

    def __init__(self, cell: CheckCell, exc: BaseException, limit: float, note: str):
        where = _running_line(exc)
        why = (translated(f"your code did not finish in {limit:g} s (the grade's limit for this cell)")
               if isinstance(exc, _OutOfTime) else translated("interrupted before the check finished"))
        outcome = parts.CellOutcome(0.0, f"{why}{where}")
        super().__init__(cell, 0.0, outcome, note)
        self.errors = []


def _running_line(exc: BaseException) -> str:
    """``: it was running line 3 of your code (in f), `...``` -- or nothing where the kit's own work was running."""
    where = verdict.students_line(exc)
    return translated(f": it was running {where}") if where else ""


def _items(text: str, exc: BaseException) -> list[str]:
    """A failing part as the verdict's bullets: each failing property or case of the grader's own listing on a line
    of its own (up to ``parts.MAX_ITEMS``, then how many more), else the part's one message."""
    listed = exc.parts if type(exc) is parts.LabCheckFailed and exc.parts and len(exc.parts) > 1 else None
    if not listed:
        return [_readable(text, exc)]
    more = len(listed) - parts.MAX_ITEMS
    return [translated(m) for m in listed[:parts.MAX_ITEMS]] + \
        ([translated(f"and {more:,} more, not listed")] if more > 0 else [])


def _readable(text: str, exc: BaseException) -> str:
    """A part's feedback; a name the cell needs that is not defined yet says which cell to run."""
    if type(exc) is NameError and getattr(exc, "name", None):
        return translated(f"{exc.name} is not defined yet: run the cell above that sets it (write your answer there "
                          f"in place of `raise NotImplementedError()`)")
    return text


def _note(cell: CheckCell, source: str) -> str:
    if names.visible_part(source) != source:
        return translated("visible and hidden cases")
    if cell.hidden:
        return translated("visible cases; the grade adds hidden ones: grade_me() at the end of the lab runs them all")
    if cell.hidden is None:
        return translated("visible cases; the grade may add hidden ones: grade_me() at the end of the lab runs them "
                          "all")
    return translated("the same cases as the grade")


def run_check_cell(grade_id: str, source: str, namespace: dict | None = None) -> None:
    """Run a lab's check cell in ``namespace`` (the notebook's) as the grader would; show ✓, or raise the ✗.

    The ✓ is displayed, not returned: a cell's value would be an ``execute_result``, which nbgrader reads as a
    partial-credit score."""
    cell = check_cell_for(source)
    if cell is None or cell.grade_id != grade_id:
        raise ValueError(f"not a check cell of a lab: {grade_id!r}")
    if namespace is None:
        namespace = _shell().user_ns
    limit = LIMIT_S or cell.timeout
    try:
        with _time_limit(limit):
            outcome = parts.run_test_cell(source, namespace, f"<check {grade_id}>")
    except (_OutOfTime, KeyboardInterrupt) as exc:
        raise Stopped(cell, exc, limit, _note(cell, source)) from None
    earned, note = cell.points * outcome.earned, _note(cell, source)
    if outcome.earned < 1.0:
        first = outcome.failures[0][2] if outcome.failures else None
        raise CheckFailed(cell, earned, outcome, note) from first
    _show(Verdict(cell, earned, note))


def _show(obj) -> None:
    try:
        from IPython.display import display
    except ImportError:
        print(repr(obj))
    else:
        display(obj)


def run_checks(grade_ids: list[str], namespace: dict, name: str) -> Report:
    """The lab's check cells ``grade_ids`` run on ``namespace``: a report in the lab's points (lab 2's drawings)."""
    by_id = {c.grade_id: (key, c) for key, c in check_cells().items() if c is not None}
    report = Report(name)
    for gid in grade_ids:
        key, cell = by_id[gid]
        outcome = parts.run_test_cell(key, dict(namespace), f"<check {gid}>")
        report.add(gid, cell.points, outcome.earned, outcome.feedback or "passed")
    return report


def grade_me(notebook: str | None = None, seed: int | None = None) -> None:
    """Grade this notebook as last saved, with the real sandboxed grader, and show the report as a table.

    Saves nothing and changes nothing; ``notebook``: the file, where Jupyter did not say which it is; ``seed``: the
    hidden cases' seed (a fresh one by default).  The report stays in ``pipeline_kit.grading.tutor.last_self_grade``.
    """
    global last_self_grade
    problem = notebook_problem(notebook)
    if problem is not None:
        from IPython.display import display
        display(self_grade._bundle(problem, f"<p>{escape(problem)}</p>"), raw=True)  # (as grade_saved shows its own)
        last_self_grade = None
        return
    shell = _shell()
    user_ns = shell.user_ns if shell is not None else {}
    ran = list(shell.history_manager.input_hist_raw[1:-1]) if shell is not None else []  # not this cell itself
    hidden = {(c.lab, c.grade_id): bool(c.hidden) for c in check_cells().values() if c is not None}
    by_id = {cid: src for cid, src in RAN_BY_ID.items() if cid != _current_cell_id(shell)}
    last_self_grade = self_grade.grade_saved(notebook, seed, lambda lab, gid: hidden.get((lab, gid), False),
                                             user_ns, ran, by_id)


def notebook_problem(notebook) -> str | None:
    """Why the path given to :func:`grade_me` names no notebook it can grade, in one sentence for the student; None
    when it does (or none was given, or it is not a path at all: the self-grade says that itself).

    Why here: the path is the one thing a student types into ``grade_me``, and ``~someone/lab.ipynb``,
    ``Path.expanduser``'s ``RuntimeError`` for a user this computer does not have, or a name too long for the file
    system ended the cell in a traceback."""
    if notebook is None or not isinstance(notebook, (str, os.PathLike)):
        return None
    text = os.fspath(notebook)
    if not isinstance(text, str) or not text:
        return None
    shown = text if len(text) <= 120 and text.isprintable() else excerpt(text)
    try:
        path = Path(text).expanduser()
    except RuntimeError:
        user = text[1:].split(os.sep, 1)[0]
        whose = f"this computer has no user {user!r}" if user else "this computer does not say where your home is"
        example = f", e.g. grade_me({Path(text).name!r}) for a notebook in this one's folder" if os.sep in text else ""
        return f"grade_me: {shown} starts with ~{user}, but {whose}: give the notebook's path without it{example}"
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        full = os.path.abspath(path)  # (a relative path starts in the kernel's folder: say which file that was)
        where = f" ({full})" if not path.is_absolute() and len(full) <= 200 and full.isprintable() else ""
        return f"grade_me: no notebook at {shown}{where}: there is no such file; check its name, and that it is saved"
    except OSError as exc:
        return f"grade_me: cannot read {shown}: {exc.strerror or exc}"
    except ValueError:  # a NUL in the name
        return f"grade_me: {shown} is not a file name"
    if stat.S_ISDIR(st.st_mode):
        inside = sorted(path.glob("*.ipynb"))[:1]
        example = f", e.g. grade_me({str(Path(text) / inside[0].name)!r})" if inside else ""
        return f"grade_me: {shown} is a folder, not a notebook: name the lab's .ipynb file in it{example}"
    if not stat.S_ISREG(st.st_mode) or path.suffix != ".ipynb":
        return f"grade_me: {shown} is not a notebook: name the lab's saved .ipynb file"
    return None


last_self_grade = None
# what this kernel last ran in each cell, by the cell's id (JupyterLab and Notebook 7 send it with each run): how
# grade_me() tells which cells on the student's screen differ from the saved file it grades
RAN_BY_ID: dict[str, str] = {}


def _remember(info) -> None:
    cell_id = getattr(info, "cell_id", None)
    if isinstance(cell_id, str) and cell_id and isinstance(info.raw_cell, str):
        RAN_BY_ID[cell_id] = info.raw_cell


def _current_cell_id(shell) -> str | None:
    try:
        return shell.kernel.get_parent("shell")["metadata"].get("cellId")
    except Exception:  # noqa: BLE001 -- no kernel (a plain IPython), or one that sends no cell id
        return None


# -- the hook ----------------------------------------------------------------------------------------------------

def _shell():
    from IPython import get_ipython

    return get_ipython()


def _transform(lines: list[str]) -> list[str]:
    source = "".join(lines)
    cell = check_cell_for(source)
    if cell is None:
        return lines
    call = "__import__('pipeline_kit.grading.tutor', fromlist=['run_check_cell']).run_check_cell"
    return [f"{call}({cell.grade_id!r}, {source!r})\n"]


def language_here(user_ns: dict) -> str:
    """The language of the notebook this kernel runs: ``PIPELINE_KIT_LANG``, else the saved notebook's own
    (``metadata.pipeline_kit.language``: the file Jupyter or VS Code says it opened), else English."""
    chosen = environment_language()
    if chosen is not None:
        return chosen
    try:
        path = self_grade.saved_notebook(None, user_ns)
        return notebook_language(read_notebook(path)) if path is not None else "en"
    except (GradeError, OSError, ValueError):
        return "en"


def register(shell=None) -> bool:
    """Show verdicts under the labs' check cells in ``shell`` (the running IPython); True when it is on."""
    shell = shell if shell is not None else (_shell() if "IPython" in sys.modules else None)
    transformers = getattr(shell, "input_transformers_post", None)
    if not isinstance(transformers, list):
        return False
    set_language(language_here(shell.user_ns))
    if _transform not in transformers:
        transformers.append(_transform)
    events = getattr(shell, "events", None)
    if events is not None and _remember not in events.callbacks.get("pre_run_cell", []):
        events.register("pre_run_cell", _remember)
    return True


register()
