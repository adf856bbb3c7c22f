"""Grade a lab notebook: the student's cells run in a sandboxed kernel, every check runs here.

Why two processes (README.md in this folder is the contract): whatever runs in the student's kernel can be
changed by the student -- the check functions, the kit's classes, the outputs, even the grader's view of an
error.  So the kernel runs only the given and answer cells (and the visible test cells' imports and
assignments); each canonical test cell, hidden part included, runs in this process, at its place in the
notebook, on names resolved by :mod:`.names` -- the grader's own imports and values, or the student's values
fetched as plain data (:mod:`.wire`).  The score is computed from what those cells do here, nothing else.

A kernel death costs the cell that caused it: the kernel is restarted, the cells above are replayed (the fatal
one skipped) and grading goes on, so later checks never turn into ``NameError``s.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

from . import names, parts, remote, sandbox
from .kernel import CellResult, KernelDied, KernelUnavailable, StudentKernel, StudentTimeout
from .notebook import (
    DEFAULT_TIMEOUT,
    DEFAULT_TOTAL_TIMEOUT,
    GradeError,
    NotGraded,
    canonical_for,
    cell_kind,
    is_manual,
    merge,
    nbgrader_meta,
    read_notebook,
    source_dir,
)
from ..language import current, notebook_language, speaking, translated
from .parts import NOT_ANSWERED
from .report import ManualCheck, Report

MAX_RESTARTS = 5
ATTEMPTS = 2  # a grade the machine failed is tried once more, in a fresh sandbox, before it is "not graded"


class MachineFailure(Exception):
    """Something the student's code did not cause ended this attempt: a kernel or sandbox that could not start for
    want of processes or memory, a given cell that failed before any of the student's code ran."""
# a check's feedback: its failing parts, each listing its failing properties or cases (parts.MAX_LISTED up front,
# parts.MAX_ITEMS in all) of at most parts.PART_FEEDBACK_LIMIT characters, and the answer cells that failed -- a cap
# for a report's size, cut at the end, so the items up front are always whole
FEEDBACK_LIMIT = 12000


def grade_notebook(path: str | os.PathLike, sources: Path | None = None, timeout: float = DEFAULT_TIMEOUT,
                   progress=None, seed: int | None = None, sandboxed: bool = True, warn=None,
                   total_timeout: float = DEFAULT_TOTAL_TIMEOUT) -> Report:
    """Grade the notebook at ``path``: one rubric check per test cell of its canonical lab.

    ``seed`` draws the hidden cases (a fresh one per grade by default; the report keeps it for the instructor, in
    its JSON, never in its text); ``warn`` gets the one-line warning printed when ``PIPELINE_KIT_SANDBOX=off``
    turns the sandbox off; ``progress(i, n)`` is called per cell; after ``total_timeout`` seconds the checks not
    yet run score 0.  Where the sandbox was asked for and
    cannot start, :class:`GradeError` says so (never a silent fallback).
    """
    path = Path(path)
    warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    student = read_notebook(path)
    with speaking(notebook_language(student)):  # the feedback in the notebook's language; points unchanged
        lab, canonical = canonical_for(student, path, sources)
        merged = merge(student, canonical)
        seed = secrets.randbelow(2**31) if seed is None else seed
        off = sandbox.wanted(sandboxed)
        if off and sandboxed:
            warn(sandbox.unsandboxed_warning(off))
        deadline = time.monotonic() + total_timeout
        for attempt in range(1, ATTEMPTS + 1):
            with tempfile.TemporaryDirectory(prefix="pipeline-kit-grade-", dir=work_parent()) as work:
                run = Run(merged.nb, canonical, Path(work), sources, timeout, seed, off, progress, total_timeout,
                          deadline)
                try:
                    results = run.execute()
                    break
                except MachineFailure as exc:
                    if attempt == ATTEMPTS:
                        raise NotGraded(f"{exc} (twice: the grade was tried again in a fresh sandbox)") from None
                finally:
                    run.stop()
        report = build_report(str(path), lab, seed, merged, results)
        report.sandbox = run.sandbox_report()
        return report


grade = grade_notebook  # the name the CLI, the tests and the labs' instructions use


def work_parent() -> str | None:
    """Where the grade's folder goes: ``$TMPDIR`` (tempfile's choice), or ``/tmp`` when that path is so long
    that the kernel's IPC socket paths inside it would pass the 107-byte limit of a Unix socket path."""
    default = tempfile.gettempdir()
    return default if len(default) <= 40 or not os.path.isdir("/tmp") else "/tmp"


