"""A self-grade from inside the notebook: the real, sandboxed grader on the notebook as last saved, its report shown
as a table grouped by question.

Why a separate process and the saved file: the grade must be the one an instructor's ``python -m pipeline_kit grade``
would give, and that grader reads the notebook file, never a live kernel (whose state a student's code could have
changed).  So this runs that command on the saved file and shows its ``--json`` report; it writes nothing and
changes nothing, and it says which saved version it graded and which cells this kernel ran that the file does not
hold.  A kernel that Jupyter did not start for a notebook (nbval, nbgrader, nbconvert, the grader's own) does not
know its file: there it only says how to name one, so a lab run top to bottom never grades itself.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
import threading
from html import escape
from pathlib import Path

from ..interrupts import end_process
from ..language import translated
from .names import normalized
from .notebook import GradeError, read_notebook
from .rubric_table import table_html, table_text

MAX_ERROR_LINES = 20


def saved_notebook(notebook: str | os.PathLike | None, user_ns: dict) -> Path | None:
    """The file to grade: the one named (exactly that file), else the one Jupyter started this kernel for
    (JupyterLab and the classic notebook set ``JPY_SESSION_NAME``, VS Code ``__vsc_ipynb_file__``), else None."""
    if notebook is not None:
        if not isinstance(notebook, (str, os.PathLike)) or not str(notebook):
            raise ValueError(f"grade_me: the notebook must be the path of a saved .ipynb, got "
                             f"{type(notebook).__name__} {notebook!r:.80}")
        path = Path(notebook).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"grade_me: no notebook at {path} (the argument must be a saved .ipynb)")
        return path.resolve()
    for candidate in (os.environ.get("JPY_SESSION_NAME"), user_ns.get("__vsc_ipynb_file__")):
        if isinstance(candidate, str) and candidate:
            path = Path(candidate).expanduser()
            for option in (path, Path.cwd() / path.name):  # (a session name may be relative to the server's root)
                if option.is_file():
                    return option.resolve()
    return None


def check_seed(seed) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"grade_me: seed must be a whole number >= 0 (or None for a fresh one), got "
                         f"{type(seed).__name__} {seed!r:.80}")


def unsaved_cells(nb: dict, ran: list[str], by_id: dict[str, str] | None = None) -> list[str]:
    """The cells this kernel ran that differ from the saved file, named as the student knows them: an answer or
    test cell by its ``grade_id``, another by its place (``cell 7``), a cell the file lacks as a new one.  Where the
    frontend sent cell ids (JupyterLab, Notebook 7) a cell is compared with what was last run in it; elsewhere,
    with the kernel's history (only how many then)."""
    code = [(i, c) for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"]
    if by_id:
        saved = {c.get("id"): (i, c) for i, c in code if c.get("id")}
        out = []
        for cid, src in by_id.items():
            if cid not in saved:
                out.append(f"a new cell ({_first_line(src)})")
            elif normalized(src) != normalized(saved[cid][1].get("source", "")):
                i, cell = saved[cid]
                gid = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
                out.append(f"'{gid}'" if gid else f"cell {i + 1} ({_first_line(src)})")
        return out
    sources = {normalized(c.get("source", "")) for _, c in code}
    n = sum(1 for src in ran if src.strip() and normalized(src) not in sources)
    return [f"{n} cell{'s' if n != 1 else ''} (edited, added or deleted since the save)"] if n else []


def _first_line(src: str) -> str:
    line = next((ln.strip() for ln in src.splitlines() if ln.strip()), "empty")
    return line if len(line) <= 40 else line[:39] + "…"


def describe_version(path: Path) -> str:
    data = path.read_bytes()
    when = datetime.datetime.fromtimestamp(path.stat().st_mtime)
    age = datetime.datetime.now() - when
    ago = (f"{int(age.total_seconds())} s ago" if age.total_seconds() < 120 else
           f"{int(age.total_seconds() // 60)} min ago" if age.total_seconds() < 7200 else when.strftime("%Y-%m-%d"))
    return f"{path.name} as saved at {when:%H:%M:%S} ({ago}; sha256 {hashlib.sha256(data).hexdigest()[:12]})"


# -- running the grader ------------------------------------------------------------------------------------------

def run_grader(path: Path, seed: int | None, on_progress) -> tuple[dict | None, list[str]]:
    """``python -m pipeline_kit grade PATH --json --progress``: (its report, None) or (None, its error lines).
    Interrupting (the notebook's stop button) ends the grade, which ends its sandbox and removes its folder."""
    command = [sys.executable, "-m", "pipeline_kit", "grade", str(path), "--json", "--progress"]
    if seed is not None:
        command += ["--seed", str(seed)]
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}  # (the grader's kernels get none anyway)
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, encoding="utf-8", errors="replace", env=env)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    errors: list[str] = []
    try:
        for line in proc.stderr:
            line = line.rstrip("\n")
            if line.startswith("running cell "):
                on_progress(line)
            elif line.strip():
                errors = (errors + [line])[-MAX_ERROR_LINES:]
        proc.wait()
    except BaseException:  # KeyboardInterrupt above all: the grade must not outlive the request
        end_process(proc)
        raise
    reader.join()
    if proc.returncode != 0:
        return None, errors or [f"the grader exited with status {proc.returncode}"]
    try:
        return json.loads("".join(out)), errors
    except ValueError:
        return None, ["the grader's report could not be read"] + errors


