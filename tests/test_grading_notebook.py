"""The notebook grader: every solution scores full marks, every untouched lab zero, and a student's notebook
can never crash it -- syntax errors, exceptions, infinite loops, dead kernels and deleted cells cost points."""

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from lab_grading import (LABS, ROOT, SOLUTIONS, assert_partial, grade_answers, lab_names, replayed_torchrun,
                         with_answers)

from pipeline_kit.grading.engine import grade
from pipeline_kit.grading.notebook import (QUESTIONS, TEXT_STUB, is_answer, is_manual, is_test, merge, nbgrader_meta,
                                           read_notebook, released_source, rubric_part)
from pipeline_kit.grading.release import make_labs
from pipeline_kit.grading.report import ManualCheck, Report

LAB1, LAB4 = "lab01_schedule_selection", "lab04_1f1b_generator"


def _manual_cells(lab: str) -> list[tuple[str, float]]:
    """(grade_id, points) of the manually graded cells of ``lab``'s solution (words the instructor scores)."""
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    return [(nbgrader_meta(c)["grade_id"], nbgrader_meta(c)["points"]) for c in nb.cells if is_manual(c)]


@pytest.mark.parametrize("lab", lab_names())
def test_solution_scores_full_marks(lab):
    # the jobs replayed: nbval runs every job of the solutions (and their checks) for real, and
    # test_grading_forgery.py::test_the_grade_ignores_the_kernels_torchrun a grader's own job
    with replayed_torchrun():
        report = grade(SOLUTIONS / f"{lab}.ipynb")
    assert report.max_score > 0
    assert report.score == report.max_score, report.text()
    # a manual cell (lab 10's sentence) is listed, answered, and in neither score nor max_score
    assert [(m.name, m.max_points, m.answered) for m in report.manual] == [(g, p, True) for g, p in _manual_cells(lab)]


@pytest.mark.parametrize("lab", lab_names())
def test_untouched_lab_scores_zero(lab):
    with replayed_torchrun():  # the given cells' jobs: the full-marks grade and nbval run them for real
        report = grade(LABS / f"{lab}.ipynb")
    assert report.max_score > 0
    assert report.score == 0, report.text()
    assert all(c.feedback and c.feedback != "passed" for c in report.checks)
    assert [(m.name, m.max_points, m.answered) for m in report.manual] == [(g, p, False) for g, p in _manual_cells(lab)]


def test_labs_are_generated_from_solutions():
    assert make_labs(check=True) == [], "run `python -m pipeline_kit make-labs`"


def test_labs_hide_solutions_and_hidden_tests():
    for lab in lab_names():
        text = (LABS / f"{lab}.ipynb").read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert marker not in text, f"{lab}: {marker}"
        nb = nbformat.read(str(LABS / f"{lab}.ipynb"), as_version=4)
        for cell in nb.cells:
            if is_answer(cell) and cell.cell_type == "code":
                assert "raise NotImplementedError()" in cell.source
            elif is_answer(cell):  # words: nbgrader releases the whole cell as its text stub
                assert cell.source == TEXT_STUB
            assert not cell.get("outputs")


def test_the_released_text_is_nbgrader_s():
    """The grader's idea of an answer cell's released text (what "not answered" means) is what make-labs wrote."""
    count = 0
    for lab in lab_names():
        lab_cells = read_notebook(LABS / f"{lab}.ipynb")["cells"]
        released = {nbgrader_meta(c).get("grade_id"): c["source"] for c in lab_cells}
        for cell in read_notebook(SOLUTIONS / f"{lab}.ipynb")["cells"]:
            if is_answer(cell):
                assert released_source(cell) == released[nbgrader_meta(cell)["grade_id"]], (lab, nbgrader_meta(cell))
                count += 1
    assert count > 50


