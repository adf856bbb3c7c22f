"""Grading a class (issue 23): many notebooks in one command, into a gradebook, nbgrader's database and slices.

Real gradings throughout (lab 2's take ~4 s, lab 3's ~15 s), real nbgrader commands on a real ``quickstart``
course, and the scores compared with single-notebook grades under the same seeds.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lab_grading import LABS, SOLUTIONS, with_answers

from pipeline_kit.grading import names
from pipeline_kit.grading.classlist import course_seed, shard_of
from pipeline_kit.grading.gradebook import _cell, safe_name
from pipeline_kit.grading.report import Report

ROOT = Path(__file__).resolve().parents[1]
LAB2, LAB3 = "lab02_timelines", "lab03_bubble"
SECRET = b"a course secret of thirty-two bytes!"


def _cli(*args, cwd=ROOT, timeout=600, text=True):
    """Run ``python -m pipeline_kit ARGS``; ``text=False`` keeps the output's bytes (no newline translation)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *map(str, args)], capture_output=True, text=text,
                          timeout=timeout, cwd=cwd, env=env, check=False)


def _class(tmp_path: Path) -> Path:
    """alice: the model answers of labs 2 and 3; bob: lab 2 untouched; carol: a file that is no notebook;
    erin (a notebook right in the class folder): lab 2 with a wrong answer."""
    cls = tmp_path / "class"
    for who in ("alice", "bob", "carol"):
        (cls / who).mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{LAB2}.ipynb", cls / "alice")
    shutil.copy(SOLUTIONS / f"{LAB3}.ipynb", cls / "alice")
    shutil.copy(LABS / f"{LAB2}.ipynb", cls / "bob")
    (cls / "carol" / f"{LAB2}.ipynb").write_text('{"cells": "not a list"}')
    wrong = with_answers(tmp_path, LAB2, {"peak_live": 'peak_live = {"gpipe": [8] * 4, "1f1b": [8] * 4}'},
                         name="erin-src")
    shutil.copy(wrong, cls / "erin.ipynb")
    return cls


def _rows(folder: Path) -> dict:
    return {(r["student"], r["lab"]): r for r in json.loads((folder / "grades.json").read_text())["rows"]}


