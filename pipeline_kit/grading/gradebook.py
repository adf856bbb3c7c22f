"""A class's gradebook on disk: ``grades.csv`` for spreadsheets and LMS imports, ``grades.json`` with every check
and its feedback, and a feedback page per student and lab; and the merge of the slices ``--shard`` graded.

Why a folder the command owns: a gradebook is rewritten on every regrade, so the command must know which files
are its own.  It writes only into a folder that is new, empty, or a gradebook it wrote before (its
``grades.json`` says so), replaces only the files it names, each whole, and never follows a link there.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import stat
from html import escape
from pathlib import Path

from ..argtypes import UsageError
from ..inputs import InputError, parse_json, read_text
from ..interrupts import write_file_atomically
from ..limits import LimitError
from . import names
from .batch import Row
from .notebook import QUESTIONS, read_notebook, source_dir
from .report import question_label
from .rubric_table import table_html

FORMAT = "pipeline-kit gradebook 1"
FILES = ("grades.csv", "grades.json")
SAFE = re.compile(r"[^\w.-]")


def check_folder(path: str, what: str = "--gradebook") -> Path:
    """The gradebook folder, checked before any grade: missing (made later), empty, or one this command wrote."""
    folder = Path(path)
    if folder.is_symlink():
        raise UsageError(f"argument {what}: {path} is a link; name the gradebook folder itself")
    if not folder.exists():
        if not folder.parent.is_dir() and str(folder.parent) not in ("", "."):
            raise UsageError(f"argument {what}: cannot make {path}: the folder {folder.parent} does not exist")
        return folder
    if not folder.is_dir():
        raise UsageError(f"argument {what}: {path} is not a folder (a gradebook is a folder: grades.csv, "
                         "grades.json, feedback/)")
    entries = [p.name for p in folder.iterdir()]
    if entries and not _is_gradebook(folder):
        raise UsageError(f"argument {what}: {path} holds files this command did not write ({', '.join(entries[:3])}"
                         f"{', ...' if len(entries) > 3 else ''}); give a new or empty folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"argument {what}: cannot write {path}: permission denied")
    return folder


def _is_gradebook(folder: Path) -> bool:
    try:
        return read(folder).get("format") == FORMAT
    except UsageError:
        return False


def read(folder: Path) -> dict:
    """A gradebook's ``grades.json``, or a one-line error saying what is wrong with it."""
    path = folder / "grades.json"
    try:
        data = parse_json(read_text(str(path), "grades.json", limit="MAX_GRADEBOOK_BYTES"), "grades.json")
    except (InputError, LimitError) as exc:
        raise UsageError(f"{folder}: not a gradebook of this command ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), list):
        raise UsageError(f"{folder}: grades.json is not a gradebook of this command (no \"format\": {FORMAT!r})")
    return data


def safe_name(name: str) -> str:
    """A student's or lab's name as one file name: letters (any script: 张三 stays 张三), digits, ``._-``, never
    hidden; a name that had to change gets a digest of the original, so two names never share a page."""
    out = SAFE.sub("_", name)[:100] or "_"
    out = "_" + out[1:] if out.startswith(".") else out
    return out if out == name else f"{out}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


# -- writing ------------------------------------------------------------------------------------------------------

def question_columns(rows: list[Row]) -> list[str]:
    keys = {k for r in rows if r.report for k in r.report.get("questions", {})}
    order = {q: i for i, q in enumerate(QUESTIONS)}
    return sorted(keys, key=lambda k: (order.get(k.rsplit("_", 1)[0], 99), not k.endswith("_main")))


def csv_text(rows: list[Row]) -> str:
    """``student, lab, score, max_score, m0xx_main, m0xx_follow, ..., seed, seconds, error``: a row per notebook."""
    columns = question_columns(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", "lab", "score", "max_score", *columns, "seed", "seconds", "error"])
    for r in sorted(rows, key=lambda r: (r.student, r.lab)):
        q = r.report.get("questions", {}) if r.report else {}
        writer.writerow([_cell(r.student), _cell(r.lab), f"{r.score:g}",
                         "" if r.max_score is None else f"{r.max_score:g}",
                         *(f"{q[c]['points']:g}" if c in q else "" for c in columns),
                         "" if r.seed is None else r.seed, f"{r.seconds:.1f}", _cell(r.error)])
    return out.getvalue()


def _cell(text: str) -> str:
    """A text cell no spreadsheet runs as a formula (a student's folder may be named ``=HYPERLINK(...)``)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def hidden_checks(lab: str, sources: Path | None) -> set[str]:
    """The checks of ``lab`` whose test cell adds hidden cases (the feedback page says so, never what they are)."""
    try:
        nb = read_notebook((sources or source_dir()) / f"{lab}.ipynb")
    except Exception:  # noqa: BLE001 -- a lab the kit does not have: no check is marked
        return set()
    out = set()
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid and cell.get("cell_type") == "code" and names.visible_part(cell["source"]) != cell["source"]:
            out.add(gid)
    return out


def feedback_page(row: Row, hidden: set[str], course: str = "") -> str:
    title = f"{row.lab}: {row.student}"
    if row.report:
        r = row.report
        q = r.get("questions", {})
        summary = "; ".join(f"{question_label(k)} {v['points']:g} / {v['max_points']:g}" for k, v in q.items())
        body = (f"<h2>{r['score']:g} / {r['max_score']:g} points</h2><p>{escape(summary)}</p>"
                f"{table_html(r, lambda name: name in hidden)}"
                f"<p class=\"note\">Graded by the sandboxed grader of pipeline-kit: your answers ran in an isolated "
                f"kernel and every check ran in the grader's process. Hidden cases were drawn with seed "
                f"{row.seed}; a check marked “hidden cases too” was also run on cases you did not see, and its "
                f"feedback describes what went wrong without showing them.</p>")
    else:
        body = f"<h2>Not graded</h2><p>{escape(row.error)}</p>"
    style = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#202124}"
             "table{border-collapse:collapse;width:100%}td,th{padding:4px 8px;border-bottom:1px solid #e0e0e0;"
             "vertical-align:top}tr.pk-group th{background:#f1f3f4}.note{color:#5f6368}")
    head = f"<p class=\"note\">{escape(course)}</p>" if course else ""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{escape(title)}</h1>{head}{body}</body></html>\n")


def write(folder: Path, rows: list[Row], meta: dict, sources: Path | None = None) -> None:
    """Write the gradebook: the two files and ``feedback/<student>/<lab>.html`` for every row."""
    folder.mkdir(exist_ok=True)
    hidden = {lab: hidden_checks(lab, sources) for lab in {r.lab for r in rows if r.report}}
    for r in rows:
        page_dir = folder / "feedback" / safe_name(r.student)
        for d in (folder / "feedback", page_dir):
            _own_folder(d)
        _write(page_dir / f"{safe_name(r.lab)}.html", feedback_page(r, hidden.get(r.lab, set())))
    data = {"format": FORMAT, **meta, "rows": [r.to_dict() for r in sorted(rows, key=lambda r: (r.student, r.lab))]}
    _write(folder / "grades.csv", csv_text(rows))
    _write(folder / "grades.json", json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _own_folder(d: Path) -> None:
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise UsageError(f"argument --gradebook: {d} is not a folder this command made; remove it or give a new "
                         "gradebook folder")
    d.mkdir(exist_ok=True)


def _write(path: Path, text: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"argument --gradebook: {path} is not a regular file this command wrote; remove it first")
    write_file_atomically(str(path), text)


# -- merging slices -------------------------------------------------------------------------------------------------

def merge(folders: list[str], out: str) -> tuple[dict, list[str]]:
    """One gradebook from the slices' gradebooks: (its data, the problems to report).  Refuses a student's lab
    graded in two slices; reports the slices and the class's notebooks no gradebook holds."""
    target = check_folder(out, "--out")
    books = []
    for f in folders:
        if Path(f).resolve() == target.resolve():
            raise UsageError(f"argument --out: {out} is also one of the gradebooks merged; give a new folder")
        books.append((f, read(Path(f))))
    rows: dict[tuple[str, str], tuple[str, Row]] = {}
    for f, data in books:
        for d in data["rows"]:
            row = Row.from_dict(d)
            key = (row.student, row.lab)
            if key in rows:
                raise UsageError(f"{f}: {row.student} {row.lab} is also in {rows[key][0]} (slices must not overlap: "
                                 "each is graded with a different --shard K/N)")
            rows[key] = (f, row)
    problems = []
    shards = {d.get("shard", {}).get("of") for _, d in books if d.get("shard")}
    if len(shards) > 1:
        raise UsageError(f"the gradebooks are slices of different splits ({', '.join(sorted(map(str, shards)))} "
                         "slices): merge the slices of one --shard K/N run")
    if shards:
        n = shards.pop()
        have = {d["shard"]["index"] for _, d in books if d.get("shard")}
        missing = sorted(set(range(1, n + 1)) - have)
        if missing:
            problems.append(f"missing slices: {', '.join(f'{k}/{n}' for k in missing)}")
    roster = {tuple(k) for _, d in books for k in d.get("class", [])}
    absent = sorted(roster - set(rows))
    if absent:
        problems.append(f"{len(absent)} notebook(s) of the class graded in no slice: "
                        + ", ".join(f"{s} {lab}" for s, lab in absent[:10]) + (" ..." if len(absent) > 10 else ""))
    merged = [r for _, r in rows.values()]
    meta = {"merged_from": [str(f) for f in folders], "class": sorted(roster), "shared_runs":
            {k: v for _, d in books for k, v in d.get("shared_runs", {}).items()}}
    return {"folder": target, "rows": merged, "meta": meta}, problems
