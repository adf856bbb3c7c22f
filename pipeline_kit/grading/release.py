"""Make ``labs/`` (what students get) from ``solutions/`` (the single source) with nbgrader's preprocessors.

The preprocessors run in the order of nbgrader's own ``generate_assignment`` -- lock cells, clear
solutions to ``raise NotImplementedError()``, clear outputs, clear hidden tests, clear mark schemes,
check metadata and compute checksums -- minus the database step, so a lab here is what nbgrader would
release and an instructor can import ``solutions/`` into an nbgrader course unchanged.

``make-labs --release DIR`` (:func:`make_release`) writes a folder a student can be handed instead of the
repository: the labs, the book's chapter sources and the built book where there is one -- laid out as in the
repository, so each lab's links (``../book/...``) still work -- and nothing of ``solutions/``, which a student
who opens the repository in JupyterLab sees beside ``labs/``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

from ..inputs import InputError, check_output_path, inside, read_json, read_text
from ..interrupts import write_file_atomically
from ..limits import LimitError
from .gradebook_store import WRITING, _fsync_tree

ROOT = Path(__file__).resolve().parents[2]
SOLUTION_MARKERS = (b"BEGIN SOLUTION", b"BEGIN HIDDEN TESTS")  # nbgrader's: in a solution, never in a release


class ReleaseError(ValueError):
    """A solution notebook cannot be read; the message names it and says why, in one line."""


def release_notebook(path: Path, lang: str | None = None) -> str:
    """The student version of one solution notebook, as the exact text written to ``labs/`` -- or, with ``lang``,
    to ``labs-<lang>/``: its instructions translated first (:mod:`.lab_catalogs`), so the checksums nbgrader
    computes are the translated cells'."""
    import nbformat
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:  # noqa: BLE001 -- JSON, encoding and schema errors all mean "not a notebook"
        lines = str(exc).strip().splitlines()
        raise ReleaseError(f"{path}: not a readable notebook ({type(exc).__name__}: "
                           f"{lines[0][:200] if lines else 'no detail'})") from None
    if lang is not None:
        from .lab_catalogs import translated
        translated(nb, path, lang, ReleaseError)
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


def make_labs(solutions: Path = ROOT / "solutions", labs: Path = ROOT / "labs", check: bool = False,
              lang: str | None = None) -> list[str]:
    """Write (or with ``check``, compare) every lab; returns what was done or, with ``check``, the problems.

    What is the user's stays the user's: ``labs`` may not be, contain or lie inside ``solutions`` (the one source
    of every lab); a notebook is written only under a solution's name, whole or not at all; and a notebook is
    removed only when the manifest in ``labs`` says make-labs wrote it there (its solution has gone since).  Any
    other file -- ``my_experiments.ipynb`` -- is left as it is.  ``lang``: the labs with their instructions in
    that language (:mod:`.lab_catalogs`)."""
    _check_folders(solutions, labs)
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    made_before = _manifest(labs)
    problems = []
    wanted = [src.name for src in sources]
    for src in sources:
        out = labs / src.name
        text = release_notebook(src, lang)
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