class Run:
    """One grade's execution: the kernel (restarted after a death), the grader's namespace, the results."""

    def __init__(self, nb, canonical, work: Path, sources, timeout, seed, off, progress, total_timeout, deadline):
        self.cells = nb["cells"]
        self.work, self.sources = work, (sources or source_dir())
        self.timeout, self.seed, self.off, self.progress = timeout, seed, off, progress
        self.deadline = deadline  # the grade's, across a retry too
        self.time_up = (f"not run: the grade reached its total time limit of {total_timeout:g} s "
                        "(--total-timeout)")
        self.mode = self.limits = None
        canon = [(cell_kind(c), nbgrader_meta(c).get("grade_id", ""), c.get("source", "")) for c in canonical["cells"]]
        self.resolver = names.Resolver(canon)
        self.canon_index = {gid: i for i, (kind, gid, _) in enumerate(canon) if kind == "test"}
        self.kinds = [cell_kind(c) for c in self.cells]
        self.student_cells = [(k, c.get("source", "")) for k, c in zip(self.kinds, self.cells)]  # for kit-free runs
        self.kernel: StudentKernel | None = None
        self.session: remote.GradingSession | None = None
        self.starts = 0
        self.namespace: dict = {"__name__": "pipeline_kit_grader"}
        self.fatal: set[int] = set()           # kernel cells that killed the kernel: replaced by their error
        self.fatal_prelude: set[int] = set()   # test cells whose kernel prelude killed it
        self.student_ran = False               # whether the student's code has run in this kernel yet
        self.results: list[CellResult | None] = [None] * len(self.cells)

    def limit(self, i: int) -> float:
        """Cell ``i``'s time limit: ``--timeout`` (or more where the lab allows it), within the grade's total."""
        meta = self.cells[i].get("metadata", {}).get("pipeline_kit", {}) or {}
        extra = meta.get("timeout", 0)
        own = max(self.timeout, float(extra) if isinstance(extra, (int, float)) else 0.0)
        return max(0.0, min(own, self.deadline - time.monotonic()))

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def sandbox_report(self) -> dict:
        """How the student's code was isolated, for the report: decided by the grader, never by the kernel."""
        if self.off:
            return {"isolated": False, "why": self.off}
        return {"isolated": True, "mode": self.mode or "not started", "limits": self.limits or ""}

    # -- the kernel ----------------------------------------------------------------------------------------

    def start_kernel(self, upto: int) -> bool:
        """A fresh kernel with the cells above ``upto`` replayed; False when the restarts are used up."""
        while True:
            if self.starts > MAX_RESTARTS:
                return False
            if self.out_of_time():
                return False
            self.starts += 1
            try:
                self.kernel = StudentKernel(self.work, self.sources, self.off, tag=str(self.starts))
            except sandbox.SandboxUnavailable as exc:
                if exc.transient:  # the machine ran short (processes, memory): not this machine's lack of a sandbox
                    raise MachineFailure(f"the sandbox could not start: {exc}") from None
                raise GradeError(f"cannot grade: {sandbox.unavailable_message(str(exc))}") from None
            except KernelUnavailable as exc:
                raise MachineFailure(f"the kernel could not start: {exc}") from None
            self.student_ran = False
            self.mode, self.limits = self.kernel.mode, sandbox.limits_text(self.kernel.box.cgroup)
            self.session = remote.GradingSession(self.kernel, self.seed, self.deadline, self.work, self.off)
            died = self.replay(upto)
            if died is None:
                return True
            self.drop_kernel()

    def replay(self, upto: int) -> int | None:
        for i in range(upto):
            if self.out_of_time():
                return i
            res = self.run_kernel_part(i)
            if res is not None and res.status == "died":
                return i
        return None

    def run_kernel_part(self, i: int) -> CellResult | None:
        """Run cell ``i``'s share in the kernel: a whole given/answer/extra cell, or a test cell's prelude."""
        kind = self.kinds[i]
        if kind in ("given", "answer", "extra"):
            if i in self.fatal:
                return None
            self.student_ran |= kind != "given"
            res = self.kernel.run_cell(self.cells[i]["source"], self.limit(i))
            if kind == "given" and res.status != "ok" and not self.student_ran and not self.out_of_time():
                # the lab's own code, in a fresh kernel, before a line of the student's: the machine failed it
                raise MachineFailure(f"the lab's given cell {i + 1} failed before any of the student's code ran "
                                     f"({res.message})")
            if res.status == "died":
                self.fatal.add(i)
                self.results[i] = res
            return res
        if kind == "test" and i not in self.fatal_prelude:
            self.student_ran = True  # (its checks call the student's functions in the kernel)
            prelude = names.kernel_prelude(self.cells[i]["source"])
            if prelude:
                res = self.kernel.run_cell(prelude, self.limit(i))
                if res.status == "died":
                    self.fatal_prelude.add(i)
                return res
        return None

    def drop_kernel(self) -> None:
        if self.kernel is not None:
            self.kernel.shutdown()
        self.kernel = self.session = None

    def stop(self) -> None:
        remote.activate(None)
        self.drop_kernel()

    # -- the notebook, top to bottom -----------------------------------------------------------------------

    def execute(self) -> list[CellResult]:
        for i, kind in enumerate(self.kinds):
            if kind == "markdown":
                self.results[i] = CellResult("ok")
                continue
            if self.progress:
                self.progress(i, len(self.cells))
            if self.out_of_time():
                self.give_up(i, self.time_up)
                break
            if self.kernel is None:
                alive = self.start_kernel(i)
                if not alive:
                    self.give_up(i, self.time_up if self.out_of_time() else
                                 "not run: the kernel died too many times")
                    break
            if kind == "test":
                res = self.run_kernel_part(i)
                if res is not None and res.status == "died":
                    self.drop_kernel()
                    self.results[i] = CellResult("died", f"the kernel died while running this test's setup: "
                                                         f"{res.message}")
                    continue
                self.results[i] = self.run_test(i)
                if self.results[i].status == "died":
                    self.drop_kernel()
            else:
                res = self.run_kernel_part(i)
                self.results[i] = res or self.results[i] or CellResult("ok")
                if res is not None and res.status == "died":
                    self.drop_kernel()
        return [r or CellResult("skipped", "not run") for r in self.results]

    def give_up(self, at: int, why: str) -> None:
        for i in range(at, len(self.cells)):
            if self.results[i] is None:
                self.results[i] = CellResult("skipped", why)

    def run_test(self, i: int) -> CellResult:
        """Run the canonical test cell ``i`` here, its student names fetched from the kernel as data."""
        source = self.cells[i]["source"]
        gid = nbgrader_meta(self.cells[i]).get("grade_id", "")
        origins = self.resolver.origins(self.canon_index.get(gid, -1)) if gid in self.canon_index else {}
        self.session.timeout = self.limit(i)
        self.session.own_code = lambda wanted: names.defining_sources(self.student_cells, i, wanted)
        try:
            # the cell's own imports first: a later cell still has ``lab04`` when fetching this cell's names fails
            exec(names.top_level_imports(source), self.namespace)  # noqa: S102 -- a canonical test cell's imports
            self.bind_names(origins)
            remote.activate(self.session)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                outcome = parts.run_test_cell(source, self.namespace, f"<test cell {gid}>")
        except StudentTimeout as exc:
            return CellResult("timeout", f"your code {exc} (an infinite loop? a wait that never ends?)")
        except KernelDied as exc:
            return CellResult("died", f"{exc} (while the grader ran your code)")
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- a failed check: its message is the feedback
            return CellResult("error", f"{type(exc).__name__}: {exc}")
        finally:
            remote.activate(None)
        return CellResult("ok") if outcome.earned >= 1.0 else CellResult("error", outcome.feedback, outcome.earned)

    def bind_names(self, origins: dict) -> None:
        ns = self.namespace
        student = []
        for name, origin in origins.items():
            if origin.side == names.IMPORT:
                exec(origin.statement, ns)  # noqa: S102 -- an import statement of a canonical given cell
            elif origin.side == names.STUDENT:
                student.append(name)
        if not student:
            return
        reply = self.session.request({"op": "fetch", "names": student})
        values = reply.get("values")
        if not isinstance(values, dict):
            raise remote.StudentCodeError("the kernel sent a malformed answer")
        for name in student:
            described = values.get(name)
            if not isinstance(described, dict) or described.get("kind") == "missing":
                ns.pop(name, None)
            else:
                ns[name] = remote.bound_value(name, described, self.session)


