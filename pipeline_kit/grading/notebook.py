"""Grade a student's lab notebook against its canonical version in ``solutions/``.

Why the grader never runs the student's notebook as it is: a student can edit or delete test cells,
change points or reorder things.  So the grader takes the canonical notebook (with its hidden tests),
puts the student's *answer* cells into it by their nbgrader ``grade_id`` (cells the student added are
kept after the answer or given cell they follow), and runs that.  Whatever happens in the student's
code -- a syntax error, an exception, an infinite loop, a dead kernel, a deleted cell -- costs the
points of the tests that fail because of it, and the feedback says why.  The grader is not a
sandbox: it runs the student's code with the grader's rights, as nbgrader's autograder does.
"""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .report import Report

DEFAULT_TIMEOUT = 60.0
KILL_GRACE = 10.0  # seconds after an interrupt before a kernel that ignores it is killed
MAX_RESTARTS = 5


class GradeError(Exception):
    """The notebook cannot be graded at all (not a lab, unreadable): a usage error, not a score."""


def source_dir() -> Path:
    """``solutions/`` beside the package: the canonical notebooks (the kit is installed editable)."""
    return Path(__file__).resolve().parents[2] / "solutions"


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_answer(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution") and cell.get("cell_type") == "code"


def lab_name(nb, path: Path) -> str:
    return (nb.get("metadata", {}).get("pipeline_kit", {}) or {}).get("lab") or path.stem


def read_notebook(path: Path):
    import nbformat
    try:
        return nbformat.read(str(path), as_version=4)
    except FileNotFoundError:
        raise GradeError(f"{path}: no such file") from None
    except Exception as exc:  # noqa: BLE001 -- a corrupt file: JSON errors, schema errors
        raise GradeError(f"{path}: not a readable notebook ({type(exc).__name__}: {exc})") from None


def canonical_for(nb, path: Path, sources: Path | None = None):
    sources = sources or source_dir()
    if not sources.is_dir():
        raise GradeError(f"{sources}: no such folder of canonical lab notebooks")
    name = lab_name(nb, path)
    canonical = sources / f"{name}.ipynb"
    if not canonical.is_file():
        known = ", ".join(sorted(p.stem for p in sources.glob("*.ipynb"))) or "none found"
        raise GradeError(f"{path}: not a pipeline-kit lab: no canonical notebook {canonical} "
                         f"(labs: {known})")
    return read_notebook(canonical)


@dataclass
class Merged:
    nb: object  # the notebook to execute; its answer cells keep the canonical metadata
    notes: dict  # grade_id -> why that answer is missing or doubtful


def merge(student, canonical) -> Merged:
    """The canonical notebook with the student's answers (and the student's own extra cells) in it."""
    import nbformat
    answers: dict[str, object] = {}
    extras: dict[str, list] = {}  # grade_id of the cell they follow -> the student's own code cells
    notes: dict[str, str] = {}
    anchor = None
    for cell in student.get("cells", []):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid:
            if is_answer(cell):
                if gid in answers:
                    notes[gid] = f"answer cell '{gid}' appears twice; the first copy was graded"
                    continue
                answers[gid] = cell
            anchor = gid
        elif cell.get("cell_type") == "code" and str(cell.get("source", "")).strip():
            extras.setdefault(anchor, []).append(cell)

    out = copy.deepcopy(canonical)
    cells = []

    def add_extras(after):
        for cell in extras.get(after, []):
            cells.append(nbformat.v4.new_code_cell(cell.get("source", "")))

    add_extras(None)
    for cell in out.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if is_answer(cell):
            student_cell = answers.get(gid)
            if student_cell is None:
                notes[gid] = f"answer cell '{gid}' is missing from your notebook (deleted or its metadata changed)"
                cell.source = f"raise RuntimeError({notes[gid]!r})"
            elif student_cell.get("cell_type") != "code":
                notes[gid] = f"answer cell '{gid}' was changed into a {student_cell.get('cell_type')} cell"
                cell.source = f"raise RuntimeError({notes[gid]!r})"
            else:
                cell.source = student_cell.get("source", "")
        cells.append(cell)
        if gid:
            add_extras(gid)
    out.cells = cells
    for cell in out.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return Merged(out, notes)


@dataclass
class CellResult:
    status: str  # "ok", "error", "timeout", "died", "skipped"
    message: str = ""


def _error_of(cell) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            evalue = str(out.get("evalue", "")).strip()
            return f"{out.get('ename')}: {evalue}" if evalue else str(out.get("ename"))
    return None


def execute(nb, timeout: float, cwd: str, progress=None) -> list[CellResult]:
    """Run every code cell in one kernel; a cell's own ``pipeline_kit.timeout`` metadata may raise its limit.

    A cell past its limit is interrupted; a kernel that ignores the interrupt is killed after
    ``KILL_GRACE`` seconds.  After a kernel death the notebook is rerun from the top in a fresh kernel
    with the fatal cell replaced by an error, so later, independent questions still get graded.
    """
    fatal: dict[int, CellResult] = {}
    for _ in range(MAX_RESTARTS + 1):
        results, died_at = _execute_once(nb, timeout, cwd, fatal, progress)
        if died_at is None:
            return results
        fatal[died_at] = results[died_at]
    for i in range(len(results)):  # give up: everything not yet run is reported as such
        if results[i] is None:
            results[i] = CellResult("skipped", "not run: the kernel died too many times")
    return results


def _execute_once(nb, timeout, cwd, fatal, progress):
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    run = copy.deepcopy(nb)
    client = NotebookClient(run, timeout=timeout, interrupt_on_timeout=True, allow_errors=True,
                            kernel_name="python3", resources={"metadata": {"path": cwd}})
    client.log.setLevel(logging.CRITICAL)
    results: list[CellResult | None] = [None] * len(run.cells)
    with client.setup_kernel(stderr=subprocess.DEVNULL):  # the kernel's own start-up warnings are noise here
        for i, cell in enumerate(run.cells):
            if cell.cell_type != "code":
                results[i] = CellResult("ok")
                continue
            if i in fatal:
                results[i] = fatal[i]
                continue
            limit = max(timeout, float((cell.metadata.get("pipeline_kit", {}) or {}).get("timeout", 0)))
            client.timeout = limit
            timed_out = threading.Event()
            killer = threading.Timer(limit + KILL_GRACE, _kill, (client.km, timed_out))
            killer.daemon = True
            killer.start()
            if progress:
                progress(i, len(run.cells))
            try:
                client.execute_cell(cell, i)
            except DeadKernelError:
                why = (f"timed out after {limit:g} s and ignored the interrupt, so the kernel was killed"
                       if timed_out.is_set() else "the kernel died while running this cell (os._exit, a crash, "
                                                  "or out of memory)")
                results[i] = CellResult("died", why)
                return results, i
            except Exception as exc:  # noqa: BLE001 -- nbclient's own failures are reported, never raised
                results[i] = CellResult("error", f"{type(exc).__name__}: {exc}")
                continue
            finally:
                killer.cancel()
            err = _error_of(cell)
            if err is None:
                results[i] = CellResult("ok")
            elif err.startswith("KeyboardInterrupt"):
                results[i] = CellResult("timeout", f"timed out after {limit:g} s (an infinite loop? a wait that "
                                                   "never ends?) and was interrupted")
            else:
                results[i] = CellResult("error", err)
    return results, None


def _kill(km, flag: threading.Event) -> None:
    """SIGKILL the kernel process from the watchdog thread (the kernel manager's own API is not thread-safe)."""
    flag.set()
    process = getattr(getattr(km, "provisioner", None), "process", None)
    if process is not None and process.poll() is None:
        process.kill()


def _shorten(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def grade(path: str | os.PathLike, sources: Path | None = None, timeout: float = DEFAULT_TIMEOUT,
          progress=None) -> Report:
    """Grade the notebook at ``path``: one rubric check per test cell of its canonical lab."""
    path = Path(path)
    student = read_notebook(path)
    canonical = canonical_for(student, path, sources)
    merged = merge(student, canonical)
    with tempfile.TemporaryDirectory(prefix="pipeline-kit-grade-") as cwd:
        results = execute(merged.nb, timeout, cwd, progress)
    report = Report(str(path))
    # The answer cells right before a run of test cells are what those tests check: when one of them
    # failed, a failing test says so (the test's own error is often just a NameError).
    group: list[tuple[str, str]] = []  # (grade_id, why it failed) of the failed answer cells in that run
    after_test = False
    for i, cell in enumerate(merged.nb.cells):
        res = results[i]
        gid = nbgrader_meta(cell).get("grade_id")
        if is_answer(cell):
            if after_test:
                group, after_test = [], False
            if res.status != "ok":
                group.append((gid, merged.notes.get(gid) or _answer_problem(res)))
        if not is_test(cell):
            continue
        after_test = True
        points = float(nbgrader_meta(cell).get("points", 0))
        if res.status == "ok":
            report.add(gid, points, True, "passed")
            continue
        feedback = _shorten(res.message.removeprefix("LabCheckFailed: "))
        if group and not feedback.startswith("not answered yet"):
            if len(group) == 1:
                feedback = f"{feedback} (your answer cell '{group[0][0]}' failed: {group[0][1]})"
            else:
                feedback = f"{feedback} (your answer cells failed: {'; '.join(f'{g!r}: {w}' for g, w in group)})"
        report.add(gid, points, False, feedback)
    return report


def _answer_problem(res: CellResult) -> str:
    if res.message.startswith("NotImplementedError"):
        return "not answered yet"
    return _shorten(res.message, 200)
