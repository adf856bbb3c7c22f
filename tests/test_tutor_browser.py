"""Lab 2 as a student works through it in a real JupyterLab, in headless Chromium: each check cell shows ✓ or ✗
with its rubric point, its points and the feedback (no traceback through the kit), and the lab's last cell,
``grade_me()``, runs the sandboxed grader on the saved notebook and shows the report as a table by question.

``PIPELINE_KIT_SCREENSHOTS=DIR`` keeps the screenshots there (to look at them); they go to ``tmp_path`` otherwise.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from headless_chromium import chromium_or_skip
from jupyterlab_browser import Lab, jupyterlab

pytest.importorskip("jupyterlab")

ROOT = Path(__file__).resolve().parent.parent
NAME = "lab02_timelines.ipynb"
WRONG = {"one_f_one_b_grid": "one_f_one_b_grid = gpipe_grid  # the GPipe drawing again: a typical mix-up"}


_EDIT = """
const [i, source, done] = arguments;
(async () => {
  const app = window.jupyterapp;
  if (app.commands.isToggled('docmanager:toggle-autosave')) await app.commands.execute('docmanager:toggle-autosave');
  app.shell.currentWidget.content.widgets[i].model.sharedModel.setSource(source);
  return true;
})().then(done, e => done('ERROR ' + e));
"""


def _student_notebook(path: Path, labs: Path = ROOT / "labs") -> dict[str, int]:
    """labs/lab02 (or ``labs``' lab 2) with every answer cell written as the model answer, but for a wrong 1F1B
    drawing; returns grade_id -> cell index."""
    solution = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
                for c in nbformat.read(ROOT / "solutions" / NAME, as_version=4).cells}
    nb = nbformat.read(labs / NAME, as_version=4)
    index = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid:
            index[gid] = i
        if meta.get("solution"):  # what a student writes: the answer, without nbgrader's markers
            answer = [line for line in solution[gid].splitlines() if "### BEGIN SOLUTION" not in line
                      and "### END SOLUTION" not in line]
            cell.source = WRONG.get(gid, "\n".join(answer))
    nbformat.write(nb, path)
    return index


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("tutor")
    index = _student_notebook(root / NAME)
    driver = chromium_or_skip()
    try:
        with jupyterlab(root, PIPELINE_KIT_CHECK_LIMIT="5") as (base, token):
            yield Lab(driver, base, token), index, root
    finally:
        driver.quit()


def _text(lab: Lab, cell: int) -> str:
    return "\n".join(o.get_property("textContent") or "" for o in lab.outputs(cell))


def _shot(lab: Lab, element, name: str, tmp_path: Path) -> Path:
    lab.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    folder = Path(os.environ.get("PIPELINE_KIT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    lab.driver.save_screenshot(str(path))
    return path


def test_check_cells_show_their_verdicts_and_the_last_cell_the_whole_grade(lab, tmp_path):
    lab, index, root = lab
    lab.open(NAME)
    upto = index["m043_follow_dependencies"]
    lab.run(list(range(upto + 1)))
    tick, cross = index["m042_main_gpipe_order"], index["m042_main_1f1b_order"]
    lab.wait(lambda: "✗" in _text(lab, cross), 60, "the ✗ verdict", cell=cross)
    shown = _text(lab, cross)
    assert "✗ m042_main_1f1b_order — 0 / 2 points" in shown
    assert "one_f_one_b_grid runs the GPipe order" in shown
    assert "Traceback" not in shown and "pipeline_kit/" not in shown and "LabCheckFailed" not in shown
    assert "✓ m042_main_gpipe_order — 1 / 1 point" in _text(lab, tick)
    assert "✓ m043_follow_dependencies — 2 / 2 points" in _text(lab, index["m043_follow_dependencies"])
    screenshot = _shot(lab, lab.outputs(cross)[0], "tutor-verdicts.png", tmp_path)
    assert screenshot.stat().st_size > 10_000

    # the student fixes the 1F1B drawing on screen and runs it (✓), but does not save: the grade of the saved file
    # says so at its top, naming the cell (autosave off, so the file stays as it was)
    answer = index["one_f_one_b_grid"]
    solved = next(c.source for c in nbformat.read(ROOT / "solutions" / NAME, as_version=4).cells
                  if c.metadata.get("nbgrader", {}).get("grade_id") == "one_f_one_b_grid")
    assert lab.driver.execute_async_script(_EDIT, answer, solved.replace("### ", "# ")) is True
    lab.run([answer, cross])
    lab.wait(lambda: "✓" in _text(lab, cross), 60, "the ✓ verdict after the fix", cell=cross)

    # the whole grade, from the last cell: run on the saved file, shown as a table grouped by question
    last = index["self_grade"]
    lab.run([last])
    table = lab.wait(lambda: lab.driver.find_elements("css selector", ".jp-OutputArea-output .pk-self-grade"), 240,
                     "the self-grade's table", cell=last)[0]
    text = table.get_property("textContent")
    assert "M042 · main question" in text and "M042 · follow-up" in text and "M043 · follow-up" in text
    assert "one_f_one_b_grid runs the GPipe order" in text
    assert f"Graded {NAME} as saved at" in text and "not saved are not included" in text
    warning = table.find_element("css selector", ".pk-unsaved").text
    assert "Not what you see" in warning and "'one_f_one_b_grid'" in warning and "Save (Ctrl+S)" in warning
    _shot(lab, table, "tutor-self-grade.png", tmp_path)

    # the same points as the instructor's command, check for check: the self-grade names no seed (the hidden cases'
    # seed is the instructor's), and the same answers earn the same points under every seed
    assert not re.search(r"seed \d", text)
    out = subprocess.run([sys.executable, "-m", "pipeline_kit", "grade", str(root / NAME), "--json", "--seed", "7"],
                         capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(out.stdout)
    assert f"Self-grade: {report['score']:g} / {report['max_score']:g} points" in text
    assert 0 < report["score"] < report["max_score"]
    rows = [r.find_elements("css selector", "td") for r in table.find_elements("css selector", "tr.pk-check")]
    assert {r[1].find_element("css selector", "code").text: r[3].text for r in rows} == {
        c["name"]: f"{c['points']:g} / {c['max_points']:g}" for c in report["checks"]}
    assert len(rows) == len(report["checks"])
    # it wrote nothing: the folder holds the student's notebook only (JupyterLab's own checkpoints aside)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [NAME]


def test_a_chinese_lab_speaks_chinese_in_its_verdicts_and_its_self_grade(lab, tmp_path):
    """labs-zh's lab 2 in JupyterLab (issue 39): the kernel learns the notebook's language from the file Jupyter
    opened (its metadata), so each verdict, its feedback and the self-grade are Chinese, with the English lab's
    points."""
    lab, index, root = lab
    (root / "zh").mkdir()
    _student_notebook(root / "zh" / NAME, ROOT / "labs-zh")
    lab.driver.get(f"{lab.base}/lab?token={lab.token}")
    lab.open(f"zh/{NAME}")
    cross, tick, last = index["m042_main_1f1b_order"], index["m042_main_gpipe_order"], index["self_grade"]
    lab.run(list(range(index["m043_follow_dependencies"] + 1)) + [last])
    lab.wait(lambda: "✗" in _text(lab, cross), 60, "the ✗ verdict", cell=cross)
    shown = _text(lab, cross)
    assert "✗ m042_main_1f1b_order — 0 / 2 分" in shown and "✓ m042_main_gpipe_order — 1 / 1 分" in _text(lab, tick)
    assert "one_f_one_b_grid" in shown and "runs the GPipe order" not in shown and "Traceback" not in shown
    assert re.search(r"[\u4e00-\u9fff]{6}", shown.split("分", 1)[1]) and "the full traceback" not in shown, shown
    _shot(lab, lab.outputs(cross)[0], "lab02-zh-verdict.png", tmp_path)
    table = lab.wait(lambda: lab.driver.find_elements("css selector", ".jp-OutputArea-output .pk-self-grade"), 240,
                     "the self-grade's table", cell=last)[0]
    text = table.get_property("textContent")
    assert "自评" in text and "M042 · 主问题" in text and "runs the GPipe order" not in text, text[:400]
    _shot(lab, table, "lab02-zh-self-grade.png", tmp_path)


# The classic notebook (Notebook 7) at /notebooks/PATH: its page holds one notebook, already open.
_OPEN_CLASSIC = """
const done = arguments[arguments.length - 1];
const wait = ms => new Promise(r => setTimeout(r, ms));
(async () => {
  while (!window.jupyterapp || !window.jupyterapp.shell || !window.jupyterapp.shell.currentWidget) await wait(100);
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.context.ready; await panel.sessionContext.ready;
  const until = performance.now() + 90000;
  while (panel.sessionContext.session?.kernel?.status !== 'idle') {
    if (performance.now() > until) throw new Error('kernel not idle');
    await wait(100);
  }
  return window.jupyterapp.name;
})().then(done, e => done('ERROR ' + e));
"""


def test_the_classic_notebook_shows_them_too(lab, tmp_path):
    lab, index, root = lab
    (root / "classic").mkdir()
    _student_notebook(root / "classic" / NAME)
    lab.driver.get(f"{lab.base}/notebooks/classic/{NAME}?token={lab.token}")
    assert lab.driver.execute_async_script(_OPEN_CLASSIC) == "Jupyter Notebook"
    cross, last = index["m042_main_1f1b_order"], index["self_grade"]
    lab.run(list(range(index["m043_follow_dependencies"] + 1)) + [last])
    cells = lab.driver.find_elements("css selector", ".jp-Cell")
    assert "✗ m042_main_1f1b_order — 0 / 2 points" in cells[cross].text
    assert "Traceback" not in cells[cross].text
    table = lab.wait(lambda: lab.driver.find_elements("css selector", ".pk-self-grade"), 240,
                     "the self-grade's table")[0]
    assert "M042 · main question" in table.text and "0 / 2" in table.text
    assert f"Graded {NAME} as saved at" in table.text
    _shot(lab, table, "tutor-classic-self-grade.png", tmp_path)


HUNG = "def choose_schedule(pp, vpp=None):\n    while True:\n        pp += 1"


def test_an_infinite_loop_ends_its_check_cell_with_a_verdict(lab, tmp_path):
    """Lab 1 with an answer stuck in a loop: its check cell ends at the limit (5 s here, from
    PIPELINE_KIT_CHECK_LIMIT; 60 s by default) with a ✗ naming the limit and the running line, no kit frame."""
    lab, _, root = lab
    name = "lab01_schedule_selection.ipynb"
    nb = nbformat.read(ROOT / "labs" / name, as_version=4)
    at = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(nb.cells)}
    nb.cells[at["choose_schedule"]].source = HUNG
    nbformat.write(nb, root / name)
    lab.driver.get(f"{lab.base}/lab?token={lab.token}")  # (back from the classic notebook's page)
    lab.open(name)
    cell = at["m041_main_selection"]
    lab.run(list(range(cell + 1)))
    shown = lab.wait(lambda: _text(lab, cell) if "✗" in _text(lab, cell) else "", 60, "the ✗ verdict", cell=cell)
    flat = " ".join(shown.split())
    assert "✗ m041_main_selection — 0 / " in flat and "your code did not finish in 5 s" in flat
    assert "(in choose_schedule)" in flat and "pipeline_kit/" not in shown and "Traceback" not in shown


# lab 10's memory_terms with five of its six terms wrong: the model answer, then each term spoiled
FIVE_WRONG = """

_right_terms = memory_terms


def memory_terms(model, config):
    out = _right_terms(model, config)
    for rank in out:
        rank["weights"] *= 2
        rank["gradients"] = rank["weights"] / 2
        rank["optimizer"] = 0
        rank["wgrad_kept"] = 0
        rank["p2p_buffers"] /= 2
    return out
"""


def test_every_memory_mistake_of_lab_10_shows_in_its_check_cell(lab, tmp_path):
    """Five wrong terms of six: the check cell's ✗ names all five, one bullet each with its term (the grade's
    text lists three, then 'and 2 more: ...'), and the points left are the one right term's sixth."""
    lab, _, root = lab
    name = "lab10_planning.ipynb"
    solution = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
                for c in nbformat.read(ROOT / "solutions" / name, as_version=4).cells}
    nb = nbformat.read(ROOT / "labs" / name, as_version=4)
    at = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(nb.cells)}
    answer = "\n".join(line for line in solution["memory"].splitlines() if "SOLUTION" not in line)
    nb.cells[at["memory"]].source = answer + FIVE_WRONG
    nbformat.write(nb, root / name)
    lab.driver.get(f"{lab.base}/lab?token={lab.token}")
    lab.open(name)
    cell = at["plan_main_memory"]
    lab.run(list(range(cell + 1)))
    shown = lab.wait(lambda: _text(lab, cell) if "✗" in _text(lab, cell) else "", 90, "the ✗ verdict", cell=cell)
    flat = " ".join(shown.split())
    assert "✗ plan_main_memory — 0.5 / 3 points" in flat and flat.count(" • ") == 5
    for term in ("weights", "gradients", "optimizer", "wgrad_kept", "p2p_buffers"):
        assert f"'{term}' =" in flat, term
    assert "'activations' =" not in flat and "pipeline_kit/" not in shown and "Traceback" not in shown
    _shot(lab, lab.outputs(cell)[0], "tutor-lab10-five-mistakes.png", tmp_path)