class SelfGrade:
    """The report, shown as an HTML table (text in a terminal); ``hidden(name)`` says whether a check adds hidden
    cases.  A hidden check shows its points and feedback: each failing case by its inputs, never its test's source
    or the value it expects."""

    def __init__(self, report: dict, version: str, unsaved: list[str], hidden):
        self.report, self.version, self.unsaved, self.hidden = report, version, unsaved, hidden

    def _notes(self) -> list[str]:
        notes = [f"Graded {self.version} by the sandboxed grader (python -m pipeline_kit grade); changes you have "
                 f"not saved are not included, so save (Ctrl+S) before you grade."]
        notes.append("Hidden cases were drawn afresh for this self-grade; each grade draws new ones, and the same "
                     "answers earn the same points whichever are drawn.")
        manual = self.report.get("manual") or []
        if manual:
            total = round(sum(m["max_points"] for m in manual), 2)
            cells = ", ".join(m["name"] for m in manual)
            notes.append(f"{total:g} more point{'' if total == 1 else 's'} ({cells}) {'is' if total == 1 else 'are'} "
                         f"graded by your instructor, who reads what you wrote there: they are not in this score.")
        if not (self.report.get("sandbox") or {}).get("isolated", True):
            notes.append(f"The sandbox was OFF ({self.report['sandbox'].get('why')}).")
        return [translated(n) for n in notes]

    @property
    def warning(self) -> str:
        """What the student must know before reading the table: cells on their screen that the grade did not see."""
        if not self.unsaved:
            return ""
        return translated("Not what you see: this grades the saved file, and what you ran in "
                          f"{', '.join(self.unsaved)} is not in it (edited and not saved, or added since). Save "
                          "(Ctrl+S), then run grade_me() again.")

    def __repr__(self) -> str:
        r = self.report
        lines = ([f"WARNING: {self.warning}"] if self.warning else []) + [
            translated(f"self-grade: {r['score']:g} / {r['max_score']:g} points"), *table_text(r, self.hidden)]
        return "\n".join(lines + [f"({n})" for n in self._notes()])

    def _repr_html_(self) -> str:
        r = self.report
        notes = "".join(f'<p style="color:#5f6368;margin:2px 0">{escape(n)}</p>' for n in self._notes())
        warn = (f'<p class="pk-unsaved" style="background:#fef7e0;border-left:4px solid #f9ab00;padding:6px 10px;'
                f'margin:4px 0;font-weight:600">⚠ {escape(self.warning)}</p>' if self.warning else "")
        title = translated(f"Self-grade: {r['score']:g} / {r['max_score']:g} points")
        return (f'<div class="pk-self-grade">{warn}<h4 style="margin:4px 0">{escape(title)}</h4>'
                f'{table_html(r, self.hidden)}{notes}</div>')


def _bundle(text: str, html: str) -> dict:
    return {"text/plain": text, "text/html": html}


NO_FILE = ("grade_me() grades the notebook as last saved, but this kernel does not know which file that is (Jupyter "
           "did not start it for a notebook: nbval, nbgrader and nbconvert runs end here). Name the file: "
           "grade_me(\"path/to/this_lab.ipynb\").")


def no_file_bundle() -> dict:
    text = translated(NO_FILE)
    return _bundle(text, f'<p class="pk-self-grade-none" style="color:#5f6368">{escape(text)}</p>')


def grade_saved(notebook, seed, hidden, user_ns: dict, ran: list[str], by_id: dict[str, str] | None = None):
    """The body of :func:`.tutor.grade_me`; returns the shown :class:`SelfGrade`, or None when nothing was graded."""
    from IPython.display import display

    try:
        check_seed(seed)
        path = saved_notebook(notebook, user_ns)
    except (FileNotFoundError, ValueError) as exc:
        display(_bundle(str(exc), f"<p>{escape(str(exc))}</p>"), raw=True)
        return None
    if path is None:
        display(no_file_bundle(), raw=True)
        return None
    try:
        nb = read_notebook(path)
    except GradeError as exc:
        display(_bundle(str(exc), f"<p>{escape(str(exc))}</p>"), raw=True)
        return None
    version = describe_version(path)
    unsaved = unsaved_cells(nb, ran, by_id)
    start = translated(f"Grading {version} in a sandbox…")
    handle = display(_bundle(start, f"<p>{escape(start)}</p>"), raw=True, display_id=True)

    def progress(line: str) -> None:
        text = translated(f"Grading {version} in a sandbox: {line}")
        handle.update(_bundle(text, f"<p>{escape(text)}</p>"), raw=True)

    report, errors = run_grader(path, seed, progress)
    if report is None:
        text = translated("The grader could not grade the saved notebook:") + "\n" + "\n".join(errors)
        handle.update(_bundle(text, f"<pre>{escape(text)}</pre>"), raw=True)
        return None
    report.pop("seed", None)  # the hidden cases' seed is the instructor's: a self-grade neither shows nor keeps it
    shown = SelfGrade(report, version, unsaved, lambda name: hidden(report.get("lab"), name))
    handle.update(_bundle(repr(shown), shown._repr_html_()), raw=True)
    return shown
