"""Helpers for the lab tests: grade a solution with some answers replaced, and say exactly which checks lose.

Each lab's test file grades *one* notebook carrying all the lab's independent typical wrong answers (and some
equivalent right answers written differently), and asserts that exactly the checks they break lose their
points, each with its own feedback.  The real ``torchrun`` jobs of those gradings are replayed from
``tests/data/torchrun`` (:mod:`pipeline_kit.launch`): the jobs are not what those tests test, and the
solutions' full-marks gradings and nbval run them for real.  A recording made with other kit sources is stale
and not replayed (its job runs for real; the suite's last lines list it): ``python tests/rerecord_torchrun.py``
records every job again.  A new job is recorded with ``PIPELINE_KIT_TORCHRUN_RECORD=1 python -m pytest
tests/test_lab0*.py -k wrong_answers``; the student's kernel replays recordings too but cannot write them, so a
job only a given cell starts is recorded by calling the same function in the host with both variables set
(e.g. ``torchrun(4, *lab05.RUN, "--inject", "crash:rank=2,mb=1", timeout=120)``, as the lab's given cell does).
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path

import nbformat

from pipeline_kit.grading.engine import grade
from pipeline_kit.grading.notebook import nbgrader_meta
from pipeline_kit.launch import REPLAY_ENV

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
LABS = ROOT / "labs"
RECORDINGS = ROOT / "tests" / "data" / "torchrun"


# Every process this test run starts inherits this mark (the sandbox's launcher too: it keeps the grader's
# environment), so a test looks only at sandboxes of its own run, never at another run's on the same machine.
# Each pytest-xdist worker is a run of its own: its checks must not take a sibling's sandboxes for leaks.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if not os.environ.get("PIPELINE_KIT_TEST_RUN", "").endswith(f"-{_WORKER}"):
    os.environ["PIPELINE_KIT_TEST_RUN"] = f"{uuid.uuid4().hex}-{_WORKER}"
RUN_MARK = os.environ["PIPELINE_KIT_TEST_RUN"]


def _ours(pid: int) -> bool:
    """Whether ``pid`` or one of its ancestors carries this run's mark (a kernel's environment is the sandbox's,
    and pid 1 of a sandbox is not readable: their launcher carries it)."""
    mark = f"PIPELINE_KIT_TEST_RUN={RUN_MARK}".encode()
    for _ in range(64):
        if pid <= 1:
            return False
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return True
        except OSError:
            pass
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def sandbox_processes() -> list[int]:
    """Processes of a grade's sandbox that this test run started, still alive anywhere on the machine: its
    launcher, its relay or a program that runs in it (their command lines name the launcher, the relay or the
    sandbox's own folder)."""
    marks = (b"_sandbox_init.py", b"_kernel_relay.py", b"/run/student/")
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if any(m in cmdline for m in marks) and _ours(int(proc.name)):
            out.append(int(proc.name))
    return out


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


@contextmanager
def replayed_torchrun(env: str = REPLAY_ENV):
    """``pipeline_kit.launch.torchrun`` replays the recorded jobs (and runs any other for real) meanwhile: in
    the grader and the kernel, or with ``env=KERNEL_REPLAY_ENV`` in the student's kernel only."""
    old = os.environ.get(env)
    os.environ[env] = str(RECORDINGS)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = old


def grade_answers(tmp_path: Path, lab: str, answers: dict[str, str], timeout: float = 60.0):
    """Grade the solution of ``lab`` with ``answers`` in place of its answer cells, torchrun jobs replayed."""
    with replayed_torchrun():
        return grade(with_answers(tmp_path, lab, answers), timeout=timeout)


def assert_partial(report, failing: dict[str, str]) -> None:
    """Exactly the checks in ``failing`` lose points (all of them, or a share where only some of a check's parts
    failed), each with feedback containing the given text."""
    by_name = {c.name: c for c in report.checks}
    for name, text in failing.items():
        assert name in by_name, f"no check {name}; checks: {list(by_name)}"
        check = by_name[name]
        assert check.points < check.max_points, f"{name} passed but should fail"
        assert text in check.feedback, f"{name}: expected {text!r} in feedback {check.feedback!r}"
    for check in report.checks:
        if check.name not in failing:
            assert check.points == check.max_points, f"{check.name} lost points: {check.feedback}"
    assert 0 < report.score < report.max_score
