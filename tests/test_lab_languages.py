"""The labs in Chinese (issue 39): ``make-labs --lang zh`` from solutions/ and its catalogs, the same cells, checks and
points as the English labs, refused while a paragraph lacks its translation."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from lab_grading import lab_names, replayed_torchrun

from pipeline_kit.grading.engine import grade
from pipeline_kit.grading.lab_catalogs import catalog_path, counts, paragraphs, translated, update
from pipeline_kit.grading.notebook import nbgrader_meta
from pipeline_kit.grading.release import ReleaseError, make_labs, release_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, LABS, LABS_ZH = ROOT / "solutions", ROOT / "labs", ROOT / "labs-zh"


def test_the_chinese_labs_are_made_from_the_solutions_and_their_catalogs():
    assert make_labs(labs=LABS_ZH, check=True, lang="zh") == [], "run `python -m pipeline_kit make-labs --lang zh`"
    for lab in lab_names():
        assert counts(SOLUTIONS / f"{lab}.ipynb", "zh")[1:] == (0, 0), lab


def _shape(path: Path) -> list:
    nb = nbformat.read(str(path), as_version=4)
    return [(c.cell_type, (nbgrader_meta(c) or {}).get("grade_id"), (nbgrader_meta(c) or {}).get("points"),
             c.source if c.cell_type == "code" else None) for c in nb.cells]


@pytest.mark.parametrize("lab", lab_names())
def test_a_chinese_lab_has_the_english_lab_s_cells_checks_and_points(lab):
    """Only the instructions differ: every code cell, grade id and point is the English lab's, so one gradebook
    holds both; and the instructions are Chinese."""
    assert _shape(LABS_ZH / f"{lab}.ipynb") == _shape(LABS / f"{lab}.ipynb")
    text = "".join(c.source for c in nbformat.read(str(LABS_ZH / f"{lab}.ipynb"), as_version=4).cells
                   if c.cell_type == "markdown")
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > 300, lab


def test_a_paragraph_is_cut_as_markdown_reads_it():
    assert paragraphs("# T\n\nOne\nline.\n\n```python\na = 1\n\nb = 2\n```\n\n| a |\n| - |") == [
        "# T", "One\nline.", "```python\na = 1\n\nb = 2\n```", "| a |\n| - |"]


def test_an_english_edit_is_refused_until_it_is_translated(tmp_path):
    """Change a paragraph of a solution: its translation turns fuzzy (kept as a start), and the Chinese lab is
    refused, saying how many and where, until the translation is confirmed."""
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    src = solutions / "lab01_schedule_selection.ipynb"
    shutil.copy(SOLUTIONS / src.name, src)
    update(src, "zh")
    from babel.messages.pofile import read_po, write_po
    with catalog_path(src, "zh").open("rb") as fh:
        catalog = read_po(fh)
    for message in catalog:  # every paragraph translated (here, marked as such)
        if message.id:
            message.string, message.flags = "译文：" + message.id, set()
    with catalog_path(src, "zh").open("wb") as fh:
        write_po(fh, catalog, width=0)
    assert counts(src, "zh")[1:] == (0, 0)
    release_notebook(src, "zh")
    nb = json.loads(src.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"] = "".join(cell["source"]).replace("Lab 1", "Lab one", 1)
    src.write_text(json.dumps(nb), encoding="utf-8")
    n, missing, fuzzy = update(src, "zh")
    assert missing + fuzzy == 1 and n > 10
    with pytest.raises(ReleaseError, match=r"lab01_schedule_selection.ipynb: \d paragraph\(s\) untranslated and \d "
                                           r"fuzzy of \d+ in .*lab01_schedule_selection.po"):
        release_notebook(src, "zh")
    assert catalog_path(src, "zh").exists()


@pytest.mark.slow
def test_a_chinese_lab_is_graded_as_the_english_one(tmp_path):
    """The untouched Chinese lab scores 0, its solution (the English one with its instructions translated) full
    marks, out of the English lab's points."""
    lab = "lab01_schedule_selection"
    solution = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    translated(solution, SOLUTIONS / f"{lab}.ipynb", "zh", ReleaseError)
    zh_solution = tmp_path / f"{lab}.ipynb"
    nbformat.write(solution, str(zh_solution))
    english = sum((nbgrader_meta(c) or {}).get("points", 0) for c in nbformat.read(str(LABS / f"{lab}.ipynb"),
                                                                                   as_version=4).cells
                  if not (nbgrader_meta(c) or {}).get("task"))  # (a manual cell's points are in no score)
    with replayed_torchrun():
        untouched = grade(LABS_ZH / f"{lab}.ipynb")
        answered = grade(zh_solution)
    assert untouched.max_score == answered.max_score == english > 0
    assert untouched.score == 0 and answered.score == answered.max_score, answered.text()
    # the feedback in the notebook's language (metadata.pipeline_kit.language), the points the same
    assert all(re.search(r"[\u4e00-\u9fff]", c.feedback) for c in untouched.checks), untouched.text()
    assert untouched.to_dict()["language"] == "zh_CN"


@pytest.mark.parametrize("args, refused", [
    (["--update"], "argument --update: it refreshes a language's catalogs; add --lang zh"),
    (["--lang", "zh", "--update", "--check"], "argument --update: not with --check, --labs or --release"),
])
def test_make_labs_refuses_languages_where_they_do_not_apply(args, refused, tmp_path):
    from bounded import run_cli
    res = run_cli("make-labs", *[str(tmp_path / a) if a == "x" else a for a in args])
    assert res.code == 2 and refused in res.err and len(res.err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_release_in_chinese_holds_the_chinese_labs(tmp_path):
    from bounded import run_cli
    res = run_cli("make-labs", "--release", str(tmp_path / "pp-labs"), "--lang", "zh")
    assert res.code == 0, res.err
    nb = nbformat.read(str(tmp_path / "pp-labs" / "labs" / "lab01_schedule_selection.ipynb"), as_version=4)
    assert nb.metadata["pipeline_kit"]["language"] == "zh_CN"
    assert re.search(r"[\u4e00-\u9fff]", nb.cells[0].source)
    assert (tmp_path / "pp-labs" / "labs" / "lab01_schedule_selection.ipynb").read_text() == \
        (LABS_ZH / "lab01_schedule_selection.ipynb").read_text()