def test_points_follow_the_bank_rubric():
    """Each question's checks add up to 10 (main) + 5 (follow-up); the labs cover M041-M054, ZB-V and planning."""
    totals = defaultdict(float)
    for lab in lab_names():
        nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
        ids = set()
        for cell in nb.cells:
            meta = nbgrader_meta(cell)
            if meta:
                assert meta.get("schema_version") == 3 and meta.get("grade_id"), (lab, meta)
                assert meta["grade_id"] not in ids, (lab, meta["grade_id"])
                ids.add(meta["grade_id"])
            if is_answer(cell) and cell.cell_type == "code":
                assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source, (lab, meta)
            if is_manual(cell):  # words the instructor scores: named after a rubric point, their points beside the 15
                assert not meta["locked"] and meta["points"] > 0 and rubric_part(meta["grade_id"]), (lab, meta)
                continue
            if is_test(cell):
                assert meta["locked"] and meta["points"] > 0, (lab, meta)
                part = rubric_part(meta["grade_id"])
                assert part, f"{lab}: test cell {meta['grade_id']} is not named m0XX_main_* / zbv_follow_* / ..."
                totals[part] += meta["points"]
    for q in QUESTIONS:
        assert totals[q, "main"] == 10, (q, dict(totals))
        assert totals[q, "follow"] == 5, (q, dict(totals))
    assert len(totals) == 2 * len(QUESTIONS) == 32


def test_nbgrader_generates_the_same_lab(tmp_path):
    """An instructor can import solutions/ into nbgrader unchanged: its own generate_assignment gives labs/."""
    bindir = str(Path(sys.executable).parent)
    nbgrader = shutil.which("nbgrader", path=bindir)
    assert nbgrader, "nbgrader is in requirements.txt"
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}  # it runs `alembic`
    (tmp_path / "source" / "lab01").mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{LAB1}.ipynb", tmp_path / "source" / "lab01")
    proc = subprocess.run([nbgrader, "generate_assignment", "lab01", "--force"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    theirs = nbformat.read(str(tmp_path / "release" / "lab01" / f"{LAB1}.ipynb"), as_version=4)
    ours = nbformat.read(str(LABS / f"{LAB1}.ipynb"), as_version=4)
    assert [c.source for c in theirs.cells] == [c.source for c in ours.cells]
    assert [nbgrader_meta(c) for c in theirs.cells] == [nbgrader_meta(c) for c in ours.cells]


# -- a student's notebook can never crash the grader ------------------------------------------------------

def test_syntax_error_costs_only_its_own_points(tmp_path):
    report = grade_answers(tmp_path, LAB1, {"megatron_function": "megatron_function = {'1f1b': }"})
    assert_partial(report, {"m041_main_source": "your answer cell 'megatron_function' failed: SyntaxError"})


# (lab 4 imports no torch: a short --timeout must not catch a slow `import torch` on a busy machine)
def test_infinite_loop_is_interrupted(tmp_path):
    loop = "def one_f_one_b_phases(pp, microbatches, rank):\n    while True:\n        pass\n"
    report = grade_answers(tmp_path, LAB4, {"phases": loop}, timeout=4)
    assert_partial(report, {"m043_main_phases": "timed out after 4 s", "m043_main_warmup": "timed out after 4 s"})


def test_kernel_that_ignores_interrupts_is_killed_and_the_rest_still_graded(tmp_path):
    stubborn = ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "deadlock_example = None\nwhile True:\n    pass\n")
    report = grade_answers(tmp_path, LAB4, {"p2p_memory": stubborn}, timeout=3)
    assert_partial(report, {"m043_main_p2p_memory": "killed"})


def test_dead_kernel_costs_only_the_cells_that_needed_it(tmp_path):
    report = grade_answers(tmp_path, LAB1, {"differences": "import os\nos._exit(3)\n"})
    assert_partial(report, {"m041_main_differences": "the kernel died"})


def test_wrong_type_is_named(tmp_path):
    report = grade_answers(tmp_path, LAB1, {"megatron_function": "megatron_function = 'forward_backward'"})
    assert_partial(report, {"m041_main_source": "megatron_function must be a dict keyed by family"})


def test_deleted_answer_cell_and_edited_tests(tmp_path):
    path = with_answers(tmp_path, LAB1, {})
    nb = nbformat.read(str(path), as_version=4)
    nb.cells = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") != "megatron_function"]
    for cell in nb.cells:  # a student who "fixes" the tests gains nothing: the canonical tests run
        if is_test(cell):
            cell.source = "pass"
    nbformat.write(nb, str(path))
    report = grade(path)
    assert_partial(report, {"m041_main_source": "answer cell 'megatron_function' is missing from your notebook"})


def test_students_own_cells_are_kept(tmp_path):
    path = with_answers(tmp_path, LAB1, {"choose_schedule": "def choose_schedule(pp, vpp=None):\n"
                                                            "    return helper(pp, vpp)\n"})
    nb = nbformat.read(str(path), as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == "choose_schedule")
    nb.cells.insert(at, nbformat.v4.new_code_cell(
        "def helper(pp, vpp):\n    return 'no-pipelining' if pp == 1 else 'interleaved' if (vpp or 1) > 1 else '1f1b'"))
    nbformat.write(nb, str(path))
    report = grade(path)
    assert report.score == report.max_score, report.text()


# -- manually graded cells: words the instructor scores -------------------------------------------------

def _manual_lab(folder: Path) -> Path:
    """A canonical lab of three cells: a given ``x = 1``, a markdown manual cell (2 points), a test that x is 1."""
    nb = nbformat.v4.new_notebook(metadata={"pipeline_kit": {"lab": "lab99_words"}})
    meta = {"schema_version": 3, "task": False}
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {**meta, "grade": False, "grade_id": "given_1",
                                                                  "locked": True, "solution": False}}),
        nbformat.v4.new_markdown_cell("x is one.", metadata={"nbgrader": {
            **meta, "grade": True, "grade_id": "m041_follow_words", "locked": False, "points": 2, "solution": True}}),
        nbformat.v4.new_code_cell("assert x == 1, 'x changed'", metadata={"nbgrader": {
            **meta, "grade": True, "grade_id": "m041_follow_x", "locked": True, "points": 1, "solution": False}}),
    ]
    folder.mkdir()
    nbformat.write(nb, str(folder / "lab99_words.ipynb"))
    return folder


