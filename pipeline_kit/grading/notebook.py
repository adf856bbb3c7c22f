"""Read a lab notebook, identify its lab, and merge the student's answers into the canonical notebook.

Why the grader never runs the student's notebook as it is: a student can edit or delete test cells,
change points or reorder things.  So the grader takes the canonical notebook (with its hidden tests),
puts the student's *answer* cells into it by their nbgrader ``grade_id`` (cells the student added are
kept after the answer or given cell they follow), and grades that (see :mod:`.engine`).  A *manual* cell
(nbgrader's ``grade`` and ``solution`` together: words or code the instructor scores by hand) is merged the same
way; its cell type stays the canonical one, so a student's markdown answer is text and never runs.  The lab is
identified by name from a fixed list -- the notebooks in ``solutions/`` -- never by a path the
notebook names.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..inputs import InputError, parse_json, read_text
from ..limits import LimitError

DEFAULT_TIMEOUT = 60.0          # seconds per cell, and per call of the student's code
DEFAULT_TOTAL_TIMEOUT = 1800.0  # seconds for a whole grade (lab 5's model answer takes ~150 s on 2 cores)
LAB_NAME = re.compile(r"lab\d\d_[a-z0-9_]{1,60}\Z")


class GradeError(Exception):
    """The notebook cannot be graded at all (not a lab, unreadable): a usage error, not a score."""


EXIT_NOT_GRADED = 3  # ``grade``'s exit status when the machine, not the notebook, failed the grade


class NotGraded(GradeError):
    """The machine failed the grade, not the notebook: a kernel that would not start, a given cell the student did
    not change that failed, a sandbox ended from outside -- after one retry.  The grade is withheld (a ``not
    graded: <reason>`` row, nothing written to nbgrader's database), never turned into a score."""


def source_dir() -> Path:
    """``solutions/`` beside the package: the canonical notebooks (the kit is installed editable)."""
    return Path(__file__).resolve().parents[2] / "solutions"


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_answer(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution") and cell.get("cell_type") == "code"


def is_manual(cell) -> bool:
    """A manually graded cell in nbgrader's sense (``grade`` and ``solution``, code or markdown): the student answers
    in it, the instructor scores it (nbgrader's formgrader); the kit's grader only says whether it was answered."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and bool(meta.get("solution")) and cell.get("cell_type") in ("code", "markdown")


# What nbgrader's ClearSolutions puts in a released answer cell (its defaults): a solution region, or a whole cell
# without one, becomes the stub of the cell's type.
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"


def released_source(cell) -> str:
    """An answer cell's text as nbgrader releases it: each ``BEGIN SOLUTION`` ... ``END SOLUTION`` region replaced by
    the stub (indented as the marker line), or, with no region, the whole cell."""
    stub = (CODE_STUB if cell.get("cell_type") == "code" else TEXT_STUB).split("\n")
    out, inside, replaced = [], False, False
    for line in str(cell.get("source", "")).split("\n"):
        if "BEGIN SOLUTION" in line:
            inside = replaced = True
            indent = re.match(r"\s*", line).group(0)
            out += [indent + s for s in stub]
        elif "END SOLUTION" in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out) if replaced else "\n".join(stub)


def answered(source: str, canonical_cell) -> bool:
    """Whether a manual cell holds an answer: not blank, and not the released text (whitespace aside)."""
    words = source.split()
    return bool(words) and words != released_source(canonical_cell).split()


# A test cell is named after the rubric point it grades: ``m044_main_formula``, ``zbv_follow_memory``.  The
# questions are the bank's M041-M054, ``zbv`` (lab 9's zero-bubble V schedules) and ``plan`` (lab 10's capstone,
# planning a pipeline), both beyond the bank.
RUBRIC_ID = re.compile(r"(m0\d\d|zbv|plan)_(main|follow)_\w+\Z")
QUESTIONS = tuple(f"m{n:03d}" for n in range(41, 55)) + ("zbv", "plan")


def rubric_part(grade_id: str) -> tuple[str, str] | None:
    """``(question, "main" | "follow")`` of a test cell's ``grade_id``, or None when it is not named so."""
    match = RUBRIC_ID.match(grade_id or "")
    return (match.group(1), match.group(2)) if match else None


def cell_kind(cell) -> str:
    """``markdown``, ``answer``, ``test``, ``given`` (a locked cell of the lab) or ``extra`` (the student's own)."""
    if cell.get("cell_type") != "code":
        return "markdown"
    if is_answer(cell):
        return "answer"
    if is_test(cell):
        return "test"
    return "given" if nbgrader_meta(cell).get("grade_id") else "extra"


def known_labs(sources: Path) -> list[str]:
    """The labs the grader knows: the canonical notebooks in ``sources`` (``solutions/``)."""
    return sorted(p.stem for p in sources.glob("*.ipynb") if LAB_NAME.match(p.stem))


def lab_name(nb, path: Path, sources: Path) -> str:
    """The lab a notebook says it is, checked against :func:`known_labs` -- a name, never a path."""
    known = known_labs(sources)
    listed = ", ".join(known) or "none found"
    meta = nb.get("metadata", {}).get("pipeline_kit", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        example = known[0] if known else "<lab name>"
        raise GradeError(f"{path}: metadata.pipeline_kit must be a mapping like {{\"lab\": \"{example}\"}}, "
                         f"got {type(meta).__name__}")
    lab = meta.get("lab", path.stem)
    if not isinstance(lab, str) or lab not in known:
        shown = repr(lab) if len(repr(lab)) < 80 else repr(lab)[:77] + "..."
        raise GradeError(f"{path}: not a pipeline-kit lab: metadata.pipeline_kit.lab is {shown}, which is not one of "
                         f"the labs ({listed})" if "lab" in meta else
                         f"{path}: not a pipeline-kit lab: no metadata.pipeline_kit.lab and the file name is not a "
                         f"lab's (labs: {listed})")
    return lab


def read_notebook(path: Path) -> dict:
    """A notebook as plain JSON data whose structure the grader can rely on (cell sources joined into text), or
    a one-line :class:`GradeError` saying what is wrong.  Plain ``json``, not nbformat: it is all the grader
    needs, and it starts in a fraction of the time."""
    try:  # the kit's one input rule first: a regular file (never a FIFO or a device), its size, strict JSON
        nb = parse_json(read_text(str(path), "the file", limit="MAX_NOTEBOOK_BYTES"), "its JSON")
    except (InputError, LimitError) as exc:
        raise GradeError(f"{path}: not a readable notebook ({exc})") from None
    check_structure(nb, path)
    for cell in nb["cells"]:
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        cell.setdefault("metadata", {})
        cell.setdefault("source", "")
    return nb


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 200 else line[:199] + "…"


def check_structure(nb, path: Path) -> None:
    """The fields the grader reads have the types the notebook format documents (a student can hand-edit the
    JSON): a version-4 notebook, mappings where mappings belong, text (or lists of text) as sources."""
    if not isinstance(nb, dict) or not isinstance(nb.get("metadata", {}), dict):
        raise GradeError(f"{path}: not a readable notebook (its top level or its metadata is not a mapping)")
    if nb.get("nbformat") != 4:
        raise GradeError(f"{path}: not a readable notebook (nbformat {nb.get('nbformat')!r}; version 4 is read)")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise GradeError(f"{path}: not a readable notebook ('cells' must be a list)")
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict) or not isinstance(cell.get("metadata", {}), dict):
            raise GradeError(f"{path}: cell {i + 1} is not a mapping with a metadata mapping")
        source = cell.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(x, str) for x in source)):
            raise GradeError(f"{path}: cell {i + 1}: source must be text or a list of lines")
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise GradeError(f"{path}: cell {i + 1}: cell_type must be code, markdown or raw, got "
                             f"{_shown(cell.get('cell_type'))}")
        meta = cell.get("metadata", {})
        for key in ("nbgrader", "pipeline_kit"):
            if meta.get(key) is not None and not isinstance(meta[key], dict):
                raise GradeError(f"{path}: cell {i + 1}: metadata.{key} must be a mapping, "
                                 f"got {type(meta[key]).__name__}")
        gid = (meta.get("nbgrader") or {}).get("grade_id")
        if gid is not None and not isinstance(gid, str):
            raise GradeError(f"{path}: cell {i + 1}: metadata.nbgrader.grade_id must be text, got {type(gid).__name__}")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def canonical_for(nb, path: Path, sources: Path | None = None):
    """``(lab name, canonical notebook)`` for a student's notebook."""
    sources = sources or source_dir()
    if not sources.is_dir():
        raise GradeError(f"{sources}: no such folder of canonical lab notebooks")
    lab = lab_name(nb, path, sources)
    return lab, read_notebook(sources / f"{lab}.ipynb")


