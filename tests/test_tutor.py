"""The notebook as a tutor: each lab check cell shows ✓ or ✗ with its rubric point and points, without the kit's
frames, and still fails as a cell where it fails -- in a real IPython shell, in a real kernel as nbgrader runs one
(nbclient, then nbgrader's own scoring of the outputs) and under nbval.

The verdicts are the grader's: the same statements run by the same partial-credit runner, so a cell with three
checks of which one fails shows the points the grade gives it."""

import json
import re
import time
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("IPython")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from pipeline_kit.grading import names, parts, self_grade, tutor  # noqa: E402
from pipeline_kit.grading.notebook import cell_kind, nbgrader_meta  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAB2 = ROOT / "labs" / "lab02_timelines.ipynb"


def _cells(path: Path) -> dict[str, str]:
    """grade_id -> source of a lab notebook's cells."""
    nb = json.loads(path.read_text())
    return {nbgrader_meta(c).get("grade_id", ""): "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"}


def _answer(grade_id: str) -> str:
    """The model answer cell of lab 2 (what a student who got it right wrote)."""
    return _cells(ROOT / "solutions" / "lab02_timelines.ipynb")[grade_id]


LAB = _cells(LAB2)
LAB1 = _cells(ROOT / "labs" / "lab01_schedule_selection.ipynb")
WRONG_1F1B = "one_f_one_b_grid = gpipe_grid  # the GPipe drawing, a typical mix-up"


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    assert tutor.register(sh)
    yield sh
    sh.reset(new_session=True)


def run(sh, source: str):
    with capture_output() as out:
        result = sh.run_cell(source, store_history=True)
    shown = [o.data.get("text/plain", "") for o in out.outputs]
    return result, re.sub(r"\x1b\[[0-9;]*m", "", out.stdout), shown


