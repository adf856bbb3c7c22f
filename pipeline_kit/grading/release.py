"""Make ``labs/`` (what students get) from ``solutions/`` (the single source) with nbgrader's preprocessors.

The preprocessors run in the order of nbgrader's own ``generate_assignment`` -- lock cells, clear
solutions to ``raise NotImplementedError()``, clear outputs, clear hidden tests, clear mark schemes,
check metadata and compute checksums -- minus the database step, so a lab here is what nbgrader would
release and an instructor can import ``solutions/`` into an nbgrader course unchanged.
"""

from __future__ import annotations

from pathlib import Path

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


def make_labs(solutions: Path = ROOT / "solutions", labs: Path = ROOT / "labs", check: bool = False) -> list[str]:
    """Write (or with ``check``, compare) every lab; returns the problems found (stale or extra files)."""
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    problems = []
    wanted = set()
    for src in sources:
        out = labs / src.name
        wanted.add(out.name)
        text = release_notebook(src)
        current = out.read_text(encoding="utf-8") if out.exists() else None
        if current == text:
            continue
        if check:
            problems.append(f"{out}: {'missing' if current is None else 'out of date'} (from {src})")
        else:
            labs.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
            problems.append(f"wrote {out}")
    for extra in sorted(labs.glob("*.ipynb")) if labs.exists() else []:
        if extra.name not in wanted:
            if check:
                problems.append(f"{extra}: has no source in {solutions}")
            else:
                extra.unlink()
                problems.append(f"removed {extra}")
    return problems
