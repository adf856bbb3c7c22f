"""What a student is handed holds no solution: ``make-labs --release DIR`` writes the labs, the book's chapter sources
and the built book where there is one -- never anything of ``solutions/`` -- all or nothing, into a new or empty
folder only; and nbgrader's own release of a lab (a real course, made by nbgrader's API) holds none either."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_kit.grading.release import ReleaseError, make_labs, make_release

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
MARKERS = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS")
LINK = re.compile(r"\]\((\.\./book/[^)#]+)")  # a lab's link into the book, relative to the lab


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, check=False)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.writing-")]


@pytest.mark.slow  # (the command releases ten labs with nbgrader's preprocessors, and so does the reference)
def test_a_release_holds_the_labs_and_the_chapters_and_no_solution(tmp_path):
    dest = tmp_path / "pp-labs"
    proc = _cli("make-labs", "--release", dest)
    assert proc.returncode == 0, proc.stderr
    line, = proc.stdout.strip().splitlines()
    assert line.startswith(f"wrote {dest}: 10 labs in labs/, 14 chapter sources in book/chapters/")
    if (ROOT / "book" / "_build" / "html").is_dir():
        assert "and the built book in book/_build/html/" in line
    else:
        assert "the built book is not included" in line and "`jupyter-book build book`" in line
    make_labs(SOLUTIONS, tmp_path / "made")  # what make-labs writes to a labs folder
    assert _tree(dest / "labs") == _tree(tmp_path / "made")
    assert _tree(dest / "book" / "chapters") == {p.name: p.read_bytes() for p in (ROOT / "book/chapters").glob("*.md")}
    release = _tree(dest)
    assert not [name for name, data in release.items() if any(m.encode() in data for m in MARKERS)]
    assert not [name for name in release if "solutions" in Path(name).parts]
    assert sorted({Path(name).parts[0] for name in release}) == ["book", "labs"]
    # each lab's link to its chapter's source works from the release (and to its page, once the book is built)
    for lab in (dest / "labs").glob("*.ipynb"):
        first = "".join(json.loads(lab.read_text())["cells"][0]["source"])
        links = LINK.findall(first)
        assert any(link.endswith(".md") for link in links), lab.name
        for link in links:
            if link.endswith(".md") or (ROOT / "book" / "_build" / "html").is_dir():
                assert (lab.parent / link).is_file(), (lab.name, link)
    assert not _leftovers(dest) and oct(dest.stat().st_mode & 0o777) != "0o700"


def test_a_folder_that_is_not_empty_is_refused_and_left_as_it_was(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("my notes")
    before = (_tree(dest), dest.stat().st_mtime_ns)
    proc = _cli("make-labs", "--release", dest)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"python -m pipeline_kit make-labs: error: argument --release: {str(dest)!r} is not empty; the release goes "
        "into a new or empty folder, so that nothing there is replaced: give another"]
    assert (_tree(dest), dest.stat().st_mtime_ns) == before and not _leftovers(dest)
    # a file, a folder inside the solutions, and --release with --labs: refused too, each in one line
    for args, says in ((["--release", dest / "notes.txt"], "is a file; give a new or empty folder"),
                       (["--release", SOLUTIONS / "out"], "overlaps the solutions"),
                       (["--release", tmp_path / "x", "--labs", tmp_path / "y"], "not with --check or --labs")):
        proc = _cli("make-labs", *args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"] and not (SOLUTIONS / "out").exists()


def test_a_release_stopped_halfway_leaves_nothing(tmp_path):
    """SIGTERM while the labs are being made: exit 143, no release and no half-written folder beside it."""
    dest = tmp_path / "pp-labs"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_kit", "make-labs", "--release", str(dest)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _leftovers(dest) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _leftovers(dest), "the release folder is built beside DIR"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip() == "python -m pipeline_kit: interrupted" and out == ""
    assert list(tmp_path.iterdir()) == []


def _book(root: Path, page: str = "<p>the bubble</p>") -> Path:
    """A built book as the release finds one: chapter sources, pages, and a link to a file outside it."""
    book = root / "book"
    (book / "chapters").mkdir(parents=True)
    (book / "chapters" / "bubble.md").write_text("# The bubble\n")
    (book / "_build" / "html" / "chapters").mkdir(parents=True)
    (book / "_build" / "html" / "chapters" / "bubble.html").write_text(page)
    (book / "_build" / "html" / "_static").mkdir()
    (book / "_build" / "html" / "_static" / "outside.ipynb").symlink_to(SOLUTIONS / "lab01_schedule_selection.ipynb")
    return book


def test_the_built_book_goes_in_whole_but_for_its_links_into_an_empty_folder(tmp_path):
    book = _book(tmp_path)
    dest = tmp_path / "empty"
    dest.mkdir()
    line = make_release(dest, book=book)
    assert "and the built book in book/_build/html/" in line
    assert _tree(dest / "book") == {"chapters/bubble.md": b"# The bubble\n",
                                    "_build/html/chapters/bubble.html": b"<p>the bubble</p>"}
    assert not os.path.lexists(dest / "book" / "_build" / "html" / "_static" / "outside.ipynb")


def test_a_solution_in_the_book_stops_the_release_before_anything_is_written(tmp_path):
    book = _book(tmp_path, page="<pre>### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION</pre>")
    dest = tmp_path / "pp-labs"
    with pytest.raises(ReleaseError, match=r"book/_build/html/chapters/bubble.html would hold 'BEGIN SOLUTION'"):
        make_release(dest, book=book)
    assert not dest.exists() and not _leftovers(dest)


def _solution_only_lines(nb: dict) -> set[str]:
    """The lines of a solution notebook's solution and hidden-test blocks that appear nowhere else in it."""
    inside, outside = set(), set()
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        blocks = re.findall(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", src, re.S)
        inside |= {line.strip() for _, block in blocks for line in block.splitlines() if line.strip()}
        rest = re.sub(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n.*?### END \1", "", src, flags=re.S)
        outside |= {line.strip() for line in rest.splitlines()}
    return inside - outside


def test_nbgraders_own_release_of_a_lab_holds_no_solution(tmp_path):
    pytest.importorskip("nbgrader")
    import nbgrader_term as term
    lab = SOLUTIONS / "lab09_zero_bubble_v.ipynb"
    course = term.make_course(tmp_path, "lab09", lab, None, [])
    released, = (course / "release" / "lab09").glob("*.ipynb")
    text = released.read_text()
    assert not [m for m in MARKERS if m in text]
    secret = _solution_only_lines(json.loads(lab.read_text()))
    assert len(secret) > 10  # (the lab has solutions and hidden tests to leave out)
    lines = {line.strip() for cell in json.loads(text)["cells"] for line in "".join(cell["source"]).splitlines()}
    assert not secret & lines
    assert "raise NotImplementedError()" in lines  # (what replaced the solutions)