# -- the report ------------------------------------------------------------------------------------------------

def build_report(notebook: str, lab: str, seed: int, merged, results: list[CellResult]) -> Report:
    """One check per test cell, and one manual entry per manually graded cell (its points possible and whether
    it was answered: the instructor scores it).  The answer cells right before a run of test cells are what those
    tests check: when one of them failed, a failing test says so (the test's own error is often a NameError)."""
    report = Report(notebook, lab=lab, seed=seed, language=current())
    group: list[tuple[str, str]] = []
    after_test = False
    for i, cell in enumerate(merged.nb["cells"]):
        res = results[i]
        gid = nbgrader_meta(cell).get("grade_id")
        kind = cell_kind(cell)
        if is_manual(cell):
            points = float(nbgrader_meta(cell).get("points", 0))  # (the canonical notebook's metadata)
            report.manual.append(ManualCheck(gid, points, bool(merged.manual.get(gid))))
        if kind == "answer":
            if after_test:
                group, after_test = [], False
            if res.status != "ok":
                group.append((gid, merged.notes.get(gid) or _answer_problem(res)))
        if kind != "test":
            continue
        after_test = True
        points = float(nbgrader_meta(cell).get("points", 0))
        if res.status == "ok":
            report.add(gid, points, True, "passed")
            continue
        feedback = _shorten(translated(res.message.removeprefix("LabCheckFailed: ")))
        if group and not feedback.startswith((NOT_ANSWERED, translated(NOT_ANSWERED))):
            if len(group) == 1:
                feedback = translated(f"{feedback} (your answer cell '{group[0][0]}' failed: {group[0][1]})")
            else:
                feedback = translated(f"{feedback} (your answer cells failed: "
                                      f"{'; '.join(f'{g!r}: {w}' for g, w in group)})")
        report.add(gid, points, res.earned if res.status == "error" else False, feedback)
    return report


def _shorten(text: str, limit: int = FEEDBACK_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _answer_problem(res: CellResult) -> str:
    if res.message.startswith("NotImplementedError"):
        return translated(NOT_ANSWERED)
    return _shorten(translated(res.message), 200)