def _words(tmp_path: Path, sources: Path, text: str, cell_type: str = "markdown") -> Path:
    nb = nbformat.read(str(sources / "lab99_words.ipynb"), as_version=4)
    nb.cells[1].cell_type, nb.cells[1].source = cell_type, text
    if cell_type == "code":
        nb.cells[1].outputs, nb.cells[1].execution_count = [], None
    path = tmp_path / f"student_{cell_type}.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_a_markdown_answer_is_merged_and_never_runs(tmp_path):
    """The student's words go into the canonical manual cell by grade_id and are never executed -- not even code in
    them, nor a cell the student turned into a code cell; the report lists the cell, answered or not, beside the
    automatic checks and outside their score."""
    sources = _manual_lab(tmp_path / "sources")
    code = "x = 2\nimport os\nos._exit(3)"
    for cell_type in ("markdown", "code"):
        report = grade(_words(tmp_path, sources, code, cell_type), sources=sources)
        assert (report.score, report.max_score) == (1, 1), report.text()  # the test still sees the given x = 1
        assert report.manual == [ManualCheck("m041_follow_words", 2, True)]
        assert report.questions() == {"m041_follow": {"points": 1, "max_points": 1}}
    canonical = read_notebook(sources / "lab99_words.ipynb")
    merged = merge(read_notebook(_words(tmp_path, sources, code)), canonical)
    assert merged.nb["cells"][1]["cell_type"] == "markdown" and merged.nb["cells"][1]["source"] == code
    for text, answered in ((TEXT_STUB, False), (f"  {TEXT_STUB}\n\n", False), ("", False), ("x is 1", True)):
        assert merge(read_notebook(_words(tmp_path, sources, text)), canonical).manual == {
            "m041_follow_words": answered}, text
    deleted = read_notebook(_words(tmp_path, sources, "x is 1"))
    del deleted["cells"][1]
    assert merge(deleted, canonical).manual == {"m041_follow_words": False}


