"""A class's gradebook on disk: ``grades.csv`` for spreadsheets and LMS imports, ``grades.json`` with every check
and its feedback, and a feedback page per student and lab; and the merge of the slices ``--shard`` graded.

Why a folder the command owns: a gradebook is rewritten on every regrade, so the command must know which files
are its own.  It writes only into a folder that is new, empty, or a gradebook it wrote before (its
``grades.json`` says so), replaces only the files it names, each whole, and never follows a link there; every
file is rendered before the first is written, so a failure leaves no half gradebook.

Why every output is escaped: a student's name, a check's feedback and (in a merge) a whole slice are text a student
or a forger chose.  HTML is escaped field by field, a CSV text cell that would start a formula is neutralized (the
OWASP rule, headers included), and a slice is checked against the row's schema (:data:`ROW_FIELDS`) before
anything is made.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from html import escape
from pathlib import Path

from ..argtypes import UsageError
from ..inputs import (Field, InputError, array, boolean, check_object, describe, integer, nullable, number, parse_json,
                      read_text, text)
from ..language import LANGUAGES, speaking, translated
from ..limits import LimitError
from . import names
from .batch import GRADED, MISSING, NOT_GRADED, REFUSED, Row, duration_text
from .classlist import printable
from .notebook import QUESTIONS, read_notebook, source_dir
from .report import question_label
from .rubric_table import table_html

FORMAT = "pipeline-kit gradebook 1"
FILES = ("grades.csv", "grades.json")
SAFE = re.compile(r"[^\w.-]")


def check_folder(path: str, what: str = "--gradebook") -> Path:
    """The gradebook folder, checked before any grade: missing (made later), empty, or one this command wrote --
    whose ``grades.json`` is read whole and checked against the row's schema now, so a damaged or hand-edited one
    stops the command in one line (exit 2) before any grade, never after."""
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
    if entries and "grades.json" not in entries:
        raise UsageError(f"argument {what}: {path} holds files this command did not write ({', '.join(entries[:3])}"
                         f"{', ...' if len(entries) > 3 else ''}); give a new or empty folder")
    if entries:
        existing_rows(folder)
    if not os.access(folder, os.W_OK | os.X_OK) or not os.access(folder.parent, os.W_OK | os.X_OK):
        raise UsageError(f"argument {what}: cannot write {path}: permission denied (the gradebook and the folder "
                         "that holds it must be writable: a regrade replaces the folder whole)")
    return folder


def existing_rows(folder: Path) -> tuple[dict, list[Row]]:
    """The gradebook's own fields and rows, checked (:func:`slice_rows`); ({}, []) where it has no grades.json yet."""
    if not (folder / "grades.json").exists():
        return {}, []
    data = read(folder)
    return data, slice_rows(str(folder), data)[1]