def test_every_check_cell_of_every_lab_is_recognised():
    """Every test cell of every lab, as the student sees it, maps to its own grade_id and points."""
    for path in sorted((ROOT / "labs").glob("lab*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell_kind({**cell, "source": "".join(cell["source"])}) != "test":
                continue
            meta = nbgrader_meta(cell)
            found = tutor.check_cell_for("".join(cell["source"]))
            assert found is not None, (path.name, meta["grade_id"])
            assert (found.lab, found.grade_id, found.points) == (path.stem, meta["grade_id"], meta["points"])
            assert found.hidden is not None
    assert tutor.check_cell_for("lab02.check_1f1b_order(something_else)") is None
    assert tutor.check_cell_for("") is None


def test_a_right_answer_shows_a_tick_with_its_points(shell):
    run(shell, LAB["given_1"])
    run(shell, _answer("gpipe_grid"))
    result, stdout, shown = run(shell, LAB["m042_main_gpipe_order"])
    assert result.success
    assert shown == ["✓ m042_main_gpipe_order — 1 / 1 point\n  the same cases as the grade"]
    html = tutor.Verdict(tutor.check_cell_for(LAB["m042_main_gpipe_order"]), 1, "x")._repr_html_()
    assert "✓ m042_main_gpipe_order — 1 / 1 point" in html


def test_a_wrong_answer_shows_a_cross_its_points_and_the_feedback_without_the_kits_frames(shell):
    run(shell, LAB["given_1"])
    run(shell, _answer("gpipe_grid"))
    run(shell, WRONG_1F1B)
    run(shell, LAB["m042_main_gpipe_order"])
    result, stdout, shown = run(shell, LAB["m042_main_1f1b_order"])
    assert not result.success and isinstance(result.error_in_exec, tutor.CheckFailed)
    assert "✗ m042_main_1f1b_order — 0 / 2 points" in stdout
    assert "one_f_one_b_grid runs the GPipe order" in stdout
    assert "Traceback" not in stdout and "pipeline_kit" not in stdout and "File " not in stdout
    assert "%tb" in stdout
    # the whole traceback is one command away: the check's own failure is chained to the cell's
    assert type(sys.last_value).__name__ == "CheckFailed"
    assert type(sys.last_value.__cause__).__name__ == "LabCheckFailed"


def test_an_unanswered_cell_says_which_name_is_missing(shell):
    run(shell, LAB["given_1"])
    result, stdout, _ = run(shell, LAB["m042_main_gpipe_order"])
    assert "✗ m042_main_gpipe_order — 0 / 1 point" in stdout
    assert "gpipe_grid is not defined yet: run the cell above that sets it" in stdout


def test_an_exception_in_the_students_function_keeps_the_students_frames(shell):
    run(shell, LAB["given_1"] + "\nfrom pipeline_kit.course.labs import lab02")
    run(shell, "def rank_idle(pp, microbatches, f, b):\n    slack = (pp - 1) * (f + b)\n    return slack / 0\n")
    result, stdout, _ = run(shell, LAB["m042_follow_formula"])
    assert not result.success
    assert "✗ m042_follow_formula — 0 / 1 point" in stdout
    assert "raised in your code" in stdout and "ZeroDivisionError" in stdout
    assert "return slack / 0" in stdout            # the student's line, with IPython's own formatting
    assert "pipeline_kit/grading" not in stdout    # and not the check's frames that called it


def test_partial_points_are_the_graders(shell):
    """A cell whose checks pass in part shows the share the grader's partial-credit runner gives it."""
    source = LAB["m042_follow_slow_stage"]
    run(shell, LAB["given_1"] + "\nfrom pipeline_kit.course.labs import lab02")
    run(shell, _answer("follow_up"))
    run(shell, "slow_idle = [0, 0, 0, 0]")  # the beat right, the idle wrong
    ns = dict(shell.user_ns)
    want = parts.run_test_cell(source, ns).earned * tutor.check_cell_for(source).points
    assert 0 < want < 2
    result, stdout, _ = run(shell, source)
    assert not result.success
    assert f"✗ m042_follow_slow_stage — {round(want, 2):g} / 2 points" in stdout


def test_other_cells_run_as_written(shell):
    result, stdout, shown = run(shell, "x = 41\nx + 1")
    assert result.success and result.result == 42 and "✓" not in stdout


def _lab2_notebook(tmp_path: Path, wrong: bool) -> Path:
    """Lab 2 up to its first three check cells, answered by a student (right, or with the 1F1B drawing wrong)."""
    nb = nbformat.read(LAB2, as_version=4)
    keep = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if gid == "gpipe_grid":
            cell.source = _answer("gpipe_grid")
        elif gid == "one_f_one_b_grid":
            cell.source = WRONG_1F1B if wrong else _answer("one_f_one_b_grid")
        keep.append(cell)
        if gid == "m043_follow_dependencies":
            break
    keep[1].source = "from pipeline_kit.grading import tutor\n" + keep[1].source  # (until the lab's own import)
    nb.cells = keep
    path = tmp_path / "lab02_timelines.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("wrong", [False, True], ids=["right", "wrong"])
def test_nbgrader_still_scores_a_failing_check_cell_zero(tmp_path, wrong):
    """nbgrader's autograde executes the notebook with nbclient and scores each check cell from its outputs: a
    failed check must still be an error output there (0 points), a passed one no error (full points)."""
    from nbclient import NotebookClient
    from nbgrader.utils import determine_grade

    nb = nbformat.read(_lab2_notebook(tmp_path, wrong), as_version=4)
    NotebookClient(nb, timeout=120, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}).execute()
    scores = {c.metadata.nbgrader["grade_id"]: determine_grade(c)[0] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert scores == {"m042_main_gpipe_order": 1, "m042_main_1f1b_order": 0 if wrong else 2,
                      "m043_follow_dependencies": 2}
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "m042_main_1f1b_order")
    if wrong:
        [error] = [o for o in cell.outputs if o.output_type == "error"]
        assert error.ename == "CheckFailed"
        assert "✗ m042_main_1f1b_order — 0 / 2 points" in error.traceback[0]
        assert not any("pipeline_kit" in line for line in error.traceback)
    else:
        assert [o.data["text/plain"].splitlines()[0] for o in cell.outputs] == [
            "✓ m042_main_1f1b_order — 2 / 2 points"]


@pytest.mark.slow
def test_nbval_still_fails_on_a_failing_check_cell(tmp_path):
    """nbval runs each cell in a real kernel: a failed check is a failed cell, a passed one (run in lax mode, so
    outputs are not compared) passes."""
    for wrong, code in ((False, 0), (True, 1)):
        folder = tmp_path / ("wrong" if wrong else "right")
        folder.mkdir()
        path = _lab2_notebook(folder, wrong)
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                              "-o", "addopts=", str(path)], capture_output=True, text=True, cwd=folder, timeout=300)
        assert out.returncode == code, out.stdout[-3000:]
        if wrong:
            assert "m042_main_1f1b_order" in out.stdout and "0 / 2 points" in out.stdout


