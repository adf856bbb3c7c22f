"""Make ``labs/`` (what students get) from ``solutions/`` (the single source) with nbgrader's preprocessors.

The preprocessors run in the order of nbgrader's own ``generate_assignment`` -- lock cells, clear
solutions to ``raise NotImplementedError()``, clear outputs, clear hidden tests, clear mark schemes,
check metadata and compute checksums -- minus the database step, so a lab here is what nbgrader would
release and an instructor can import ``solutions/`` into an nbgrader course unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..inputs import InputError, check_output_path, inside, read_json, read_text
from ..interrupts import write_file_atomically
from ..limits import LimitError

ROOT = Path(__file__).resolve().parents[2]


class ReleaseError(ValueError):
    """A solution notebook cannot be read; the message names it and says why, in one line."""


def release_notebook(path: Path) -> str:
    """The student version of one solution notebook, as the exact text written to ``labs/``."""
    import nbformat
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:  # noqa: BLE001 -- JSON, encoding and schema errors all mean "not a notebook"
        lines = str(exc).strip().splitlines()
        raise ReleaseError(f"{path}: not a readable notebook ({type(exc).__name__}: "
                           f"{lines[0][:200] if lines else 'no detail'})") from None
    from nbgrader.preprocessors import (  # after reading: a corrupt notebook is named without nbgrader's start-up
        CheckCellMetadata,
        ClearHiddenTests,
        ClearMarkScheme,
        ClearOutput,
        ClearSolutions,
        ComputeChecksums,
        LockCells,
    )
    resources: dict = {}
    for step in (LockCells, ClearSolutions, ClearOutput, CheckCellMetadata, ComputeChecksums, ClearHiddenTests,
                 ClearMarkScheme, ComputeChecksums, CheckCellMetadata):
        nb, resources = step().preprocess(nb, resources)
    nb.metadata.pop("widgets", None)
    return nbformat.writes(nb) + "\n"


MANIFEST = ".made-by-make-labs.json"  # in labs/: the notebooks make-labs wrote there, the only ones it removes


def make_labs(solutions: Path = ROOT / "solutions", labs: Path = ROOT / "labs", check: bool = False) -> list[str]:
    """Write (or with ``check``, compare) every lab; returns what was done or, with ``check``, the problems.

    What is the user's stays the user's: ``labs`` may not be, contain or lie inside ``solutions`` (the one source
    of every lab); a notebook is written only under a solution's name, whole or not at all; and a notebook is
    removed only when the manifest in ``labs`` says make-labs wrote it there (its solution has gone since).  Any
    other file -- ``my_experiments.ipynb`` -- is left as it is."""
    _check_folders(solutions, labs)
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    made_before = _manifest(labs)
    problems = []
    wanted = [src.name for src in sources]
    for src in sources:
        out = labs / src.name
        text = release_notebook(src)
        if not check and labs.is_dir():  # (a folder still to be made holds nothing to protect)
            check_output_path(str(out), "argument --labs", inputs=[str(src)])
        current = _current(out)
        if current == text:
            continue
        if check:
            problems.append(f"{out}: {'missing' if current is None else 'out of date'} (from {src})")
        else:
            labs.mkdir(parents=True, exist_ok=True)
            _write(out, text)
            problems.append(f"wrote {out}")
    for extra in sorted(labs.glob("*.ipynb")) if labs.is_dir() else []:
        if extra.name in wanted:
            continue
        ours = extra.name in made_before
        if check:
            problems.append(f"{extra}: has no source in {solutions}" + (" (make-labs removes it)" if ours else
                                                                         " (not made by make-labs: it is kept)"))
        elif ours:
            extra.unlink()
            problems.append(f"removed {extra} (made by make-labs; its solution is gone)")
    if sorted(made_before) != wanted and labs.is_dir():
        if check:
            problems.append(f"{labs / MANIFEST}: {'missing' if not made_before else 'out of date'}")
        else:
            _write(labs / MANIFEST, json.dumps({"made_by": "python -m pipeline_kit make-labs",
                                                "notebooks": wanted}, indent=1) + "\n")
            problems.append(f"wrote {labs / MANIFEST} (the notebooks make-labs made, and may remove later)")
    return problems


def _check_folders(solutions: Path, labs: Path) -> None:
    """The two folders, refused before any work: labs is not a folder, or overlaps solutions."""
    if labs.exists() and not labs.is_dir():
        raise ReleaseError(f"argument --labs: {str(labs)!r} is not a folder")
    if not solutions.is_dir():
        raise ReleaseError(f"argument --solutions: {str(solutions)!r} is not a folder")
    if inside(str(labs), str(solutions)) or inside(str(solutions), str(labs)):
        raise ReleaseError(f"arguments --labs and --solutions: {str(labs)!r} and {str(solutions)!r} overlap; the "
                           "student notebooks would replace or sit among the solutions: give --labs its own folder")
    top = labs if labs.exists() else next((p for p in labs.parents if p.exists()), Path("."))
    if not os.access(top, os.W_OK | os.X_OK):
        raise ReleaseError(f"argument --labs: the folder {str(top)!r} is not writable")


def _manifest(labs: Path) -> list[str]:
    path = labs / MANIFEST
    if not path.is_file():
        return []
    try:
        data = read_json(str(path), "the labs' manifest")
    except (InputError, LimitError) as exc:
        raise ReleaseError(f"{exc} (remove it, and make-labs removes no notebook of yours)") from None
    names = data.get("notebooks") if isinstance(data, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ReleaseError(f"{path}: not a manifest of make-labs (remove it, and make-labs removes no notebook of "
                           "yours)")
    return names


def _current(out: Path) -> str | None:
    if not out.exists():
        return None
    try:
        return read_text(str(out), "a lab")
    except (InputError, LimitError):
        return ""  # not a lab the way make-labs writes one: out of date (and check_output_path judged it)


def _write(path: Path, text: str) -> None:
    try:
        write_file_atomically(str(path), text)
    except OSError as exc:
        raise ReleaseError(f"argument --labs: cannot write {str(path)!r}: {exc.strerror or exc}") from None