@dataclass
class Merged:
    nb: object  # the notebook to execute; its answer cells keep the canonical metadata
    notes: dict  # grade_id -> why that answer is missing or doubtful
    manual: dict = field(default_factory=dict)  # manual cell's grade_id -> whether the student answered it


def merge(student, canonical) -> Merged:
    """The canonical notebook with the student's answers (and the student's own extra cells) in it."""
    answers: dict[str, object] = {}
    extras: dict[str, list] = {}  # grade_id of the cell they follow -> the student's own code cells
    notes: dict[str, str] = {}
    anchor = None
    for cell in student.get("cells", []):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid:
            if is_answer(cell):
                if gid in answers:
                    notes[gid] = f"answer cell '{gid}' appears twice; the first copy was graded"
                    continue
                answers[gid] = cell
            anchor = gid
        elif cell.get("cell_type") == "code" and str(cell.get("source", "")).strip():
            extras.setdefault(anchor, []).append(cell)

    out = copy.deepcopy(canonical)
    cells = []

    def add_extras(after):
        for cell in extras.get(after, []):
            cells.append({"cell_type": "code", "metadata": {}, "source": cell.get("source", ""), "outputs": [],
                          "execution_count": None})

    manual: dict[str, bool] = {}
    add_extras(None)
    for cell in out["cells"]:
        gid = nbgrader_meta(cell).get("grade_id")
        student_cell = answers.get(gid) if is_answer(cell) else None
        text = str(student_cell.get("source", "")) if student_cell is not None else ""
        if is_manual(cell):
            manual[gid] = answered(text, cell)
        if is_answer(cell) and cell.get("cell_type") != "code":  # words: the student's text, whatever type their
            cell["source"] = text                                # cell has now, in a markdown cell that never runs
        elif is_answer(cell):
            if student_cell is None:
                notes[gid] = f"answer cell '{gid}' is missing from your notebook (deleted or its metadata changed)"
                cell["source"] = f"raise RuntimeError({notes[gid]!r})"
            elif student_cell.get("cell_type") != "code":
                notes[gid] = f"answer cell '{gid}' was changed into a {student_cell.get('cell_type')} cell"
                cell["source"] = f"raise RuntimeError({notes[gid]!r})"
            else:
                cell["source"] = text
        cells.append(cell)
        if gid:
            add_extras(gid)
    out["cells"] = cells
    for cell in cells:
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return Merged(out, notes, manual)

