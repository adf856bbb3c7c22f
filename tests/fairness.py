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
import functools
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


def _affected(code: str, changed: set[str]) -> set[str]:
    """The names a re-run cell binds that can differ from the model run's: bound by a statement that reads a
    changed name (or by one that reads a name such a statement bound), to a fixed point."""
    tree = names.parse(code)
    if tree is None:
        return set()
    statements = [(set(names.bindings(ast.Module(body=[st], type_ignores=[]))),
                   names.used_names(ast.Module(body=[st], type_ignores=[]))) for st in tree.body]
    seen, out = set(changed), set()
    grown = True
    while grown:
        grown = False
        for bound, used in statements:
            if used & seen and not bound <= out:
                out |= bound
                seen |= bound
                grown = True
    return out


def _run_test_cell(cell: Cell, ns: dict, seeds, out: dict) -> None:
    for seed in seeds:
        with remote.seeded(seed):
            got = parts.run_test_cell(cell.source, ns, f"<test cell {cell.gid}>")
        out.setdefault(cell.gid, {})[seed] = (round(cell.points * got.earned, 2), got.feedback)


def _exec(lab: str, cell: Cell, source: str, ns: dict) -> None:
    exec(compile(names.python_source(source), f"<{lab} {cell.gid or cell.kind}>", "exec"), ns)  # noqa: S102


@functools.lru_cache(maxsize=None)
def _model_run(lab: str) -> tuple[list[Cell], list[dict]]:
    """The solution run once, top to bottom (test cells under seed 0): the namespace before each cell."""
    cells, before = lab_cells(lab), []
    ns: dict = {"__name__": "__main__"}
    with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in cells:
            before.append(dict(ns))
            if cell.kind == "test":
                parts.run_test_cell(cell.source, ns, f"<test cell {cell.gid}>")
            else:
                _exec(lab, cell, cell.source, ns)
    return cells, before


def outcomes(lab: str, wrong: Wrong | None = None, seeds=SEEDS) -> dict[str, dict[int, tuple[float, str]]]:
    """{test cell: {seed: (points earned, feedback)}} for the solution of ``lab``, with ``wrong`` in it.

    The model answer runs top to bottom, as a student's notebook does.  A wrong answer re-runs only what it can
    change: its own cell, and each later cell that reads a name it (or a cell re-run for it) binds, each in the
    model run's namespace before that cell with the re-bound names on top.
    """
    out: dict[str, dict[int, tuple[float, str]]] = {}
    if wrong is None:
        ns: dict = {"__name__": "__main__"}
        with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            for cell in lab_cells(lab):
                if cell.kind == "test":
                    _run_test_cell(cell, ns, seeds, out)
                else:
                    _exec(lab, cell, cell.source, ns)
        return out
    cells, before = _model_run(lab)
    at = next((i for i, c in enumerate(cells) if c.kind == "answer" and c.gid == wrong.cell), None)
    assert at is not None, f"{lab} has no answer cell {wrong.cell}"
    source = wrong.code if wrong.replace else f"{cells[at].source}\n\n{wrong.code}"
    rebound = _bound(wrong.code)
    assert rebound, f"{wrong.label}: the wrong answer binds no name"
    dirty: dict = {}
    with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for i in range(at, len(cells)):
            cell = cells[i]
            if i != at and not names.used_names(names.parse(cell.source) or ast.Module(body=[], type_ignores=[])) \
                    & rebound:
                continue
            ns = {**before[i], **dirty}
            if cell.kind == "test":
                _run_test_cell(cell, ns, seeds, out)
                continue
            _exec(lab, cell, source if i == at else cell.source, ns)
            bound = _bound(wrong.code) if i == at else set()
            bound |= _affected(source if i == at else cell.source, rebound | bound)
            dirty.update({name: ns[name] for name in bound if name in ns})
            rebound |= bound
    return out


def max_points(lab: str) -> dict[str, float]:
    return {c.gid: c.points for c in lab_cells(lab) if c.kind == "test"}

