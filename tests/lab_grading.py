"""Helpers for the lab tests: grade the solution, the untouched lab, and solutions with one answer made wrong."""

from __future__ import annotations

from pathlib import Path

import nbformat

from pipeline_kit.grading.notebook import grade, nbgrader_meta

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
LABS = ROOT / "labs"


def lab_names() -> list[str]:
    return sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))


def with_answers(tmp_path: Path, lab: str, answers: dict[str, str], name: str = "student") -> Path:
    """The solution notebook of ``lab`` with the answer cells named in ``answers`` replaced, saved in tmp_path."""
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    found = set()
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
            found.add(gid)
    missing = set(answers) - found
    assert not missing, f"{lab} has no cells {missing}"
    path = tmp_path / f"{name}.ipynb"
    nb.metadata.setdefault("pipeline_kit", {})["lab"] = lab
    nbformat.write(nb, str(path))
    return path


def grade_answers(tmp_path: Path, lab: str, answers: dict[str, str], timeout: float = 60.0):
    return grade(with_answers(tmp_path, lab, answers), timeout=timeout)


def assert_partial(report, failing: dict[str, str]) -> None:
    """Exactly the checks in ``failing`` lose their points, each with feedback containing the given text."""
    by_name = {c.name: c for c in report.checks}
    for name, text in failing.items():
        assert name in by_name, f"no check {name}; checks: {list(by_name)}"
        check = by_name[name]
        assert check.points == 0, f"{name} passed but should fail"
        assert text in check.feedback, f"{name}: expected {text!r} in feedback {check.feedback!r}"
    for check in report.checks:
        if check.name not in failing:
            assert check.points == check.max_points, f"{check.name} lost points: {check.feedback}"
    assert 0 < report.score < report.max_score