def test_the_report_lists_manual_cells_outside_the_score():
    report = Report("nb.ipynb", lab="lab10_planning", seed=1)
    report.add("plan_follow_rule", 2, True, "passed")
    assert "manual" not in report.to_dict()  # only where the lab has manual cells
    report.manual = [ManualCheck("plan_follow_sentence", 2, True), ManualCheck("plan_follow_other", 1, False)]
    out = report.to_dict()
    assert out["manual"] == [{"name": "plan_follow_sentence", "max_points": 2, "answered": True},
                             {"name": "plan_follow_other", "max_points": 1, "answered": False}]
    assert (out["score"], out["max_score"]) == (2, 2) and out["questions"] == {"plan_follow": {"points": 2,
                                                                                              "max_points": 2}}
    text = report.text()
    assert "plan_follow_sentence     — / 2   graded by your instructor (answered)" in text
    assert "plan_follow_other        — / 1   graded by your instructor (not answered yet)" in text
    assert text.startswith("nb.ipynb: 2 / 2\n") and "3 more points graded by your instructor" in text


# -- the command line ---------------------------------------------------------------------------------

def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)


def test_grade_json_contract(tmp_path):
    path = with_answers(tmp_path, LAB1, {"megatron_function": "megatron_function = {}"})
    proc = _cli("grade", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"notebook", "lab", "seed", "language", "score", "max_score", "questions", "sandbox",
                        "checks"}
    assert out["lab"] == LAB1 and isinstance(out["seed"], int) and out["language"] == "en"
    box = out["sandbox"]
    assert set(box) == {"isolated", "mode", "limits"} and box["isolated"] is True
    assert box["mode"] in ("root", "user namespace") and "GiB" in box["limits"]
    assert out["max_score"] == 15 and out["score"] == 13
    assert all(set(c) == {"name", "points", "max_points", "feedback"} for c in out["checks"])
    failed = [c for c in out["checks"] if c["points"] < c["max_points"]]
    assert [c["name"] for c in failed] == ["m041_main_source"]
    assert "megatron_function is missing 'no-pipelining'" in failed[0]["feedback"]
    # the per-question subtotals: the checks' points summed by question and part, the bank's order
    by_question = {}
    for c in out["checks"]:
        q, part = c["name"].split("_")[:2]
        by_question.setdefault(f"{q}_{part}", [0, 0])
        by_question[f"{q}_{part}"][0] += c["points"]
        by_question[f"{q}_{part}"][1] += c["max_points"]
    assert {k: [v["points"], v["max_points"]] for k, v in out["questions"].items()} == by_question
    assert list(out["questions"])[0] == "m041_main" and out["questions"]["m041_main"]["points"] < \
        out["questions"]["m041_main"]["max_points"]


def test_grade_rejects_what_is_not_a_lab(tmp_path):
    other = tmp_path / "notes.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), str(other))
    proc = _cli("grade", str(other))
    assert proc.returncode == 2
    assert "not a pipeline-kit lab" in proc.stderr and "lab01_schedule_selection" in proc.stderr
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    proc = _cli("grade", str(broken))
    assert proc.returncode == 2 and "not a readable notebook" in proc.stderr
    proc = _cli("grade", str(SOLUTIONS / f"{LAB1}.ipynb"), "--solutions", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "nowhere: no such folder of canonical lab notebooks" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_make_labs_check_reports_a_stale_lab(tmp_path):
    labs = tmp_path / "labs"
    shutil.copytree(LABS, labs)
    stale = labs / f"{LAB1}.ipynb"
    stale.write_text(stale.read_text().replace("Lab 1", "Lab one"))
    (labs / "lab99_old.ipynb").write_text("{}")
    problems = make_labs(SOLUTIONS, labs, check=True)
    assert any("out of date" in p and LAB1 in p for p in problems)
    assert any("lab99_old.ipynb: has no source" in p for p in problems)
