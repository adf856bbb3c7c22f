"""Fixtures shared across test files.

``book_html`` is the Jupyter Book built once per test session (every chapter executed by pipeline_kit,
warnings as errors), so test_book.py, test_book_browser.py and test_static_explorer.py read the same build.
To check a build you already have (while writing the book), point ``PIPELINE_KIT_BOOK_HTML`` at its
``_build/html`` folder; the build is then skipped.

Why the build starts at collection time, in the background: it takes a minute and a half of one core, mostly
executing chapters, while much of the rest of the suite waits on processes (kernels, ``torchrun``, browsers).
So the build starts as soon as the session knows a test needs it, at a lower CPU priority (``nice``) so the
tests that measure time keep theirs, and the tests that read it run last.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK_FIXTURE = "book_html"
_build: dict = {}  # the background build: "proc", "dir", "log"


def _start_book_build() -> None:
    out = Path(tempfile.mkdtemp(prefix="pipeline-kit-book-"))
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe), "build", str(ROOT / "book"), "--path-output", str(out), "-W", "-n", "--keep-going"]
    log = open(out / "build.log", "w+")  # noqa: SIM115 -- read back by the fixture, closed at session end
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                            preexec_fn=lambda: os.nice(10))
    _build.update(proc=proc, dir=out, log=log)


def pytest_collection_modifyitems(session, config, items):
    """Start the book build if a selected test needs it, and run those tests last."""
    needing = [item for item in items if BOOK_FIXTURE in getattr(item, "fixturenames", ())]
    if not needing:
        return
    items[:] = [item for item in items if BOOK_FIXTURE not in getattr(item, "fixturenames", ())] + needing
    if not config.option.collectonly and not os.environ.get("PIPELINE_KIT_BOOK_HTML") and not _build:
        _start_book_build()


def pytest_sessionfinish(session, exitstatus):
    proc = _build.get("proc")
    if proc is None:
        return
    if proc.poll() is None:  # the session ended before the book's tests (-x, Ctrl-C): stop the build
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _build["log"].close()
    shutil.rmtree(_build["dir"], ignore_errors=True)


@pytest.fixture(autouse=True)
def no_sandbox_outlives_its_test():
    """Fail the test after which a grade's sandbox process (launcher, relay, kernel, kit-free run) is still alive,
    and end it: a leak is blamed on the test that made it, not on every later test that looks."""
    from lab_grading import sandbox_processes

    before = set(sandbox_processes())
    yield
    deadline = time.monotonic() + 5  # (a grader killed outright: its sandbox dies with it, a moment later)
    while (left := set(sandbox_processes()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"processes of a grade's sandbox outlived the test: {sorted(left)}"


def pytest_terminal_summary(terminalreporter):
    """Say when the ``torchrun`` recordings the lab tests replay are stale: their jobs ran for real instead."""
    from lab_grading import RECORDINGS

    from pipeline_kit.launch import stale_recordings

    stale = stale_recordings(RECORDINGS)
    if stale:
        terminalreporter.write_line(
            f"{len(stale)} torchrun recording(s) in tests/data/torchrun were made with other kit sources: the "
            "tests run those jobs for real (slower); record them again with python tests/rerecord_torchrun.py: "
            + ", ".join(p.name for p in stale), yellow=True)


@pytest.fixture(scope="session")
def book_html() -> Path:
    """The book built once per test session (every chapter executed, warnings as errors): its html folder."""
    if os.environ.get("PIPELINE_KIT_BOOK_HTML"):
        return Path(os.environ["PIPELINE_KIT_BOOK_HTML"]).resolve()
    if not _build:  # collected without the hook (a plugin reordered things): build now
        _start_book_build()
    proc = _build["proc"]
    try:
        proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log = _build["log"]
    log.seek(0)
    text = log.read()
    assert proc.returncode == 0, f"jupyter-book build failed (exit {proc.returncode}):\n{text[-9000:]}"
    return _build["dir"] / "_build" / "html"