def test_a_long_listing_folds_behind_a_toggle_in_the_grade_table(lab, tmp_path):
    """The grade's HTML table (grade_me's and the feedback page's) shows three failing cases, and the rest behind
    'and N more', which opens on a click -- no script, so it works in an offline page too."""
    from pipeline_kit.grading import parts
    from pipeline_kit.grading.rubric_table import table_html

    lab, _, _ = lab
    cases = [f"choose_schedule({pp}, 2) returned '1f1b'" for pp in range(2, 8)]
    report = {"lab": "lab01_schedule_selection", "score": 0, "max_score": 3, "manual": [],
              "checks": [{"name": "m041_main_selection", "points": 0, "max_points": 3,
                          "feedback": parts.listing(cases)}]}
    page = tmp_path / "grade.html"
    page.write_text(f"<!doctype html><meta charset='utf-8'><body>{table_html(report, lambda name: True)}</body>",
                    encoding="utf-8")
    lab.driver.get(page.as_uri())
    toggle = lab.driver.find_element("css selector", "details.pk-more")
    summary = toggle.find_element("css selector", "summary")
    assert summary.text == "and 3 more" and toggle.get_attribute("open") is None
    def rendered() -> str:  # innerText: what the page draws (a closed <details> draws its summary only)
        return lab.driver.execute_script("return document.querySelector('tr.pk-check').innerText")
    assert "choose_schedule(4, 2)" in rendered() and "choose_schedule(5, 2)" not in rendered()
    _shot(lab, toggle, "grade-table-folded.png", tmp_path)
    summary.click()
    assert toggle.get_attribute("open") is not None
    assert "choose_schedule(7, 2)" in rendered()
    _shot(lab, toggle, "grade-table-unfolded.png", tmp_path)