def test_the_visible_part_is_what_the_students_lab_holds():
    """The index keys on what nbgrader leaves of a test cell; the canonical cells' visible parts give the same."""
    canonical = _cells(ROOT / "solutions" / "lab02_timelines.ipynb")
    for gid, source in LAB.items():
        if gid.startswith(("m04", "zbv")):
            assert tutor.check_cell_for(names.visible_part(canonical[gid])) == tutor.check_cell_for(source)


def test_grade_me_grades_the_saved_file_and_changes_nothing(shell, tmp_path):
    """``grade_me(path)`` in a shell: the real grader's report on the file as saved, grouped by question; the file
    and its folder are as they were (the untouched lab scores 0, every check listed with its points)."""
    path = tmp_path / LAB2.name
    path.write_bytes(LAB2.read_bytes())
    before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(tmp_path.iterdir()))
    run(shell, "from pipeline_kit.grading.tutor import grade_me")
    run(shell, "x = 1  # a cell the saved file does not hold")
    result, stdout, shown = run(shell, f"grade_me({str(path)!r})")
    assert result.success, stdout
    graded = tutor.last_self_grade
    assert graded.report["score"] == 0 and graded.report["max_score"] == 20
    assert len(graded.report["checks"]) == 13
    text = shown[-1]
    assert text.startswith("WARNING: Not what you see: this grades the saved file, and what you ran in 2 cells ")
    assert "\nself-grade: 0 / 20 points\nM042 · main question: 0 / 10 points\n" in text
    assert "M042 · follow-up: 0 / 5 points" in text and "M043 · follow-up: 0 / 5 points" in text
    assert "m042_follow_formula — 0 / 1 point (hidden cases too)" in text
    assert f"Graded {LAB2.name} as saved at" in text
    assert "Save (Ctrl+S), then run grade_me() again." in text
    html = graded._repr_html_()
    assert html.count('<tr class="pk-check">') == 13 and html.count('<tr class="pk-group">') == 3
    assert (path.read_bytes(), path.stat().st_mtime_ns, sorted(tmp_path.iterdir())) == before


def test_grade_me_without_a_file_says_how_to_name_one(shell, monkeypatch, tmp_path):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    run(shell, "from pipeline_kit.grading.tutor import grade_me")
    result, stdout, shown = run(shell, "grade_me()")
    assert result.success and tutor.last_self_grade is None
    assert shown == [self_grade.NO_FILE] and 'grade_me("path/to/this_lab.ipynb")' in shown[0]
    result, stdout, shown = run(shell, "grade_me('no_such_lab.ipynb')")
    assert result.success and shown[0].startswith("grade_me: no notebook at no_such_lab.ipynb")
    # a path that is named is taken as it is: not a file of the same name elsewhere
    (tmp_path / LAB2.name).write_bytes(LAB2.read_bytes())
    result, stdout, shown = run(shell, f"grade_me('elsewhere/{LAB2.name}')")
    assert result.success and tutor.last_self_grade is None
    assert shown[0].startswith(f"grade_me: no notebook at elsewhere/{LAB2.name}")
    # bad arguments: one line each, naming what was expected
    for call, message in (("grade_me(3)", "grade_me: the notebook must be the path of a saved .ipynb, got int 3"),
                          (f"grade_me({LAB2.name!r}, seed='x')",
                           "grade_me: seed must be a whole number >= 0 (or None for a fresh one), got str 'x'"),
                          (f"grade_me({LAB2.name!r}, seed=-1)",
                           "grade_me: seed must be a whole number >= 0 (or None for a fresh one), got int -1")):
        result, stdout, shown = run(shell, call)
        assert result.success and shown == [message] and tutor.last_self_grade is None