def test_a_class_folder_into_a_gradebook(tmp_path):
    cls = _class(tmp_path)
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    book = tmp_path / "book"
    proc = _cli("grade", cls, "--gradebook", book, "--course-secret", secret, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    # one line per finished notebook, the shared run named, the summary table
    assert proc.stderr.count("] ") >= 5 and "shared runs of lab03_bubble" in proc.stderr
    assert "4 graded, 1 refused, 0 not graded" in proc.stdout and "shared runs of lab03_bubble" in proc.stdout
    rows = _rows(book)
    assert set(rows) == {("alice", LAB2), ("alice", LAB3), ("bob", LAB2), ("carol", LAB2), ("erin", LAB2)}
    assert rows["alice", LAB2]["score"] == rows["alice", LAB2]["max_score"] == 20
    assert rows["alice", LAB3]["score"] == rows["alice", LAB3]["max_score"]
    assert rows["bob", LAB2]["score"] == 0 and rows["bob", LAB2]["max_score"] == 20
    assert 0 < rows["erin", LAB2]["score"] < 20
    assert "not a readable notebook" in rows["carol", LAB2]["error"] and rows["carol", LAB2]["max_score"] is None
    # seeds from the secret, the student and the lab
    for (student, lab), row in rows.items():
        if not row["error"]:
            assert row["seed"] == course_seed(SECRET, student, lab)
    # lab 3's traced run was made once and replayed by its grade
    assert any("--trace" in run for run in rows["alice", LAB3]["shared_runs"])
    # grades.csv: the contract's columns, per-question subtotals
    with open(book / "grades.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    header = list(table[0])
    assert header[:4] == ["student", "lab", "score", "max_score"]
    assert header[-5:] == ["seed", "seconds", "status", "error", "note"]
    assert {"m042_main", "m042_follow", "m044_main"} <= set(header[4:-5])
    alice2 = next(r for r in table if r["student"] == "alice" and r["lab"] == LAB2)
    assert alice2["m042_main"] == "10" and alice2["m044_main"] == ""
    erin = next(r for r in table if r["student"] == "erin")
    assert float(erin["m042_main"]) < 10 and erin["m042_follow"] == "5"
    # feedback pages: grouped by question, the feedback text, no hidden test's source
    page = (book / "feedback" / "erin" / f"{LAB2}.html").read_text()
    assert "M042 · main question" in page and "hidden cases too" in page
    erin_row = rows["erin", LAB2]
    failed = [c for c in erin_row["checks"] if c["points"] < c["max_points"]]
    assert failed and all(c["name"] in page for c in failed)
    canonical = json.loads((SOLUTIONS / f"{LAB2}.ipynb").read_text())
    for cell in canonical["cells"]:
        source = "".join(cell["source"])
        hidden = source[len(names.visible_part(source)):]
        for line in (ln.strip() for ln in hidden.splitlines()):
            if len(line) > 30:
                assert line not in page, line
    assert (book / "feedback" / "carol" / f"{LAB2}.html").read_text().count("not a readable notebook") == 1
    # the same grade as one notebook's, with its seed
    single = _cli("grade", cls / "erin.ipynb", "--json", "--seed", erin_row["seed"])
    assert single.returncode == 0, single.stderr
    alone = json.loads(single.stdout)
    assert alone["checks"] == erin_row["checks"] and alone["questions"] == erin_row["questions"]
    # a regrade repeats: the same seeds and scores, into the gradebook this command wrote
    again = _cli("grade", cls / "alice" / f"{LAB2}.ipynb", cls / "bob" / f"{LAB2}.ipynb", "--gradebook", book,
                 "--course-secret", secret)
    assert again.returncode == 0, again.stderr
    regraded = _rows(book)
    for key in (("alice", LAB2), ("bob", LAB2)):
        assert regraded[key]["seed"] == rows[key]["seed"] and regraded[key]["checks"] == rows[key]["checks"]


def test_slices_merge_into_the_whole_class(tmp_path):
    cls = tmp_path / "class"
    for who in ("ann", "ben", "cat", "dan", "eve"):
        (cls / who).mkdir(parents=True)
        shutil.copy((SOLUTIONS if who in ("ann", "dan") else LABS) / f"{LAB2}.ipynb", cls / who)
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    slices = []
    for k in (1, 2):
        slices.append(tmp_path / f"slice{k}")
        proc = _cli("grade", cls, "--shard", f"{k}/2", "--gradebook", slices[-1], "--course-secret", secret)
        assert proc.returncode == 0, proc.stderr
    graded = [set(_rows(s)) for s in slices]
    assert not graded[0] & graded[1] and len(graded[0] | graded[1]) == 5
    merged = tmp_path / "merged"
    proc = _cli("gradebook", "merge", *slices, "--out", merged)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(merged)
    assert len(rows) == 5 and all(rows[who, LAB2]["score"] == 20 for who in ("ann", "dan"))
    assert len(list((merged / "feedback").iterdir())) == 5
    # overlapping slices are refused, a missing slice and its students reported
    twice = _cli("gradebook", "merge", slices[0], slices[0], "--out", tmp_path / "twice")
    assert twice.returncode == 2 and "slices must not overlap" in twice.stderr
    half = _cli("gradebook", "merge", slices[0], "--out", tmp_path / "half")
    assert half.returncode == 1 and "missing slices: 2/2" in half.stderr
    assert f"{len(graded[1])} notebook(s) of the class graded in no slice" in half.stderr


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40, unique=True), st.integers(1, 9))
def test_every_notebook_is_in_exactly_one_slice(students, n):
    keys = [(s, lab) for s in students for lab in (LAB2, LAB3)]
    slices = {key: shard_of(key, n) for key in keys}
    assert all(1 <= k <= n for k in slices.values())
    assert slices == {key: shard_of(key, n) for key in reversed(keys)}  # depends on nothing but the key


def test_course_seeds_are_fixed_per_student_and_lab_and_secret():
    seed = course_seed(SECRET, "alice", LAB2)
    assert seed == course_seed(SECRET, "alice", LAB2) and 0 <= seed < 2**31
    assert len({seed, course_seed(SECRET, "bob", LAB2), course_seed(SECRET, "alice", LAB3),
                course_seed(SECRET + b"!", "alice", LAB2)}) == 4