def make_release(dest: Path, solutions: Path = ROOT / "solutions", book: Path = ROOT / "book",
                 lang: str | None = None) -> str:
    """Write the folder ``dest`` (missing or empty) for a student: ``labs/`` as make-labs makes it (``lang``: in
    that language, as ``make-labs --lang`` makes ``labs-<lang>/``), ``book/chapters/*.md`` and, where it was built,
    ``book/_build/html/`` (both editions); returns the one line to print.

    All or nothing: the release is built in a sibling folder (``.<name>.writing-*``) and renamed to ``dest`` at the
    end -- a rename onto an empty folder, never onto one that holds anything.  Before that rename every file is
    searched for nbgrader's solution and hidden-test markers, so a solution that reached the book (or a lab) stops
    the release instead of going to the students."""
    dest = Path(os.path.abspath(dest))
    _check_release(dest, solutions, book)
    # Ctrl-C or SIGTERM wait while the folder is made and its cleanup armed: one arriving between the two would
    # leave the folder behind (it did, under load, in the test that stops a release halfway)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}{WRITING}", dir=dest.parent))
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise ReleaseError(f"argument --release: cannot write in {str(dest.parent)!r}: {exc.strerror or exc}") from None
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # (a signal that waited is raised here, inside the try)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(work, stat.S_IMODE(os.stat(dest).st_mode) if dest.is_dir() else 0o777 & ~umask)  # not mkdtemp's 0700
        make_labs(solutions, work / "labs", lang=lang)
        labs = sorted((work / "labs").glob("*.ipynb"))
        chapters = sorted(p for p in (book / "chapters").glob("*.md") if p.is_file() and not p.is_symlink())
        (work / "book" / "chapters").mkdir(parents=True)
        for src in chapters:
            shutil.copyfile(src, work / "book" / "chapters" / src.name)
        built = book / "_build" / "html"
        with_book = built.is_dir()
        if with_book:
            shutil.copytree(built, work / "book" / "_build" / "html", ignore=_links)
        _refuse_solutions(work, dest)
        _fsync_tree(work)
        os.rename(work, dest)  # (onto an empty folder only: one that got a file since fails, untouched)
    except OSError as exc:
        raise ReleaseError(f"argument --release: cannot write {str(dest)!r}: {exc.strerror or exc}; nothing was "
                           "written") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)  # (after the rename: nothing is left there)
    what = f"wrote {dest}: {len(labs)} labs in labs/, {len(chapters)} chapter sources in book/chapters/"
    if with_book:
        return what + f" and the built book in book/_build/html/; a student opens it with `jupyter lab` in {dest}"
    return (what + f"; the built book is not included ({built} is missing): for the labs' links to its pages, run "
            f"`jupyter-book build book` in {book.parent}, then make the release again")


def _check_release(dest: Path, solutions: Path, book: Path) -> None:
    """``dest`` refused before any work: not a new or empty folder, its folder missing or read-only, or inside
    what the release is made from (it would copy itself, or sit among the solutions)."""
    where = f"argument --release: {str(dest)!r}"
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        kind = "a link" if dest.is_symlink() else "a file" if dest.is_file() else "not a folder"  # (a FIFO, a device)
        raise ReleaseError(f"{where} is {kind}; give a new or empty folder")
    if dest.is_dir() and os.path.samefile(dest, "."):  # (a shell in it would see the old, empty folder)
        raise ReleaseError(f"{where} is the current folder: name a new folder, or run the command from its parent")
    if dest.is_dir() and any(dest.iterdir()):
        raise ReleaseError(f"{where} is not empty; the release goes into a new or empty folder, so that nothing "
                           "there is replaced: give another")
    if not solutions.is_dir() or not any(solutions.glob("*.ipynb")):
        raise ReleaseError(f"argument --solutions: {str(solutions)!r} is not a folder of solution notebooks")
    for source, what in ((solutions, "the solutions"), (book, "the book")):
        if inside(str(dest), str(source)) or inside(str(source), str(dest)):
            raise ReleaseError(f"{where} overlaps {what} ({str(source)!r}) the release is made from: give a folder "
                               "outside it")
    if not dest.parent.is_dir():
        raise ReleaseError(f"{where}: the folder {str(dest.parent)!r} does not exist")
    if not os.access(dest.parent, os.W_OK | os.X_OK):
        raise ReleaseError(f"{where}: the folder {str(dest.parent)!r} is not writable")


def _links(folder: str, names: list[str]) -> list[str]:
    """What the built book's copy leaves out: links, which could name any file of the machine's."""
    return [n for n in names if os.path.islink(os.path.join(folder, n))]


def _refuse_solutions(work: Path, dest: Path) -> None:
    for root, _, files in os.walk(work):
        for name in files:
            path = Path(root, name)
            data = path.read_bytes()
            marker = next((m for m in SOLUTION_MARKERS if m in data), None)
            if marker:
                raise ReleaseError(f"argument --release: {path.relative_to(work)} would hold {marker.decode()!r} "
                                   f"(a solution); nothing was written to {str(dest)!r}")
