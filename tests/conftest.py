"""Fixtures shared across test files.

``book_html`` is the Jupyter Book built once per test session (every chapter executed by pipeline_kit,
warnings as errors), so test_book.py, test_book_browser.py and test_static_explorer.py read the same build.
To check a build you already have (while writing the book), point ``PIPELINE_KIT_BOOK_HTML`` at its
``_build/html`` folder; the build is then skipped.

Why the build starts at collection time, in the background: it takes a minute and a half of one core, mostly
executing chapters, while much of the rest of the suite waits on processes (kernels, ``torchrun``, browsers).
So the build starts as soon as the session knows a test needs it, at a lower CPU priority (``nice``) so the
tests that measure time keep theirs, and the tests that read it run last.

Under ``pytest -n N`` (pytest-xdist) the workers build the book once between them: the controller names a
folder (:data:`SHARED_ENV`), the first worker to claim it starts the build there, the build writes its exit
status when it ends, and any worker's ``book_html`` waits for that file; the controller stops the build and
removes the folder at the end of the run.
"""

import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if os.environ.get("PYTEST_XDIST_WORKER"):  # one test per core: torch's own threads would only fight the sibling's
    os.environ.setdefault("OMP_NUM_THREADS", "1")
BOOK_FIXTURE = "book_html"
SHARED_ENV = "PIPELINE_KIT_TEST_SHARED"  # under xdist: the workers' shared folder (the one book build, the locks)
BUILD_TIMEOUT_S = 900
_build: dict = {}  # the build this process started or waits for: "dir", and "proc" where it started it


def _start_book_build(out: Path) -> None:
    """The book's two editions (book/editions.py) into ``out`` in the background; it writes ``out/rc`` (its exit
    status) when done."""
    # both editions, as the README's zh-build command builds them: English, then Chinese from the same execution
    cmd = [sys.executable, str(ROOT / "book" / "editions.py"), "--path-output", str(out), "-W", "-n", "--keep-going"]
    script = f"{shlex.join(cmd)} > {shlex.quote(str(out / 'build.log'))} 2>&1; echo $? > {out}/rc.part; " \
             f"mv {out}/rc.part {out}/rc"
    proc = subprocess.Popen(["sh", "-c", script], cwd=ROOT, start_new_session=True, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: os.nice(10))
    (out / "pid").write_text(str(proc.pid))
    _build.update(dir=out, proc=proc)


def _claim_build() -> None:
    """Start the build, or, under xdist, join the one a sibling worker started (the first to claim it starts it)."""
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        _start_book_build(Path(tempfile.mkdtemp(prefix="pipeline-kit-book-")))
        return
    out = Path(shared)
    try:
        os.close(os.open(out / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        _build.update(dir=out)  # a sibling builds it
        return
    _start_book_build(out)


def _stop_build(folder: Path) -> None:
    try:
        pid = int((folder / "pid").read_text())
    except (OSError, ValueError):
        pid = None
    if pid is not None and not (folder / "rc").exists():  # ended before the book's tests (-x, Ctrl-C): stop it
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def pytest_configure(config):
    """The controller of an xdist run names the folder its workers share: their one book build and their locks."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        os.environ[SHARED_ENV] = tempfile.mkdtemp(prefix="pipeline-kit-book-")
        config._book_shared = Path(os.environ[SHARED_ENV])


def pytest_collection_modifyitems(session, config, items):
    """Start the book build if a selected test needs it, and run the files of those tests last."""
    needing = [item for item in items if BOOK_FIXTURE in getattr(item, "fixturenames", ())]
    if not needing:
        return
    # whole files go last: under pytest -n a file is one work unit, and a unit goes out where its first test stands
    files = {item.path for item in needing}
    items[:] = [item for item in items if item.path not in files] + [item for item in items if item.path in files]
    if not config.option.collectonly and not os.environ.get("PIPELINE_KIT_BOOK_HTML") and not _build:
        _claim_build()


def pytest_sessionfinish(session, exitstatus):
    shared = getattr(session.config, "_book_shared", None)
    if shared is not None:  # the xdist controller: every worker is done
        _stop_build(shared)
    elif "proc" in _build and not os.environ.get(SHARED_ENV):  # a run without workers
        _stop_build(_build["dir"])
        _build["proc"].wait()


@pytest.fixture(autouse=True)
def cores_to_itself(request):
    """Under xdist, a test marked ``alone`` (it compares measured times with a prediction, so each of its ranks needs
    a core) runs while no sibling worker runs a test: every test holds a shared lock, an ``alone`` one the
    exclusive lock, and a turnstile lets no new test start while an ``alone`` one waits."""
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    with open(Path(shared) / "turnstile", "a") as turn, open(Path(shared) / "cores", "a") as cores:
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(cores, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(cores, fcntl.LOCK_UN)


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
        _claim_build()
    out = _build["dir"]
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while not (out / "rc").exists():
        assert time.monotonic() < deadline, f"jupyter-book build did not finish in {BUILD_TIMEOUT_S} s"
        time.sleep(0.5)
    rc = int((out / "rc").read_text())
    text = (out / "build.log").read_text(errors="replace") if (out / "build.log").exists() else ""
    assert rc == 0, f"jupyter-book build failed (exit {rc}):\n{text[-9000:]}"
    return out / "_build" / "html"


@pytest.fixture
def one_thread():
    """Lab 6's checks build tiny torch models by the dozen: on a shared 2-core machine intra-op threads only
    fight each other (7x slower here), so tests that run them in-process run on one thread (restored after)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
