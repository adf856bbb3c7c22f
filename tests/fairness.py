"""The fairness harness: a lab's test cells, run in this process on a notebook with typical wrong answers, under
many seeds -- so "the same mistake loses the same points under every seed" is measured, not hoped for.

A lab's catalogue (``tests/fairness_catalogue/labNN.py``) lists its typical wrong answers as :class:`Wrong`
entries: code appended to an answer cell of the solution (it redefines a function the wrong way) or put in its
place, and the test cells that must lose points.  :func:`outcomes` runs the solution notebook top to bottom in one
namespace, as a student's notebook runs (given and answer cells with ``exec``, magics dropped), and each test cell
with the grader's own :func:`pipeline_kit.grading.parts.run_test_cell` -- the same partial credit and feedback as
a grade -- once per seed (``remote.seeded``).  Test cells that read none of the names a wrong answer rebinds are
not run for it (their verdict is the model answer's, which is checked under every seed on its own); their imports
are.  The catalogue's ``REVEALS`` lists, per test cell, text that gives its answer away: no other cell's feedback
may contain it.
"""

from __future__ import annotations

import ast
import contextlib
import io
from dataclasses import dataclass, field

import nbformat
from lab_grading import SOLUTIONS, replayed_torchrun

from pipeline_kit.grading import names, parts, remote
from pipeline_kit.grading.notebook import cell_kind, nbgrader_meta

SEEDS = range(20)


@dataclass
class Wrong:
    """One typical wrong answer: ``code`` for the answer cell ``cell`` (appended, or in its place with
    ``replace``), which must cost exactly the test cells in ``loses`` some points (all of them unless ``points``
    says how many each loses)."""

    label: str
    cell: str
    code: str
    loses: set[str]
    replace: bool = False
    points: dict[str, float] = field(default_factory=dict)


@dataclass
class Cell:
    kind: str
    gid: str
    source: str
    points: float


def lab_cells(lab: str) -> list[Cell]:
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    return [Cell(cell_kind(c), nbgrader_meta(c).get("grade_id", ""), c.source,
                 float(nbgrader_meta(c).get("points", 0) or 0)) for c in nb.cells if cell_kind(c) != "markdown"]


def _bound(code: str) -> set[str]:
    tree = names.parse(code)
    return set(names.bindings(tree)) if tree is not None else set()


def outcomes(lab: str, wrong: Wrong | None = None, seeds=SEEDS) -> dict[str, dict[int, tuple[float, str]]]:
    """{test cell: {seed: (points earned, feedback)}} for the solution of ``lab``, with ``wrong`` in it."""
    cells = lab_cells(lab)
    rebound = None
    if wrong is not None:
        assert any(c.kind == "answer" and c.gid == wrong.cell for c in cells), f"{lab} has no answer cell {wrong.cell}"
        rebound = _bound(wrong.code)
        assert rebound, f"{wrong.label}: the wrong answer binds no name"
    ns: dict = {"__name__": "__main__"}
    out: dict[str, dict[int, tuple[float, str]]] = {}
    with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in cells:
            if cell.kind != "test":
                source = cell.source
                if wrong is not None and cell.gid == wrong.cell:
                    source = wrong.code if wrong.replace else f"{source}\n\n{wrong.code}"
                exec(compile(names.python_source(source), f"<{lab} {cell.gid or cell.kind}>", "exec"), ns)  # noqa: S102
                continue
            tree = ast.parse(cell.source)
            if rebound is not None and not names.used_names(tree) & rebound:
                exec(names.top_level_imports(cell.source), ns)  # noqa: S102 -- its imports, for later cells
                continue
            for seed in seeds:
                with remote.seeded(seed):
                    got = parts.run_test_cell(cell.source, ns, f"<test cell {cell.gid}>")
                out.setdefault(cell.gid, {})[seed] = (round(cell.points * got.earned, 2), got.feedback)
    return out


def max_points(lab: str) -> dict[str, float]:
    return {c.gid: c.points for c in lab_cells(lab) if c.kind == "test"}
