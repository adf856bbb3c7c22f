"""A term with nbgrader (issue 35): a real course, real submissions through nbgrader's exchange, the kit's batch
into the course, late work, feedback handed back with nbgrader's own commands, a regrade of one student, a points
change, the report and the LMS exports -- and the ways a gradebook or a database can break.

One course serves the whole flow (module scope): its grades are the slow part (lab 2, ~4 s a notebook).
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbgrader_term as term
import pytest
from lab_grading import LABS, SOLUTIONS

from pipeline_kit.grading import gradebook, gradebook_store, nbgrader_db
from pipeline_kit.grading.batch import GRADED, MISSING, NOT_GRADED, Row

pytest.importorskip("nbgrader")

ROOT = Path(__file__).resolve().parents[1]
LAB2 = "lab02_timelines"
SECRET = "a course secret of thirty-two bytes!"
DUE = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=7)).replace(microsecond=0)


def _cli(*args, cwd=ROOT, timeout=600):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env, check=False)


def _run(*args, cwd=None):
    """``python -m pipeline_kit ARGS`` in this process, for a command that grades nothing (a new interpreter costs
    seconds of nbgrader's imports each): its exit status and output, as :func:`_cli` gives them."""
    import contextlib
    import io
    import types

    from pipeline_kit.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _rows(folder: Path) -> dict:
    return {(r["student"], r["lab"]): r for r in json.loads((folder / "grades.json").read_text())["rows"]}


@pytest.fixture(scope="module")
def term_course(tmp_path_factory):
    """alice hands in the model answers on time, bob the same two days late, carol the untouched lab, dave (a late
    joiner, in the database) nothing, and erin the Chinese lab (labs-zh) untouched: one class, two languages, one
    gradebook; then the kit grades the course into a gradebook."""
    root = tmp_path_factory.mktemp("term")
    course = term.make_course(root, "lab02", SOLUTIONS / f"{LAB2}.ipynb", DUE.strftime("%Y-%m-%d %H:%M:%S UTC"),
                              ["alice", "bob", "carol", "dave", "erin"])
    for who, nb in (("alice", SOLUTIONS / f"{LAB2}.ipynb"), ("bob", SOLUTIONS / f"{LAB2}.ipynb"), ("carol", None),
                    ("erin", ROOT / "labs-zh" / f"{LAB2}.ipynb")):
        term.submit(course, "lab02", who, nb)
    term.collect(course, "lab02")
    late = DUE + datetime.timedelta(days=2, hours=3)
    (course / "submitted" / "bob" / "lab02" / "timestamp.txt").write_text(late.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    (root / "secret").write_text(SECRET)
    book = root / "grades"
    proc = _cli("grade", "--nbgrader", course, "--assignment", "lab02", "--gradebook", book, "--course-secret",
                root / "secret", "--jobs", "2", cwd=root)
    return {"root": root, "course": course, "book": book, "proc": proc}


def test_a_term_graded_into_the_course(term_course):
    """Every student has a row (dave's: no submission), bob's late penalty is the course's policy's (``zero``), and
    nbgrader's own export shows the kit's scores, timestamps and penalties."""
    proc, book, course = term_course["proc"], term_course["book"], term_course["course"]
    assert proc.returncode == 0, proc.stderr
    rows = _rows(book)
    assert {k[0]: r["status"] for k, r in rows.items()} == {"alice": GRADED, "bob": GRADED, "carol": GRADED,
                                                              "dave": MISSING, "erin": GRADED}
    assert rows["alice", LAB2]["score"] == 20 and rows["alice", LAB2]["penalty"] is None
    assert rows["bob", LAB2]["late_seconds"] == pytest.approx(2 * 86400 + 3 * 3600)
    assert rows["bob", LAB2]["penalty"] == 20 and rows["bob", LAB2]["score"] == 0
    assert rows["dave", LAB2]["score"] == 0 and rows["dave", LAB2]["max_score"] == 20
    assert "late by 2 d 3 h, penalty 20" in proc.stdout and "1 without a submission" in proc.stdout
    exported = term.export(course)
    assert {s: (float(r["raw_score"]), float(r["late_submission_penalty"]), float(r["score"]))
            for s, r in exported.items()} == {"alice": (20, 0, 20), "bob": (20, 20, 0), "carol": (0, 0, 0),
                                              "dave": (0, 0, 0), "erin": (0, 0, 0)}
    # erin's Chinese lab: the English lab's cells and points, her feedback in her notebook's language
    assert rows["erin", LAB2]["max_score"] == 20
    assert all(re.search(r"[\u4e00-\u9fff]", c["feedback"]) for c in rows["erin", LAB2]["checks"])
    assert not any(re.search(r"[\u4e00-\u9fff]", c["feedback"]) for c in rows["carol", LAB2]["checks"])
    page = (course / "feedback" / "erin" / "lab02" / f"{LAB2}.html").read_text()  # her page, in her language
    assert '<html lang="zh-CN"' in page and "0 / 20 分" in page and "M042 主问题" in page and " points" not in page
    assert exported["bob"]["timestamp"].startswith((DUE + datetime.timedelta(days=2, hours=3)).strftime("%Y-%m-%d %H"))
    with open(book / "grades.csv", newline="") as fh:
        csv_rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert csv_rows["bob"]["score"] == "0" and csv_rows["dave"]["status"] == MISSING


def test_students_fetch_the_kits_feedback_with_nbgraders_commands(term_course):
    """The kit's page is where release_feedback takes it; nbgrader's release_feedback and fetch_feedback hand it
    back, and the page is the kit's (the sandboxed grade, no hidden case, no seed)."""
    course = term_course["course"]
    page = course / "feedback" / "alice" / "lab02" / f"{LAB2}.html"
    assert page.is_file() and (page.parent / "timestamp.txt").is_file()
    term.release_feedback(course, "lab02")
    fetched = term.fetch_feedback(course, "lab02", "alice")
    assert len(fetched) == 1 and fetched[0].name == f"{LAB2}.html"
    text = fetched[0].read_text()
    assert "20 / 20 points" in text and "sandboxed grader" in text and "seed" not in text.lower()
    late = (course / "feedback" / "bob" / "lab02" / f"{LAB2}.html").read_text()
    assert "late-submission policy took off 20" in late


def test_one_student_regraded_after_a_points_change(term_course, tmp_path):
    """The course raises a check's points and regenerates; a regrade of carol alone (with the model answer now)
    changes only carol's row, in the gradebook and in the database, and uses the course's points."""
    course, book, root = term_course["course"], term_course["book"], term_course["root"]
    src = course / "source" / "lab02" / f"{LAB2}.ipynb"
    nb = json.loads(src.read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("points") == 3)
    gid = cell["metadata"]["nbgrader"]["grade_id"]
    cell["metadata"]["nbgrader"]["points"] = 4
    src.write_text(json.dumps(nb, indent=1))
    term.generate(course, "lab02")
    shutil.copy(SOLUTIONS / f"{LAB2}.ipynb", course / "submitted" / "carol" / "lab02" / f"{LAB2}.ipynb")
    before = _rows(book)
    proc = _cli("grade", "--nbgrader", course, "--assignment", "lab02", "--student", "carol", "--gradebook", book,
                "--course-secret", root / "secret", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert f"points from the course: lab02 {gid} 3 -> 4" in proc.stderr
    after = _rows(book)
    assert after["carol", LAB2]["score"] == 21 and after["carol", LAB2]["max_score"] == 21
    assert {k: v for k, v in after.items() if k[0] != "carol"} == {k: v for k, v in before.items() if k[0] != "carol"}
    assert float(term.export(course)["carol"]["score"]) == 21


def test_a_course_that_disagrees_with_the_kit_stops_before_grading(term_course, tmp_path):
    course = term_course["course"]
    copy = tmp_path / "course"
    shutil.copytree(course, copy, ignore=shutil.ignore_patterns("feedback", "autograded"))
    src = copy / "source" / "lab02" / f"{LAB2}.ipynb"
    nb = json.loads(src.read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("points"))
    cell["metadata"]["nbgrader"]["grade_id"] = "renamed_check"
    src.write_text(json.dumps(nb))
    proc = _run("grade", "--nbgrader", copy, "--assignment", "lab02", cwd=tmp_path)
    assert proc.returncode == 2 and "renamed_check" in proc.stderr and "added" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "grading" not in proc.stderr


def test_report_and_exports_of_the_term(term_course, tmp_path):
    book = term_course["book"]
    proc = _run("gradebook", "report", book, "-o", tmp_path / "report.html")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "report.html").read_text()
    assert f'id="lab-{LAB2}"' in page and "<svg" in page
    for fmt in ("canvas", "moodle", "csv"):
        proc = _run("gradebook", "export", book, "--format", fmt, "-o", tmp_path / f"{fmt}.csv")
        assert proc.returncode == 0, proc.stderr
        with open(tmp_path / f"{fmt}.csv", newline="") as fh:
            assert any("bob" in ",".join(r) for r in csv.reader(fh))


# -- what can break ------------------------------------------------------------------------------------------------

def _row(student: str, score: float = 1.0) -> Row:
    report = {"score": score, "max_score": 2.0, "questions": {},
              "checks": [{"name": "m041_main_x", "points": score, "max_points": 2.0, "feedback": "f"}]}
    return Row(student, LAB2, f"{student}.ipynb", 1, 1.0, report)


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_regrade_keeps_the_other_rows_and_the_instructors_files(tmp_path):
    book = tmp_path / "book"
    gradebook.save(book, [_row("ann"), _row("ben")], {"class": [["ann", LAB2], ["ben", LAB2]]})
    (book / "notes.txt").write_text("mine")
    gradebook.save(book, [_row("ben", 2.0)], {"class": [["ben", LAB2]]})
    rows = _rows(book)
    assert rows["ann", LAB2]["score"] == 1 and rows["ben", LAB2]["score"] == 2
    assert (book / "notes.txt").read_text() == "mine"
    assert len(json.loads((book / "grades.json").read_text())["runs"]) == 2
    assert not list(tmp_path.glob(".book.*"))


def test_a_full_disk_leaves_the_old_gradebook_whole(tmp_path, capsys):
    """On a small tmpfs filled nearly to the top, a regrade cannot write: the command says so, the old gradebook
    is byte for byte what it was, no partial folder is left, and with room again the next run works."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        book = disk / "book"
        gradebook.save(book, [_row(f"s{i}") for i in range(20)], {})
        before = _tree(book)
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"x" * 1024):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        with pytest.raises(OSError):
            gradebook.save(book, [_row("late")], {})
        assert _tree(book) == before and not list(disk.glob(".book.*"))
        from pipeline_kit.cli import main  # the commands say so in one line, exit 2, and change nothing
        for argv in (["gradebook", "report", str(book), "-o", str(disk / "r.html")],
                     ["gradebook", "merge", str(book), "--out", str(disk / "merged")]):
            assert main(argv) in (1, 2)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all("No space left on device" in line for line in err), err
        assert _tree(book) == before and not (disk / "r.html").exists() and not (disk / "merged").exists()
        filler.unlink()
        gradebook.save(book, [_row("late")], {})
        assert ("late", LAB2) in _rows(book)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


WRITER = """
import sys, time
from pathlib import Path
from pipeline_kit.grading import gradebook, gradebook_store
from pipeline_kit.grading.batch import Row
from pipeline_kit.interrupts import interrupts_end_in_one_line
book = Path(sys.argv[1])
def slow(new):
    (new / "grades.json").write_text("half")
    print("writing", flush=True)
    time.sleep(60)
with interrupts_end_in_one_line("writer"):
    with gradebook_store.locked(book):
        gradebook_store.replace(book, slow)
"""


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_writer_killed_mid_write_leaves_the_old_gradebook(tmp_path, how):
    book = tmp_path / "book"
    gradebook.save(book, [_row("ann")], {})
    before = _tree(book)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(book)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(how)
    proc.wait(30)
    assert _tree(book) == before
    assert bool(list(tmp_path.glob(".book.writing-*"))) == (how == signal.SIGKILL)  # SIGTERM cleans up after itself
    gradebook.save(book, [_row("ben")], {})  # the next run works, and removes what the killed one left
    assert set(_rows(book)) == {("ann", LAB2), ("ben", LAB2)} and not list(tmp_path.glob(".book.*"))


def test_two_writers_keep_both_batches(tmp_path):
    """A second writer waits for the first (and says so), then adds its rows to the first's."""
    book = tmp_path / "book"
    gradebook.save(book, [_row("ann")], {})
    script = ("import sys; from pathlib import Path; from pipeline_kit.grading import gradebook; "
              "from pipeline_kit.grading.batch import Row; "
              "gradebook.save(Path(sys.argv[1]), [Row('cid', 'lab02_timelines', 'c', 1, 1.0, {'score': 1.0, "
              "'max_score': 2.0, 'questions': {}, 'checks': [{'name': 'm041_main_x', 'points': 1.0, 'max_points': "
              "2.0, 'feedback': 'f'}]})], {}, say=print)")
    with gradebook_store.locked(book):
        other = subprocess.Popen([sys.executable, "-c", script, str(book)], stdout=subprocess.PIPE, text=True,
                                 cwd=ROOT)
        assert other.stdout.readline().startswith("waiting for another command writing")
        rows = [*gradebook.existing_rows(book)[1], _row("ben")]
        gradebook_store.replace(book, lambda new: gradebook.write(new, rows, {}))
    assert other.wait(60) == 0
    assert set(_rows(book)) == {("ann", LAB2), ("ben", LAB2), ("cid", LAB2)}


DAMAGES = {
    "not JSON": "{", "a list": "[]", "no format": '{"rows": []}',
    "rows not a list": '{"format": "pipeline-kit gradebook 1", "rows": 3}',
    "a row without student": '{"format": "pipeline-kit gradebook 1", "rows": [{"lab": "x"}]}',
    "a score as text": None, "a graded row without checks": None, "an unknown status": None,
}


def _damaged(kind: str) -> str:
    if DAMAGES[kind] is not None:
        return DAMAGES[kind]
    row = _row("ann").to_dict()
    if kind == "a score as text":
        row["checks"][0]["points"] = "20"
    elif kind == "a graded row without checks":
        del row["checks"]
    else:
        row["status"] = "excellent"
    return json.dumps({"format": "pipeline-kit gradebook 1", "rows": [row]})


@pytest.mark.parametrize("kind", sorted(DAMAGES))
def test_a_damaged_gradebook_is_one_line_and_left_alone(tmp_path, kind):
    from pipeline_kit.argtypes import UsageError
    book = tmp_path / "book"
    book.mkdir()
    (book / "grades.json").write_text(_damaged(kind))
    with pytest.raises(UsageError) as err:
        gradebook.check_folder(str(book))
    assert "\n" not in str(err.value) and "grades.json" in str(err.value)
    with pytest.raises(UsageError):
        gradebook.save(book, [_row("ben")], {})
    assert (book / "grades.json").read_text() == _damaged(kind) and len(list(book.iterdir())) == 1


def test_a_damaged_gradebook_stops_the_commands(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    (book / "grades.json").write_text('{"format": "pipeline-kit gradebook 1", "rows": 3}')
    for args in (("grade", LABS / f"{LAB2}.ipynb", "--gradebook", book),
                 ("gradebook", "merge", book, "--out", tmp_path / "merged"),
                 ("gradebook", "report", book, "-o", tmp_path / "r.html")):
        proc = _run(*args, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "rows" in proc.stderr and "running cell" not in proc.stderr


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 10])
def test_a_bad_database_is_one_line_and_untouched(tmp_path, content):
    course = tmp_path / "course"
    (course / "submitted" / "ann" / "lab02").mkdir(parents=True)
    shutil.copy(LABS / f"{LAB2}.ipynb", course / "submitted" / "ann" / "lab02")
    (course / "gradebook.db").write_bytes(content)
    proc = _run("grade", "--nbgrader", course, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "gradebook.db" in proc.stderr and (course / "gradebook.db").read_bytes() == content


def test_a_locked_database_is_waited_for_then_reported(term_course, tmp_path, monkeypatch):
    """While another program holds the course's database locked, recording waits (bounded), then says so in one
    line; nothing is lost (the rows are in the gradebook) and `gradebook record` writes them later."""
    course, book = term_course["course"], term_course["book"]
    rows = gradebook.existing_rows(book)[1]
    monkeypatch.setattr(nbgrader_db, "LOCKED_WAIT_S", 1)
    holder = sqlite3.connect(course / "gradebook.db", timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        problems, written = nbgrader_db.record(nbgrader_db.database_url(str(course)), rows)
    finally:
        holder.rollback()
        holder.close()
    assert not written and len(problems) == 1 and "locked" in problems[0] and "gradebook record" in problems[0]
    proc = _run("gradebook", "record", book, "--nbgrader", course)
    assert proc.returncode == 0, proc.stderr
    assert "rows into" in proc.stdout
    assert {r.status for r in rows} == {GRADED, MISSING} and NOT_GRADED not in {r.status for r in rows}


def test_manual_points_add_up_in_the_database_and_the_gradebook(tmp_path):
    """Lab 10's interview sentence is scored in formgrader: the kit marks it as needing a grade (answered) and
    leaves it; once the instructor gives 1.5 of 2, the next record adds them in the row, the page and the export."""
    from nbgrader.api import Gradebook

    from pipeline_kit.grading import nbgrader_course
    from pipeline_kit.grading.notebook import read_notebook
    lab10 = "lab10_planning"
    course = term.make_course(tmp_path, "lab10", SOLUTIONS / f"{lab10}.ipynb", None, ["ann"])
    (course / "submitted" / "ann" / "lab10").mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{lab10}.ipynb", course / "submitted" / "ann" / "lab10")
    tests, manual = nbgrader_course.grade_cells(read_notebook(SOLUTIONS / f"{lab10}.ipynb"))
    assert manual == {"plan_follow_sentence": 2.0}
    report = {"score": sum(p for p, _ in tests.values()), "max_score": sum(p for p, _ in tests.values()),
              "questions": {}, "checks": [{"name": g, "points": p, "max_points": p, "feedback": ""}
                                          for g, (p, _) in tests.items()],
              "manual": [{"name": "plan_follow_sentence", "max_points": 2.0, "answered": True}]}
    row = Row("ann", lab10, str(course / "submitted" / "ann" / "lab10" / f"{lab10}.ipynb"), 1, 1.0, report,
              assignment="lab10", notebook_id=lab10)
    url = nbgrader_db.database_url(str(course))
    problems, written = nbgrader_db.write_course(str(course), url, [row], None)
    assert written and problems == ["ann lab10: no submission_secret.txt in its submission (not collected by "
                                    "`nbgrader collect`?): `nbgrader release_feedback` cannot hand it back"]
    assert (course / "autograded" / "ann" / "lab10" / f"{lab10}.ipynb").is_file()
    with Gradebook(url) as gb:
        grade = gb.find_grade("plan_follow_sentence", lab10, "lab10", "ann")
        assert grade.needs_manual_grade and grade.auto_score is None
        grade.manual_score = 1.5  # what formgrader does
        gb.db.commit()
    nbgrader_course.manual_scores(url, [row])
    assert row.score == report["score"] + 1.5 and row.max_score == report["max_score"] + 2
    nbgrader_db.record(url, [row])
    assert float(term.export(course)["ann"]["score"]) == row.score
    page = gradebook.feedback_page(row, set())
    assert "1.5 / 2" in page and f"{row.score:g} / {row.max_score:g} points" in page


def test_one_submitted_notebook_is_its_students(term_course):
    """A file of ``submitted/<student>/<assignment>/`` is the student's (never the assignment's folder name), and with
    --nbgrader it is that course submission, with its timestamp, alone."""
    from pipeline_kit.grading import classlist
    course = term_course["course"]
    nb = course / "submitted" / "bob" / "lab02" / f"{LAB2}.ipynb"
    assert [s.student for s in classlist.from_arguments([str(nb)])] == ["bob"]
    subs = classlist.from_nbgrader(str(course), None, None, [str(nb)])
    assert [(s.student, s.assignment) for s in subs] == [("bob", "lab02")] and subs[0].timestamp
    from pipeline_kit.argtypes import UsageError
    with pytest.raises(UsageError, match="one of the course's submissions"):
        classlist.from_nbgrader(str(course), None, None, [str(LABS / f"{LAB2}.ipynb")])


def test_slices_of_a_course_end_in_one_database(term_course, tmp_path):
    """--shard slices write nothing into the course; `gradebook merge ... --nbgrader COURSE` writes the whole
    class into its one database, and the exit status says the merge is whole."""
    course, book = term_course["course"], term_course["book"]
    data = json.loads((book / "grades.json").read_text())
    slices = []
    for k, keep in enumerate((lambda r: r["student"] < "c", lambda r: r["student"] >= "c"), 1):
        folder = tmp_path / f"slice{k}"
        folder.mkdir()
        part = {**data, "shard": {"index": k, "of": 2}, "rows": [r for r in data["rows"] if keep(r)]}
        (folder / "grades.json").write_text(json.dumps(part))
        slices.append(folder)
    with sqlite3.connect(course / "gradebook.db") as db:
        db.execute("UPDATE grade SET auto_score = NULL")
    proc = _run("gradebook", "merge", *slices, "--out", tmp_path / "merged", "--nbgrader", course)
    assert proc.returncode == 0, proc.stderr
    assert "rows into" in proc.stdout and set(_rows(tmp_path / "merged")) == set(_rows(book))
    exported = term.export(course)
    assert float(exported["alice"]["score"]) == _rows(book)["alice", LAB2]["score"]


def test_a_lone_surrogate_in_feedback_never_fails_the_write(tmp_path):
    """A student's string with a byte that is not UTF-8, quoted in a check's feedback, is written escaped: the
    gradebook is written after the whole class was graded, so it must never fail there."""
    row = _row("ann")
    row.report["checks"][0]["feedback"] = "got 'x\udcff'"
    gradebook.save(tmp_path / "book", [row], {})
    assert "x\\udcff" in (tmp_path / "book" / "grades.json").read_text()  # (JSON reads it back as it was)


def test_without_an_atomic_exchange_two_renames_do_it_and_a_crash_between_is_undone(tmp_path, monkeypatch):
    """A file system without renameat2's exchange: two renames swap the folders.  A writer that died between them
    left the gradebook missing and its old folder aside: the next run puts it back before anything else."""
    book = tmp_path / "book"
    gradebook.save(book, [_row("ann")], {})
    monkeypatch.setattr(gradebook_store.ctypes, "CDLL", lambda *a, **k: object())  # (no renameat2 there)
    gradebook.save(book, [_row("ben")], {})
    assert set(_rows(book)) == {("ann", LAB2), ("ben", LAB2)} and not list(tmp_path.glob(".book.*"))
    before = _tree(book)
    os.rename(book, tmp_path / ".book.old-999999999")  # (no such process: a writer that is gone)
    gradebook.save(book, [_row("cid")], {})
    assert set(_rows(book)) == {("ann", LAB2), ("ben", LAB2), ("cid", LAB2)}
    assert _tree(book)["feedback/ann/lab02_timelines.html"] == before["feedback/ann/lab02_timelines.html"]