def read(folder: Path) -> dict:
    """A gradebook's ``grades.json``, or a one-line error saying what is wrong with it."""
    path = folder / "grades.json"
    try:
        data = parse_json(read_text(str(path), "grades.json", limit="MAX_GRADEBOOK_BYTES"), "grades.json")
    except (InputError, LimitError) as exc:
        raise UsageError(f"{printable(str(folder))}: not a gradebook this command can read ({exc}); the files "
                         "were left as they are") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{printable(str(folder))}: grades.json is not a gradebook of this command (no "
                         f"\"format\": {FORMAT!r}); the files were left as they are")
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
    """``student, lab, score, max_score, m0xx_main, m0xx_follow, ..., timestamp, penalty, seed, seconds, status,
    error, note``: a row per notebook.  A ``not graded`` row has no score (blank, never 0); a ``refused`` one, or
    ``no submission``, scores 0."""
    columns = question_columns(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([_cell(c) for c in ("student", "lab", "score", "max_score", *columns, "timestamp", "penalty",
                                        "seed", "seconds", "status", "error", "note")])
    for r in sorted(rows, key=lambda r: (r.student, r.lab)):
        q = r.report.get("questions", {}) if r.report else {}
        writer.writerow([_cell(r.student), _cell(r.lab), "" if r.status == NOT_GRADED else _number(r.score),
                         _number(r.max_score), *(_number(q[c]["points"]) if c in q else "" for c in columns),
                         _cell(r.timestamp or ""), _number(r.penalty), _number(r.seed), _number(r.seconds, ".1f"),
                         r.status, _cell(r.error), _cell(r.note)])
    return out.getvalue()


def _cell(text: str) -> str:
    """A text cell no spreadsheet runs as a formula (a student's folder may be named ``=HYPERLINK(...)``): the
    OWASP rule, a ``'`` before a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return."""
    text = str(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _number(value, spec: str = "g") -> str:
    """A number this command formats itself, written as a number (``-1`` stays ``-1``); anything else (None: blank)
    is a text cell, neutralized as one."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # (a seed is a whole number, never 8.16e+08)
    if isinstance(value, float):
        return format(value, spec)
    return _cell(str(value))


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
    """The student's page: points by question, each check's feedback, every field escaped.  It never shows the seed
    (knowing it, a student could compute the hidden cases of a regrade); grades.csv and grades.json keep it.  It is
    in the language of the student's notebook, as the feedback is (``language`` of the report)."""
    language = (row.report or {}).get("language") or "en"
    with speaking(language):
        return _feedback_page(row, hidden, course, language)


def _feedback_page(row: Row, hidden: set[str], course: str, language: str) -> str:
    title = f"{row.lab}: {row.student}"
    if row.status == GRADED and row.report:
        r = row.report
        q = r.get("questions", {})
        summary = translated("; ".join(f"{question_label(k)} {v['points']:g} / {v['max_points']:g}"
                                       for k, v in q.items()))
        late = (f"<p>{escape(translated(_late_words(row)))}</p>" if row.penalty else "")
        points = translated(f"{_number(row.score)} / {_number(row.max_score)} points")
        graded = translated("Graded by the sandboxed grader of pipeline-kit: your answers ran in an isolated kernel "
                            "and every check ran in the grader's process. A check marked “hidden cases too” was also "
                            "run on cases you did not see, and its feedback describes what went wrong without "
                            "showing them.")
        body = (f"<h2>{escape(points)}</h2>{late}<p>{escape(summary)}</p>{table_html(r, lambda name: name in hidden)}"
                f"<p class=\"note\">{escape(graded)}</p>")
    elif row.status == NOT_GRADED:
        failed = translated(f"The grader's machine failed, not your notebook ({row.error}); it will be graded again.")
        body = f"<h2>{escape(translated('Not graded yet'))}</h2><p>{escape(failed)}</p>"
    elif row.status == MISSING:
        body = (f"<h2>{escape(translated('No submission'))}</h2>"
                f"<p>{escape(translated('Nothing was handed in for this assignment: it counts 0 points.'))}</p>")
    else:
        body = f"<h2>{escape(translated('Not graded'))}</h2><p>{escape(row.error)}</p>"
    if row.note:
        body += f"<p class=\"note\">{escape(row.note)}</p>"
    style = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#202124}"
             "table{border-collapse:collapse;width:100%}td,th{padding:4px 8px;border-bottom:1px solid #e0e0e0;"
             "vertical-align:top}tr.pk-group th{background:#f1f3f4}.note{color:#5f6368}")
    head = f"<p class=\"note\">{escape(course)}</p>" if course else ""
    return (f"<!DOCTYPE html>\n<html lang=\"{language.replace('_', '-')}\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{escape(title)}</h1>{head}{body}</body></html>\n")


def save(folder: Path, rows: list[Row], meta: dict, sources: Path | None = None, say=None) -> list[Row]:
    """Put ``rows`` into the gradebook ``folder`` and return all its rows: a row of the same student and lab
    replaces the old one, every other row stays (a regrade of one student, or one assignment, changes only its
    rows).  One writer at a time, and all-or-nothing (:mod:`.gradebook_store`): the old gradebook is whole until
    the new one is, whatever happens meanwhile."""
    from .gradebook_store import locked, replace
    with locked(folder, say):
        old_meta, old_rows = existing_rows(folder)
        merged = {(r.student, r.lab): r for r in old_rows}
        merged.update({(r.student, r.lab): r for r in rows})
        all_rows = list(merged.values())
        data = _merged_meta(old_meta, meta, len(rows))
        replace(folder, lambda new: write(new, all_rows, data, sources))
    return all_rows


def _late_words(row: Row) -> str:
    return (f"Handed in {row.timestamp or ''} UTC, late by {duration_text(row.late_seconds or 0)}: the course's "
            f"late-submission policy took off {_number(row.penalty)} of {_number(round(row.score + row.penalty, 2))} "
            "points.")


def _merged_meta(old: dict, new: dict, count: int) -> dict:
    """The gradebook's own fields after a run: the class lists and shared runs of every run together, and a line
    per run (when, how many rows, which seeds) in ``runs``."""
    run = {k: new[k] for k in ("created", "seeds", "shard", "seconds", "merged_from") if k in new}
    out = {**{k: v for k, v in old.items() if k not in ("format", "rows")}, **new}
    out["class"] = sorted({tuple(k) for k in [*old.get("class", []), *new.get("class", [])]})
    out["shared_runs"] = {**old.get("shared_runs", {}), **new.get("shared_runs", {})}
    out["created"] = old.get("created", new.get("created"))
    out["runs"] = [*old.get("runs", []), {**run, "rows": count}]
    return out


def write(folder: Path, rows: list[Row], meta: dict, sources: Path | None = None) -> None:
    """Write a whole gradebook into the new, empty ``folder``: the two files and
    ``feedback/<student>/<lab>.html`` for every row."""
    hidden = {lab: hidden_checks(lab, sources) for lab in {r.lab for r in rows if r.report}}
    data = {"format": FORMAT, **meta, "rows": [r.to_dict() for r in sorted(rows, key=lambda r: (r.student, r.lab))]}
    for r in rows:
        page = folder / "feedback" / safe_name(r.student) / f"{safe_name(r.lab)}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(_utf8(feedback_page(r, hidden.get(r.lab, set()))), encoding="utf-8")
    (folder / "grades.csv").write_text(_utf8(csv_text(rows)), encoding="utf-8")
    (folder / "grades.json").write_text(_utf8(json.dumps(data, indent=1, ensure_ascii=False) + "\n"),
                                        encoding="utf-8")


def _utf8(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (a student's string quoted in a check's feedback, decoded from
    the report's ``\\udcff``) becomes the six characters ``\\udcff``, never a failed write after the whole class
    was graded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# -- merging slices -------------------------------------------------------------------------------------------------

def _mapping(item, what: str):
    """A JSON object whose every value ``item`` accepts (errors name the key)."""
    def check(value, where: str):
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected an object of {what}, got {describe(value)}")
        return {k: item(v, f"{where}[{printable(repr(k))}]") for k, v in value.items()}
    return check


def _shape(table: dict[str, Field], ignore_unknown: bool = False):
    return lambda value, where: check_object(value, table, where, ignore_unknown)


def _pair(value, where: str):
    """A ``[student, lab]`` of the class list."""
    if not (isinstance(value, list) and len(value) == 2):
        raise InputError(f"{where}: expected [student, lab], got {describe(value)}")
    return tuple(text()(v, f"{where}[{k}]") for k, v in enumerate(value))


def _any_object(value, where: str):
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected an object, got {describe(value)}")
    return value


POINTS = {"points": Field(number(), True), "max_points": Field(number(), True)}
CHECK_FIELDS = {"name": Field(text(), True), **POINTS, "feedback": Field(text(), True)}
MANUAL_FIELDS = {"name": Field(text(), True), "max_points": Field(number(), True), "answered": Field(boolean),
                 "points": Field(nullable(number()))}
# one line per field :meth:`.batch.Row.to_dict` writes (``status`` and ``note`` are missing in a gradebook from
# before them; a row without ``checks`` has no report)
ROW_FIELDS = {
    "student": Field(text(), True), "lab": Field(text(), True), "notebook": Field(text(), True),
    "status": Field(text(GRADED, REFUSED, NOT_GRADED, MISSING)), "score": Field(nullable(number()), True),
    "max_score": Field(nullable(number()), True), "seed": Field(nullable(integer(0)), True),
    "seconds": Field(number(), True), "error": Field(text(), True), "note": Field(text(), default=""),
    "assignment": Field(nullable(text())), "notebook_id": Field(nullable(text())),
    "questions": Field(_mapping(_shape(POINTS), "{points, max_points}"), default={}),
    "checks": Field(array(_shape(CHECK_FIELDS), "checks")), "sandbox": Field(nullable(_any_object)),
    "shared_runs": Field(array(text(), "commands"), default=[]),
    "manual": Field(array(_shape(MANUAL_FIELDS), "manual cells"), default=[]),
    "timestamp": Field(nullable(text())), "late_seconds": Field(nullable(number())),
    "penalty": Field(nullable(number())),
    "language": Field(text(*LANGUAGES), default="en"),
}
# what a merge reads of a slice's grades.json besides its rows (other fields are the slice's own record)
SLICE_FIELDS = {
    "rows": Field(array(_any_object, "rows"), True),
    "shard": Field(nullable(_shape({"index": Field(integer(1), True), "of": Field(integer(1), True)}))),
    "class": Field(array(_pair, "[student, lab] pairs"), default=[]),
    "shared_runs": Field(_mapping(_shape({"what": Field(text(), True), "seconds": Field(number(), True),
                                          "error": Field(text(), True)}), "shared runs"), default={}),
}


def slice_rows(folder: str, data: dict) -> tuple[dict, list[Row]]:
    """A slice's ``grades.json`` checked against the gradebook's schema: (its fields a merge reads, its rows), or a
    one-line error naming the slice and the field.  Why every field: the merge renders each row into HTML, CSV and
    nbgrader-free JSON, so a slice someone edited (a seed of ``<script>``, a score of ``"20"``) must stop here."""
    where = f"{printable(folder)}/grades.json"
    try:
        top = check_object(data, SLICE_FIELDS, where, ignore_unknown=True)
        if top["shard"] and top["shard"]["index"] > top["shard"]["of"]:
            raise InputError(f"{where}: field 'shard': slice {top['shard']['index']} of {top['shard']['of']}")
        return top, [_row(d, f"{where}: field 'rows'[{i}]") for i, d in enumerate(top["rows"])]
    except (InputError, LimitError) as exc:
        raise UsageError(f"{exc} (a gradebook is read as this command wrote it: restore the file, or give another "
                         "folder; nothing was changed)") from None


def _row(d: dict, where: str) -> Row:
    """One row of a slice, checked (:data:`ROW_FIELDS`, and a status that agrees with the checks) and its names made
    printable text (a no-op for a row this command wrote)."""
    v = check_object(d, ROW_FIELDS, where)
    status = v["status"] or (GRADED if v["checks"] is not None else REFUSED)
    if status in (GRADED, REFUSED, NOT_GRADED) and (status == GRADED) != (v["checks"] is not None):
        raise InputError(f"{where}: field 'checks': a {status} row " + ("needs its checks" if status == GRADED else
                                                                        "has no checks"))
    if status == GRADED and (v["score"] is None or v["max_score"] is None):
        raise InputError(f"{where}: field 'score': a graded row has a score and a max_score, got null")
    report = None
    if v["checks"] is not None:  # (the report's own totals are its checks'; the row's add the manual cells)
        report = {k: v[k] for k in ("questions", "checks", "sandbox", "shared_runs", "manual", "language")}
        report.update(score=round(sum(c["points"] for c in v["checks"]), 2),
                      max_score=round(sum(c["max_points"] for c in v["checks"]), 2))
    shown = {k: None if v[k] is None else printable(v[k])
             for k in ("student", "lab", "notebook", "error", "note", "assignment", "notebook_id", "timestamp")}
    return Row(shown["student"], shown["lab"], shown["notebook"], v["seed"], v["seconds"], report, shown["error"],
               shown["assignment"], shown["notebook_id"], status, shown["note"], shown["timestamp"],
               v["late_seconds"], v["penalty"])


def merge(folders: list[str], out: str) -> tuple[dict, list[str]]:
    """One gradebook from the slices' gradebooks: (its data, the problems to report).  Every slice is checked
    whole before anything is made; refuses a student's lab graded in two slices; reports the slices and the
    class's notebooks no gradebook holds, and the notebooks not graded (the machine failed: rerun them)."""
    target = check_folder(out, "--out")
    books = []
    for f in folders:
        if Path(f).resolve() == target.resolve():
            raise UsageError(f"argument --out: {printable(out)} is also one of the gradebooks merged; give a new "
                             "folder")
        books.append((f, *slice_rows(f, read(Path(f)))))
    rows: dict[tuple[str, str], tuple[str, Row]] = {}
    for f, _, slice_ in books:
        for row in slice_:
            key = (row.student, row.lab)
            if key in rows:
                raise UsageError(f"{printable(f)}: {row.student} {row.lab} is also in {printable(rows[key][0])} "
                                 "(slices must not overlap: each is graded with a different --shard K/N)")
            rows[key] = (f, row)
    problems = []
    shards = {d["shard"]["of"] for _, d, _ in books if d["shard"]}
    if len(shards) > 1:
        raise UsageError(f"the gradebooks are slices of different splits ({', '.join(sorted(map(str, shards)))} "
                         "slices): merge the slices of one --shard K/N run")
    if shards:
        n = shards.pop()
        have = {d["shard"]["index"] for _, d, _ in books if d["shard"]}
        missing = sorted(set(range(1, n + 1)) - have)
        if missing:
            problems.append(f"missing slices: {', '.join(f'{k}/{n}' for k in missing)}")
    roster = {tuple(printable(n) for n in k) for _, d, _ in books for k in d["class"]}
    absent = sorted(roster - set(rows))
    if absent:
        problems.append(f"{len(absent)} notebook(s) of the class graded in no slice: " + _listed(absent))
    failed = sorted(k for k, (_, r) in rows.items() if r.status == NOT_GRADED)
    if failed:
        problems.append(f"{len(failed)} notebook(s) not graded (the machine failed, not the notebook): rerun them: "
                        + _listed(failed))
    merged = [r for _, r in rows.values()]
    meta = {"merged_from": [printable(str(f)) for f in folders], "class": sorted(roster), "shared_runs":
            {k: v for _, d, _ in books for k, v in d["shared_runs"].items()}}
    return {"folder": target, "rows": merged, "meta": meta}, problems


def _listed(keys: list[tuple[str, str]]) -> str:
    return ", ".join(f"{s} {lab}" for s, lab in keys[:10]) + (" ..." if len(keys) > 10 else "")
