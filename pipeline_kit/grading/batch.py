"""Grade a class: many notebooks, a few at a time, each in its own ``grade`` process and sandbox.

Why processes and not threads: a grade holds one kernel session in module state (:mod:`.remote`), so two grades
in one process would share it; a process per notebook also keeps one student's crash, timeout or memory from
touching another's grade, and its report is the same JSON a single ``grade --json`` prints -- the scores equal
single-notebook grades with the same seeds by construction.

Work that does not depend on the student runs once per batch: each lab's fixed jobs (:func:`fixed_runs`, the
jobs its given cells and hidden tests start with fixed arguments) are recorded into one folder by a warm-up
process of the batch's (:data:`pipeline_kit.launch.SHARE_ENV`); the grades and their kernels replay them
read-only (:data:`pipeline_kit.launch.FIXED_ENV`).  A job that depends on a student (their layout's run) is run
by that student's grade alone and recorded nowhere, so no grade sees another's.  Nothing is shared while the
sandbox is off (where a student's code could write the folder).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..argtypes import EXIT_USAGE
from ..interrupts import end_process
from ..launch import FIXED_ENV, SHARE_ENV
from . import sandbox
from .classlist import Submission, printable
from .notebook import EXIT_NOT_GRADED, GradeError, read_notebook, source_dir

MAX_JOBS = 64
OVERDUE_S = 120  # how long past its own --total-timeout a grade process may run before the batch ends it
ERROR_LINES = 5


# a row's status (the instructor's guide, "What the rows mean"); only NOT_GRADED is no score
GRADED, REFUSED, NOT_GRADED, MISSING = "graded", "refused", "not graded", "no submission"


@dataclass
class Row:
    """A notebook of the class: the gradebook's row and the report behind it.

    ``status`` says which of three it is, because only one of them is a score: ``graded`` (the report's), ``refused``
    (the notebook's own fault -- no lab, unreadable, not the student's own file: 0 points, as for a blank
    notebook) and ``not graded`` (the machine failed twice, not the notebook: no score anywhere, rerun it)."""

    student: str
    lab: str
    notebook: str
    seed: int | None
    seconds: float = 0.0
    report: dict | None = None
    error: str = ""
    assignment: str | None = None
    notebook_id: str | None = None
    status: str | None = None  # None: decided by the report (a gradebook written before the field had none)
    note: str = ""
    timestamp: str | None = None      # when it was handed in (nbgrader's timestamp.txt), ISO 8601 in UTC
    late_seconds: float | None = None  # how late, after the due date and the student's extension (nbgrader's)
    penalty: float | None = None       # the course's late penalty, already taken off ``score``

    def __post_init__(self) -> None:
        if self.status is None:
            self.status = GRADED if self.report else REFUSED

    @property
    def student_lab(self) -> tuple[str, str]:
        return self.student, self.lab

    @property
    def manual(self) -> list[dict]:
        """The manually graded cells (``{"name", "max_points", "answered", "points"}``; ``points`` None until the
        instructor scored it in nbgrader's formgrader)."""
        return self.report.get("manual") or [] if self.report else []

    @property
    def score(self) -> float:
        """The row's points: the kit's checks, plus the manual cells scored so far, less the late penalty (never
        below 0, as ``nbgrader export`` computes it); 0 for a refused notebook or no submission."""
        if not self.report:
            return 0.0
        raw = self.report["score"] + sum(m.get("points") or 0.0 for m in self.manual)
        return round(max(0.0, raw - (self.penalty or 0.0)), 2)

    @property
    def max_score(self) -> float | None:
        if not self.report:
            return None
        return round(self.report["max_score"] + sum(m["max_points"] for m in self.manual), 2)

    @property
    def why(self) -> str:
        """What the row says besides its points: ``refused: ...`` or ``not graded: ...``, its late penalty, and its
        note."""
        text = "" if self.status == GRADED else f"{self.status}: {self.error}" if self.error else self.status
        late = f"late by {duration_text(self.late_seconds)}, penalty {self.penalty:g}" if self.late_seconds else ""
        return "; ".join(t for t in (text, late, self.note and f"note: {self.note}") if t)

    def to_dict(self) -> dict:
        out = {"student": self.student, "lab": self.lab, "notebook": self.notebook, "status": self.status,
               "score": None if self.status == NOT_GRADED else self.score, "max_score": self.max_score,
               "seed": self.seed, "seconds": round(self.seconds, 1), "error": self.error, "note": self.note}
        if self.assignment is not None:
            out.update(assignment=self.assignment, notebook_id=self.notebook_id, timestamp=self.timestamp,
                       late_seconds=self.late_seconds, penalty=self.penalty)
        if self.report:
            out.update(questions=self.report.get("questions", {}), checks=self.report["checks"],
                       sandbox=self.report.get("sandbox"), shared_runs=self.report.get("shared_runs", []))
            if self.report.get("language", "en") != "en":  # (the feedback's: its page is written in it)
                out["language"] = self.report["language"]
            if self.manual:
                out["manual"] = self.manual
        return out


def duration_text(seconds: float) -> str:
    """``3 d 4 h``, ``2 h 5 min``, ``40 s``: how late, for people."""
    s = int(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if s >= size:
            return f"{s // size} {unit}" + (f" {s % size // sub_size} {sub}" if s % size >= sub_size else "")
    return f"{s} s"


@dataclass
class Options:
    timeout: float
    total_timeout: float
    solutions: str | None
    jobs: int


# -- the fixed jobs of each lab ----------------------------------------------------------------------------------

def fixed_runs(lab: str, sources: Path | None = None) -> tuple[str, str] | None:
    """``(what, checks module)`` of the jobs ``lab``'s given cells and hidden tests start with fixed arguments, as
    its canonical notebook names them (``metadata.pipeline_kit``: ``"checks"``, the lab's checks module, whose
    ``fixed_runs()`` starts them, and ``"fixed_runs"``, what they are); None for a lab without any.

    The engine knows no lab: the instructor's canonical notebook says where its checks live, never a student's."""
    try:
        meta = read_notebook((sources or source_dir()) / f"{lab}.ipynb")["metadata"].get("pipeline_kit") or {}
    except GradeError:
        return None
    what, module = meta.get("fixed_runs"), meta.get("checks")
    return (what, module) if isinstance(what, str) and isinstance(module, str) else None


def warm(module: str) -> None:
    """Record a lab's fixed jobs into the shared folder: ``fixed_runs()`` of its checks ``module`` (run as
    ``python -m pipeline_kit.grading.batch MODULE``)."""
    importlib.import_module(module).fixed_runs()


class Batch:
    """The scheduler: shared runs first, then the notebooks in the given order, ``jobs`` at a time."""

    def __init__(self, subs: list[Submission], options: Options, stream=sys.stderr):
        self.subs, self.options, self.stream = subs, options, stream
        self.rows: list[Row | None] = [None] * len(subs)
        self.lock = threading.Lock()
        self.running: dict[object, str] = {}  # notebook index (or "warm LAB") -> what it is doing
        self.done = 0
        self.started = time.monotonic()
        self.tty = stream.isatty()
        self.shared: dict[str, dict] = {}  # lab -> {"what", "seconds", "error"}
        self.procs: set[subprocess.Popen] = set()
        self.stopping = False
        off = sandbox.wanted(True)
        self.share_off = off  # why nothing is shared ("" when sharing is on)

    # -- output ----------------------------------------------------------------------------------------------

    def say(self, line: str) -> None:
        with self.lock:
            self._clear()
            print(line, file=self.stream, flush=True)
            self._bar()

    def _clear(self) -> None:
        if self.tty:
            print("\r\033[K", end="", file=self.stream)

    def _bar(self) -> None:
        if not self.tty:
            return
        total = len(self.subs)
        width = 24
        filled = int(width * self.done / total) if total else width
        now = ", ".join(list(self.running.values())[:3]) or "starting"
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{total}  {self.eta()}  grading {now}"[:160],
              end="", file=self.stream, flush=True)

    def eta(self) -> str:
        """The time left: the notebooks not done yet, at the mean grade time so far, ``jobs`` at a time."""
        times = [r.seconds for r in self.rows if r is not None and r.report]
        if not times:
            return "ETA --"
        left = sum(times) / len(times) * (len(self.subs) - self.done) / self.options.jobs
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"

    # -- running ---------------------------------------------------------------------------------------------

    def run(self) -> list[Row]:
        sources = Path(self.options.solutions) if self.options.solutions else None
        runs = {lab: found for lab in sorted({s.lab for s in self.subs if s.problem is None})
                if (found := fixed_runs(lab, sources))}
        with tempfile.TemporaryDirectory(prefix="pipeline-kit-class-") as tmp:
            folder = Path(tmp) / "shared-runs"
            folder.mkdir(mode=0o755)
            os.chmod(tmp, 0o755)  # (the kernels' read-only view of the shared runs passes through it)
            env, warm_env = dict(os.environ), dict(os.environ)
            if not self.share_off:  # the warm-ups record the fixed jobs; a grade only replays them
                warm_env[SHARE_ENV] = env[FIXED_ENV] = str(folder)
            with ThreadPoolExecutor(max_workers=self.options.jobs) as pool:
                warming = {} if self.share_off else {lab: pool.submit(self.warm, lab, *runs[lab], warm_env)
                                                     for lab in runs}
                # the labs whose shared runs are being made go last, so no worker waits for them while others
                # could be graded
                order = sorted(range(len(self.subs)), key=lambda i: (self.subs[i].lab in warming, i))
                futures = [pool.submit(self.grade_one, i, env, warming.get(self.subs[i].lab)) for i in order]
                try:
                    for f in futures:
                        f.result()
                except BaseException:
                    self.stop()
                    raise
        with self.lock:
            self._clear()
        return [r for r in self.rows if r is not None]

    def stop(self) -> None:
        self.stopping = True
        for proc in list(self.procs):
            end_process(proc)

    def _spawn(self, command: list[str], env: dict) -> subprocess.Popen:
        if self.stopping:
            raise KeyboardInterrupt
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, encoding="utf-8", errors="replace", env=env)
        self.procs.add(proc)
        return proc

    def warm(self, lab: str, what: str, module: str, env: dict) -> None:
        start = time.monotonic()
        with self.lock:
            self.running[f"warm {lab}"] = f"shared runs of {lab}"
        proc = self._spawn([sys.executable, "-m", "pipeline_kit.grading.batch", module], env)
        try:
            _, err = proc.communicate(timeout=600)
            error = "" if proc.returncode == 0 else _last_lines(err, proc.returncode)
        except subprocess.TimeoutExpired:
            end_process(proc)
            error = "did not finish in 600 s"
        finally:
            self.procs.discard(proc)
        seconds = time.monotonic() - start
        with self.lock:
            self.shared[lab] = {"what": what, "seconds": round(seconds, 1), "error": error}
            self.running.pop(f"warm {lab}", None)
        self.say(f"shared runs of {lab}: {what}: " + (f"made once in {seconds:.0f} s" if not error else
                                                      f"not shared ({error}); each grade runs its own"))

    def grade_one(self, i: int, env: dict, warming) -> None:
        sub = self.subs[i]
        row = Row(sub.student, sub.key[1], sub.shown_path, sub.seed if sub.problem is None else None,
                  assignment=sub.assignment, notebook_id=sub.notebook_id, note=sub.note, timestamp=sub.timestamp)
        if sub.problem is not None:
            row.error, row.status = printable(sub.problem), REFUSED
        else:
            if warming is not None:
                warming.result()
            with self.lock:
                self.running[i] = f"{sub.student} {sub.lab}"
            self._grade(i, row, env)
        with self.lock:
            self.rows[i] = row
            self.done += 1
            self.running.pop(i, None)
        shown = f"{row.score:g} / {row.max_score:g}" if row.report else ""
        left = f", {self.eta()}" if self.done < len(self.subs) else ""
        self.say(f"[{self.done}/{len(self.subs)}] " + "  ".join(t for t in (row.student, row.lab, shown, row.why) if t)
                 + (f"  ({row.seconds:.1f} s, seed {row.seed}{left})" if row.report else ""))

    def _grade(self, i: int, row: Row, env: dict) -> None:
        """Grade notebook ``i`` into ``row``; a grade the machine failed (see :func:`_outcome`) is run once more, in
        a fresh process with the same seed, and where that fails too the row is ``not graded``, never a score."""
        tries: list[str] = []
        while True:
            attempt = self._attempt(i, env)
            row.seconds += attempt.seconds
            status, text, report = _outcome(attempt, self.options)
            tries.append(text)
            if status != NOT_GRADED or not attempt.retry or len(tries) == 2:
                break
        row.status, row.report = status, report
        if status == NOT_GRADED and len(tries) == 2:
            text += " (tried twice)" if tries[0] == text else f" (the first try: {tries[0]})"
        row.error = printable(text)

    def _attempt(self, i: int, env: dict) -> Attempt:
        """One ``grade`` process for notebook ``i``: its exit status, last error lines and report text."""
        sub, o = self.subs[i], self.options
        command = [sys.executable, "-m", "pipeline_kit", "grade", str(sub.path), "--json", "--progress",
                   "--seed", str(sub.seed), "--timeout", f"{o.timeout:g}", "--total-timeout", f"{o.total_timeout:g}"]
        if o.solutions:
            command += ["--solutions", o.solutions]
        start = time.monotonic()
        proc = self._spawn(command, env)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
        reader.start()
        errors: list[str] = []
        timed_out = threading.Event()

        def overdue() -> None:  # past the grade's own limit, and more: the grader itself is stuck
            timed_out.set()
            end_process(proc)
        timer = threading.Timer(o.total_timeout + OVERDUE_S, overdue)
        timer.start()
        try:
            for line in proc.stderr:
                line = line.rstrip("\n")
                if line.startswith("running cell "):
                    with self.lock:
                        self.running[i] = f"{sub.student} {sub.lab} ({printable(line[13:])})"
                        self._clear()
                        self._bar()
                elif line.strip():
                    errors = (errors + [line])[-ERROR_LINES:]
            proc.wait()
        finally:
            timer.cancel()
            self.procs.discard(proc)
        reader.join()
        if self.stopping:
            raise KeyboardInterrupt
        return Attempt(proc.returncode, errors, "".join(out), timed_out.is_set(), time.monotonic() - start)


@dataclass
class Attempt:
    """What one ``grade`` process of the batch left: how it ended, its last stderr lines, its stdout."""

    code: int
    errors: list[str]
    out: str
    timed_out: bool  # the batch ended it (it outlived its own --total-timeout by OVERDUE_S)
    seconds: float
    retry: bool = True  # whether a failure of the machine is worth a second process (not after the batch's own end)


GRADE_PREFIX = "python -m pipeline_kit grade: "


def _outcome(a: Attempt, o: Options) -> tuple[str, str, dict | None]:
    """(status, reason, report) of one grade process.  Exit 0 with a readable report is a grade; exit 2 is the
    notebook's own refusal (not a lab, unreadable: the student's fault, kept as today); everything else is the
    machine's failure -- ``grade``'s ``EXIT_NOT_GRADED``, a signal the batch did not send (the OOM killer, an
    operator's kill: exit 128+N or -N), a traceback (exit 1), a report that cannot be read -- and is retried.  A
    grade the batch itself ended (past ``--total-timeout`` by ``OVERDUE_S``: the grader is stuck, not the
    student's code, which its own limit stops) is not graded without a retry, which would take as long."""
    lines = [e.removeprefix(GRADE_PREFIX).removeprefix("error: ").removeprefix("not graded: ") for e in a.errors]
    text = " / ".join(lines)
    if a.timed_out:
        a.retry = False
        return NOT_GRADED, (f"stopped after {a.seconds:.0f} s: the grade outlived --total-timeout "
                            f"({o.total_timeout:g} s) by {OVERDUE_S} s"), None
    if a.code == 0:
        report = _report(a.out)
        return (GRADED, "", report) if report else (NOT_GRADED, "the grader's report could not be read", None)
    if a.code == EXIT_USAGE:
        return REFUSED, text or "the grader refused the notebook", None
    if a.code == EXIT_NOT_GRADED:
        return NOT_GRADED, (lines[-1] if lines else "the grader could not grade it"), None
    signum = -a.code if a.code < 0 else a.code - 128 if a.code in (128 + signal.SIGINT, 128 + signal.SIGTERM) else 0
    if signum:
        return NOT_GRADED, f"the grade process was ended by {signal.Signals(signum).name}, not by the batch", None
    return NOT_GRADED, f"the grader exited with status {a.code}" + (f" ({text})" if text else ""), None


def _report(text: str) -> dict | None:
    """The grade's ``--json`` report, or None where it is not one (cut short, not JSON, not a report)."""
    try:
        report = json.loads(text)
    except ValueError:
        return None
    ok = isinstance(report, dict) and isinstance(report.get("checks"), list) and "score" in report
    return report if ok else None


def _last_lines(err: str, code: int) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return " / ".join(lines[-2:]) if lines else f"exit status {code}"


def grade_class(subs: list[Submission], options: Options, stream=sys.stderr) -> tuple[list[Row], dict]:
    """Grade ``subs``; returns the rows (in the order given) and the shared runs made (lab -> what and time)."""
    batch = Batch(subs, options, stream)
    rows = batch.run()
    shared = dict(batch.shared)
    if batch.share_off:
        shared = {"": {"what": f"nothing shared: the sandbox is off ({batch.share_off}), so a student's code "
                               "could write a shared run", "seconds": 0, "error": "sandbox off"}}
    return rows, shared


if __name__ == "__main__":  # python -m pipeline_kit.grading.batch MODULE: the batch's warm-up of one lab
    from ..interrupts import interrupts_end_in_one_line
    with interrupts_end_in_one_line("pipeline_kit.grading.batch") as ended:  # SIGTERM stops its torchrun jobs too
        warm(sys.argv[1])
    sys.exit(ended.exit_code or 0)