def test_refusals_come_before_any_grade(tmp_path):
    cls = tmp_path / "class"
    (cls / "alice").mkdir(parents=True)
    shutil.copy(LABS / f"{LAB2}.ipynb", cls / "alice")
    short = tmp_path / "short"
    short.write_text("abc")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my notes")
    one = cls / "alice" / f"{LAB2}.ipynb"
    cases = [
        (("grade", one, "--gradebook", foreign), "holds files this command did not write (notes.txt)"),
        (("grade", one, "--shard", "3/2"), "expected K/N with 1 <= K <= N"),
        (("grade", one, "--jobs", "0"), "expected 1 to 64 grades at a time"),
        (("grade", one, "--course-secret", short), "holds 3 bytes; use at least 16"),
        (("grade", one, "--course-secret", short, "--seed", "1"), "not allowed with --course-secret"),
        (("grade", one, "--assignment", "x"), "only with --nbgrader"),
        (("grade", "--nbgrader", tmp_path), "has no submitted/ folder"),
        (("grade", tmp_path / "mine"), "holds no .ipynb notebook"),
        (("grade",), "NOTEBOOK (or --nbgrader COURSE_DIR)"),
    ]
    for args, message in cases:
        proc = _cli(*args)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert (foreign / "notes.txt").read_text() == "my notes" and sorted(p.name for p in foreign.iterdir()) == [
        "notes.txt"]


def test_texts_for_people():
    report = Report("n.ipynb")
    report.add("m041_main_a", 2, True, "passed")
    report.add("m041_main_b", 3, 0.5, "half")
    report.add("m041_follow_c", 5, False, "no")
    assert report.questions() == {"m041_main": {"points": 3.5, "max_points": 5},
                                  "m041_follow": {"points": 0, "max_points": 5}}
    assert "by question: M041 main 3.5 / 5, M041 follow-up 0 / 5" in report.text()
    assert _cell("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")" and _cell("alice") == "alice"
    # a feedback page per student, whatever the script of the name; never a hidden or shared file name
    assert safe_name("张三") == "张三" and safe_name("alice") == "alice"
    assert len({safe_name(n) for n in ("a b", "a_b", "a/b", "a?b")}) == 4
    assert not safe_name(".hidden").startswith(".")


needs_nbgrader = pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None, reason="nbgrader is not installed")


def _nbgrader_course(tmp_path: Path, students: dict) -> Path:
    """A real course (:mod:`nbgrader_term`): lab 2's solution as the source of assignment ``lab02``, generated and
    released, and a submission per student (``{name: notebook}``; the value ``"released"`` is the released, untouched
    lab) put straight into ``submitted/`` (test_nbgrader_term.py hands them in through nbgrader's exchange)."""
    import nbgrader_term
    course = nbgrader_term.make_course(tmp_path, "lab02", SOLUTIONS / f"{LAB2}.ipynb", None, list(students))
    released = course / "release" / "lab02" / f"{LAB2}.ipynb"
    for who, source in students.items():
        (course / "submitted" / who / "lab02").mkdir(parents=True)
        shutil.copy(released if source == "released" else source, course / "submitted" / who / "lab02")
    return course


def test_nothing_is_shared_while_the_sandbox_is_off(tmp_path):
    """Unisolated, a student's code could write the shared folder: the batch shares nothing and says so."""
    cls = tmp_path / "class"
    for who in ("ann", "ben"):
        (cls / who).mkdir(parents=True)
        shutil.copy(SOLUTIONS / f"{LAB2}.ipynb", cls / who)
    env = {**os.environ, "PIPELINE_KIT_SANDBOX": "off"}
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", "grade", str(cls), "--json"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "nothing shared: the sandbox is off" in out["shared_runs"][""]["what"]
    assert all(r["score"] == 20 and r["sandbox"]["isolated"] is False and r["shared_runs"] == []
               for r in out["rows"])


def test_an_interrupted_batch_leaves_nothing_running(tmp_path):
    """Ctrl-C in the middle of a class: one line, exit 130, every grade's sandbox ended, the batch's folder gone."""
    from lab_grading import sandbox_processes
    cls = tmp_path / "class"
    for who in ("ann", "ben", "cat"):
        (cls / who).mkdir(parents=True)
        shutil.copy(SOLUTIONS / "lab05_p2p.ipynb", cls / who)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_kit", "grade", str(cls), "--gradebook",
                             str(tmp_path / "book")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(tmp.glob("pipeline-kit-class-*/shared-runs/*.json")):
        time.sleep(0.2)  # (the first shared run is recorded: grades and the warm-up are under way)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "python -m pipeline_kit: interrupted" and "Traceback" not in err
    assert sandbox_processes() == []
    # the batch's folder and every grade's are gone (torch's own caches in TMPDIR are torch's business)
    assert [p.name for p in tmp.iterdir() if p.name.startswith("pipeline-kit-")] == []
    assert not (tmp_path / "book").exists()