def test_grade_me_with_a_bad_path_says_what_is_wrong_in_one_sentence(shell, monkeypatch, tmp_path):
    """Whatever path a student types -- another user's ``~``, a file that is not there, a folder, a file that is not
    a notebook, a name the file system refuses -- the cell shows one sentence naming it, never a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / LAB2.name).write_bytes(LAB2.read_bytes())
    (tmp_path / "notes.txt").write_text("my notes")
    (tmp_path / "broken.ipynb").write_text("{")
    long_name = "a" * 300 + ".ipynb"
    run(shell, "from pipeline_kit.grading.tutor import grade_me")
    for call, message in (
            ("grade_me('~nosuchuser-pk/lab02_timelines.ipynb')",
             "grade_me: ~nosuchuser-pk/lab02_timelines.ipynb starts with ~nosuchuser-pk, but this computer has no "
             "user 'nosuchuser-pk': give the notebook's path without it, e.g. grade_me('lab02_timelines.ipynb') for "
             "a notebook in this one's folder"),
            ("import pathlib; grade_me(pathlib.Path('~nosuchuser-pk'))",
             "grade_me: ~nosuchuser-pk starts with ~nosuchuser-pk, but this computer has no user 'nosuchuser-pk': "
             "give the notebook's path without it"),
            ("grade_me('lab02.ipynb')",
             f"grade_me: no notebook at lab02.ipynb ({tmp_path / 'lab02.ipynb'}): there is no such file; check its "
             "name, and that it is saved"),
            ("grade_me('notes.txt/lab02.ipynb')",
             f"grade_me: no notebook at notes.txt/lab02.ipynb ({tmp_path / 'notes.txt/lab02.ipynb'}): there is no "
             "such file; check its name, and that it is saved"),
            ("grade_me('labs')",
             f"grade_me: labs is a folder, not a notebook: name the lab's .ipynb file in it, e.g. "
             f"grade_me('labs/{LAB2.name}')"),
            ("grade_me('notes.txt')", "grade_me: notes.txt is not a notebook: name the lab's saved .ipynb file"),
            ("grade_me('/dev/null')", "grade_me: /dev/null is not a notebook: name the lab's saved .ipynb file"),
            (f"grade_me({long_name!r})",
             f"grade_me: cannot read {long_name[:100]!r}... (306 characters): File name too long"),
            ("grade_me('lab\\0.ipynb')", "grade_me: 'lab\\x00.ipynb' is not a file name"),
            ("grade_me('broken.ipynb')",
             f"{tmp_path / 'broken.ipynb'}: not a readable notebook (its JSON: not valid JSON: Expecting property "
             "name enclosed in double quotes at line 1, column 2)")):
        result, stdout, shown = run(shell, call)
        assert result.success and "Traceback" not in stdout, (call, stdout)
        assert shown == [message] and tutor.last_self_grade is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.ipynb", "labs", "notes.txt"]


def test_the_grade_command_reports_progress_a_line_per_cell(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pipeline_kit", "grade", str(LAB2), "--json", "--progress"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cells = len(json.loads(LAB2.read_text())["cells"])
    lines = [line for line in out.stderr.splitlines() if line.startswith("running cell ")]
    assert lines[0] == f"running cell 2/{cells}" and lines[-1].endswith(f"/{cells}") and len(lines) > 10
    assert json.loads(out.stdout)["lab"] == "lab02_timelines"


def test_a_manual_cell_shows_as_graded_by_the_instructor_never_a_cross():
    """grade_me()'s table (and the feedback pages', the same rendering) lists a manually graded cell in its question
    with its points possible and whether it is answered: no ✗, no 0, outside the automatic subtotal; once the
    instructor has scored it (a feedback page's report), with those points."""
    from pipeline_kit.grading import rubric_table

    checks = [{"name": "plan_follow_rule", "points": 2, "max_points": 2, "feedback": "passed"},
              {"name": "plan_follow_factor", "points": 0, "max_points": 2, "feedback": "not answered yet"}]
    for answered in (True, False):
        report = {"lab": "lab10_planning", "score": 2, "max_score": 4, "checks": checks,
                  "manual": [{"name": "plan_follow_sentence", "max_points": 2, "answered": answered}]}
        shown = self_grade.SelfGrade(report, "lab10_planning.ipynb as saved", [], lambda name: False)
        text, html = repr(shown), shown._repr_html_()
        state = "answered" if answered else "not answered yet"
        assert text.startswith("self-grade: 2 / 4 points\nplanning a pipeline (beyond the bank) · follow-up: "
                               "2 / 4 points + 2 graded by your instructor\n")
        assert f"  ✎ plan_follow_sentence — 2 points possible, graded by your instructor ({state})\n" in text
        assert "plan_follow_sentence — 0" not in text and "✗ plan_follow_sentence" not in text
        assert "2 more points (plan_follow_sentence) are graded by your instructor" in text
        [row] = re.findall(r'<tr class="pk-manual">.*?</tr>', html)
        assert "✗" not in row and "plan_follow_sentence" in row and "— / 2" in row and f"({state})" in row
        assert html.count('<tr class="pk-check">') == 2 and html.count('<tr class="pk-group">') == 1
    scored = {**report, "manual": [{"name": "plan_follow_sentence", "max_points": 2, "answered": True, "points": 1.5}]}
    html = rubric_table.table_html(scored, lambda name: False)
    assert "1.5 / 2" in html and "2 / 4 points + 1.5 / 2 graded by your instructor" in html
    assert "  ✎ plan_follow_sentence — 1.5 / 2 points, graded by your instructor" in rubric_table.table_text(
        scored, lambda name: False)


def test_unsaved_cells_are_named_by_what_the_student_sees():
    """With the cell ids JupyterLab sends, each cell whose last run differs from the saved file is named: an answer
    by its grade_id, another by its place, a cell the file lacks as new; a cell run as saved is not."""
    nb = {"cells": [{"cell_type": "markdown", "id": "m", "source": "# lab"},
                    {"cell_type": "code", "id": "a", "source": "x = 1", "metadata": {"nbgrader": {"grade_id": "peak"}}},
                    {"cell_type": "code", "id": "b", "source": "y = 2", "metadata": {}},
                    {"cell_type": "code", "id": "c", "source": "z = 3", "metadata": {}}]}
    ran = {"a": "x = 2", "b": "y = 2\n", "c": "z = 4  # tried", "new": "print('hello')"}
    assert self_grade.unsaved_cells(nb, [], ran) == ["'peak'", "cell 4 (z = 4  # tried)", "a new cell (print('hello'))"]
    assert self_grade.unsaved_cells(nb, [], {"b": "y = 2"}) == []
    shown = self_grade.SelfGrade({"score": 0, "max_score": 1, "checks": []}, "x.ipynb", ["'peak'"], lambda n: False)
    assert "pk-unsaved" in shown._repr_html_() and "'peak'" in shown.warning


def test_a_hung_answer_ends_its_check_cell_with_a_verdict(shell, monkeypatch):
    """Issue 36: an infinite loop in lab 1's answer does not hang the visible check cell: it ends at the limit (the
    grade's own, shortened here) with a ✗ naming the limit and the student's running line, and no kit frame."""
    monkeypatch.setattr(tutor, "LIMIT_S", 1.0)
    run(shell, "from pipeline_kit.course.labs import lab01")
    run(shell, "def choose_schedule(pp, vpp=None):\n    while True:\n        pp += 1")
    start = time.monotonic()
    result, stdout, _ = run(shell, LAB1["m041_main_selection"])
    assert time.monotonic() - start < 10 and not result.success
    assert "✗ m041_main_selection — 0 / " in stdout
    flat = " ".join(stdout.split())
    assert "your code did not finish in 1 s" in flat and "of your code (in choose_schedule), `" in flat
    assert "pipeline_kit/" not in stdout and "Traceback" not in stdout


def test_an_interrupted_check_cell_shows_a_verdict(shell):
    """The stop button (KeyboardInterrupt) during a check: a ✗ verdict saying so, never the kit's frames."""
    run(shell, "from pipeline_kit.course.labs import lab01")
    run(shell, "def choose_schedule(pp, vpp=None):\n    raise KeyboardInterrupt")
    result, stdout, _ = run(shell, LAB1["m041_main_selection"])
    assert not result.success and "✗ m041_main_selection" in stdout
    assert "interrupted before the check finished" in stdout
    assert "pipeline_kit/" not in stdout and "Traceback" not in stdout


LOSS_RAISES = '''import torch

def forward_step(data_iterator, model):
    tokens, targets = next(data_iterator)
    logits = model(tokens)

    def loss_func(output_tensor):
        scale = 1 / 0
        return scale, {}

    return logits, loss_func
'''


def test_a_students_exception_inside_a_check_names_their_line_and_tb_shows_everything(shell):
    """Issue 36: a loss_func that fails inside lab 1's check: the ✗ names the student's line (the probe reports it
    as data, so the grade's feedback says the same), and %tb then shows the whole traceback, not the verdict again."""
    run(shell, "from pipeline_kit.course.labs import lab01")
    run(shell, LOSS_RAISES)
    result, stdout, _ = run(shell, LAB1["m041_main_callback"])
    flat = " ".join(stdout.split())
    assert not result.success and "raised ZeroDivisionError: division by zero, at line 8 of your code (in " \
        "loss_func), `scale = 1 / 0`" in flat
    assert "Traceback" not in stdout
    _, tb, _ = run(shell, "%tb")
    assert "The above exception was the direct cause" in tb and "check_callback" in tb


def test_a_chinese_notebook_shows_its_verdicts_and_feedback_in_chinese(shell, monkeypatch):
    """The tutor speaks the notebook's language (issue 39): the same points, the words in Chinese."""
    from pipeline_kit.language import set_language
    monkeypatch.setenv("PIPELINE_KIT_LANG", "zh")
    assert tutor.register(shell)
    try:
        run(shell, LAB["given_1"])
        run(shell, _answer("gpipe_grid"))
        run(shell, WRONG_1F1B)
        result, stdout, shown = run(shell, LAB["m042_main_gpipe_order"])
        assert shown and shown[0].startswith("✓ m042_main_gpipe_order — 1 / 1 分")
        result, stdout, _ = run(shell, LAB["m042_main_1f1b_order"])
        assert not result.success
        assert "✗ m042_main_1f1b_order — 0 / 2 分" in stdout
        assert "one_f_one_b_grid" in stdout and "runs the GPipe order" not in stdout
        assert re.search(r"[\u4e00-\u9fff]{4}", stdout.split("\n", 1)[1])
    finally:
        set_language("en")


def test_the_tutor_reads_the_language_of_the_notebook_jupyter_opened(monkeypatch, tmp_path):
    for folder, language in (("labs-zh", "zh_CN"), ("labs", "en")):
        monkeypatch.setenv("JPY_SESSION_NAME", str(ROOT / folder / "lab02_timelines.ipynb"))
        monkeypatch.delenv("PIPELINE_KIT_LANG", raising=False)
        assert tutor.language_here({}) == language
    monkeypatch.setenv("PIPELINE_KIT_LANG", "zh")  # (nbval, a plain IPython: no file to read)
    assert tutor.language_here({}) == "zh_CN"
