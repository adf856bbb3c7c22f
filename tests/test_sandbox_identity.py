"""Issue 33: nothing one grade does reaches another, nothing outside the notebook changes its score, and a machine
failure is never a score.

Each attack is graded for real and, where it could work at all, graded once more with the sandbox off: there it
gets points, so the zero under the sandbox is the sandbox's doing, not a broken attack.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from lab_grading import ROOT, SOLUTIONS, with_answers

from pipeline_kit.grading import identity, sandbox
from pipeline_kit.grading.engine import grade
from pipeline_kit.grading.notebook import EXIT_NOT_GRADED, NotGraded, nbgrader_meta

LAB2 = "lab02_timelines"
TOKEN = "pk-identity-5c1e"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a uid per sandbox is the root case")
X86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the keyring calls' numbers are x86-64's")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux's")


def _answers(lab: str) -> dict[str, str]:
    """The model answer cells of ``lab``: grade_id -> source."""
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    return {nbgrader_meta(c)["grade_id"]: c.source for c in nb.cells if nbgrader_meta(c).get("solution")}


def _with_extra(path: Path, source: str) -> Path:
    """``path`` with one more code cell of the student's at the end (the kernel runs it like any other)."""
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(nb, str(path))
    return path


def _score(report) -> float:
    return sum(c.points for c in report.checks)


# -- 1. keyrings: one student's kernel answers another's ----------------------------------------------------------

KEYS = r'''
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def _pk_put(name, text):
    data = text.encode()
    _libc.syscall(248, b"user", name.encode(), data, len(data), ctypes.c_long(-4))   # add_key to the user keyring
def _pk_get(name):
    key = _libc.syscall(250, 10, ctypes.c_long(-4), b"user", name.encode(), 0)       # keyctl(KEYCTL_SEARCH)
    buf = ctypes.create_string_buffer(1 << 16)
    n = _libc.syscall(250, 11, ctypes.c_long(key), buf, 1 << 16) if key > 0 else -1    # keyctl(KEYCTL_READ)
    return buf.raw[:n].decode() if n > 0 else "raise NotImplementedError()"
'''


def _unlink_keys() -> None:
    """Remove this test's keys from the host's user keyring (the sandbox-off grades put them there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    for gid in _answers(LAB2):
        key = libc.syscall(250, 10, ctypes.c_long(-4), b"user", f"{TOKEN}-{gid}".encode(), 0)
        if key > 0:
            libc.syscall(250, 3, ctypes.c_long(key))  # KEYCTL_REVOKE


@X86_64
def test_a_key_left_by_one_grade_answers_nothing_in_the_next(tmp_path):
    answers = _answers(LAB2)
    giver = _with_extra(with_answers(tmp_path, LAB2, {}, "giver"),
                        KEYS + "".join(f"_pk_put({f'{TOKEN}-{g}'!r}, {src!r})\n" for g, src in answers.items()))
    taker = with_answers(tmp_path, LAB2, {g: KEYS + f"exec(_pk_get({f'{TOKEN}-{g}'!r}))" for g in answers},
                         "taker")
    try:
        assert _score(grade(giver, seed=1)) == 20
        assert _score(grade(taker, seed=1)) == 0, "a key of an earlier grade answered for this one"
        _unlink_keys()
        grade(giver, seed=1, sandboxed=False)  # the attack works where nothing stops it
        assert _score(grade(taker, seed=1, sandboxed=False)) == 20
    finally:
        _unlink_keys()


# -- 2. the sandbox's view of the machine, from inside ------------------------------------------------------------

PROBE = r'''
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    return 0 if libc.syscall(nr, *args) >= 0 else ctypes.get_errno()
out = {"uid": os.getuid(), "sys_path": sys.path, "etc": sorted(os.listdir("/etc")), "sys_fs": os.listdir("/sys/fs"),
       "cgroup": open("/proc/self/cgroup").read().split(),
       "add_key": call(248, b"user", b"x", b"y", 1, ctypes.c_long(-4)), "keyctl": call(250, 0, ctypes.c_long(-4), 0),
       "request_key": call(249, b"user", b"x", 0, ctypes.c_long(-4)), "memfd_create": call(319, b"m", 0),
       "shmget": call(29, 0, 1 << 20, 0o1600), "unshare": call(272, 0x10000000),
       "clone_newuser": call(56, 0x10000000 | 17, 0, 0, 0, 0), "mount": call(165, b"none", b"/tmp", b"tmpfs", 0, 0),
       "opt": os.path.exists("/opt"), "pythonpath": os.environ.get("PYTHONPATH")}
print(json.dumps(out))
'''


def _probe(tmp_path: Path, env: dict | None = None) -> dict:
    """What a program in a kernel's sandbox sees (its stdout, read by the test, never by a grader)."""
    work = tmp_path / "probe"
    work.mkdir()
    read, write = os.pipe()
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        program = sandbox.Program([sys.executable, "-c", PROBE], sandbox.environment(sandbox.OWN), sandbox.OWN)
        box = sandbox.start([program], work, sandbox.kernel_paths(SOLUTIONS), [], None, stdout=write)
    finally:
        os.environ.clear()
        os.environ.update(old)
        os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    uid = box.user.uid if box.user else None
    box.stop()
    if uid is not None:
        assert identity.processes_of(uid) == [], "a process of the sandbox's uid outlived it"
    return json.loads(data)


@X86_64
def test_inside_the_sandbox_no_shared_kernel_object_no_host_folder(tmp_path, monkeypatch):
    course = tmp_path / "course"
    (course / "alice").mkdir(parents=True)
    (course / "secret.txt").write_text(TOKEN)
    monkeypatch.chdir(course)
    seen = _probe(tmp_path, {"PYTHONPATH": f".:{course}"})
    refused = {name: errno.errorcode.get(seen[name], seen[name]) for name in
               ("add_key", "keyctl", "request_key", "shmget", "unshare", "clone_newuser", "mount")}
    assert refused == dict.fromkeys(refused, "EPERM"), refused
    assert seen["memfd_create"] == errno.ENOSYS  # memory no limit would count: "not here", libraries fall back
    if os.geteuid() == 0:
        assert seen["uid"] in identity.UIDS
    assert not any(str(course) in p for p in seen["sys_path"]), seen["sys_path"]
    assert seen["pythonpath"] is None
    assert not seen["opt"] and seen["sys_fs"] == []
    assert all(line.endswith(":/") for line in seen["cgroup"]), seen["cgroup"]  # no other sandbox's cgroup named
    assert set(seen["etc"]) <= {Path(p).name for p in sandbox.ETC} | {"passwd", "group"}, seen["etc"]


@ROOT_ONLY
def test_two_sandboxes_never_share_a_uid_and_a_uid_in_use_is_never_taken(monkeypatch):
    held = subprocess.Popen([sys.executable, "-c", "import os, time; os.setuid(%d); time.sleep(60)"
                             % identity.UIDS.start])
    try:
        deadline = time.monotonic() + 10
        while not identity.processes_of(identity.UIDS.start) and time.monotonic() < deadline:
            time.sleep(0.05)
        monkeypatch.setattr(identity, "UIDS", range(identity.UIDS.start, identity.UIDS.start + 3))
        first = identity.take()
        second = identity.take()
        assert {first.uid, second.uid} == {identity.UIDS.start + 1, identity.UIDS.start + 2}
        with pytest.raises(identity.NoIdentity):
            identity.take()  # the third is a foreign process's: never taken
        first.release()
        assert identity.take().uid == first.uid  # given back: taken again
    finally:
        held.kill()
        held.wait()


# -- 3. one process budget per grade -------------------------------------------------------------------------------

HOG = ("import os, time\nfor _ in range({n}):\n    if os.fork() == 0:\n"
       "        os.execv('/bin/sleep', ['sleep', '600'])\n")  # (a small program: the budget is processes, not memory)


def _hold(n: int, uid: int) -> subprocess.Popen:
    """A foreign job: ``n`` sleeping processes of ``uid`` (a process group the test ends)."""
    code = f"import os, time\nos.setgid({uid})\nos.setuid({uid})\n" + HOG.format(n=n) + "time.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 60
    while len(identity.processes_of(uid)) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(identity.processes_of(uid)) >= n, "the foreign job did not start"
    return proc


@ROOT_ONLY
def test_model_answers_get_full_marks_beside_a_hog_and_a_foreign_job(tmp_path):
    """A class of model answers, graded two at a time, beside a classmate who starts 470 processes and while a
    foreign job holds 500 processes of ``nobody``: every model answer gets full marks, the batch exits 0."""
    course = tmp_path / "class"
    for name in ("alice", "bob", "carol"):
        (course / name).mkdir(parents=True)
        with_answers(course / name, LAB2, {}, LAB2)
    hog = with_answers(tmp_path, LAB2, {}, "hog")
    _with_extra(hog, HOG.format(n=470) + "time.sleep(15)\n")
    (course / "mallory").mkdir()
    hog.rename(course / "mallory" / f"{LAB2}.ipynb")
    foreign = _hold(500, 65534)
    try:
        proc = subprocess.run([sys.executable, "-m", "pipeline_kit", "grade", str(course), "--jobs", "2", "--json"],
                              capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    finally:
        os.killpg(foreign.pid, 9)
        foreign.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["student"]: r for r in json.loads(proc.stdout)["rows"]}
    assert {s: (r["score"], r["error"]) for s, r in rows.items()} == {s: (20, "") for s in rows}, rows


# -- 4. a failure of the machine is never a score ------------------------------------------------------------------

def test_a_kernel_that_cannot_start_is_not_graded_after_one_retry(tmp_path):
    """Forced for real: the grader's process limit set too low for a kernel to start (the grader's own constant,
    which no notebook can reach).  The grade is tried twice, then exits 3 with one line and no report."""
    code = ("import sys\nimport pipeline_kit.grading.sandbox as s\ns.PROCESS_LIMIT = 12\n"
            "from pipeline_kit.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", code, "grade", str(SOLUTIONS / f"{LAB2}.ipynb"), "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == EXIT_NOT_GRADED, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "python -m pipeline_kit grade: not graded: the kernel could not start: the kernel did not start (twice: the "
        "grade was tried again in a fresh sandbox)"]


def test_a_given_cell_that_fails_before_the_students_code_is_the_machines(tmp_path, monkeypatch):
    """A given cell that fails in a fresh kernel before any answer ran (here: a lab's imports with too few
    processes for torch's threads) withholds the grade; it never blames an answer cell."""
    monkeypatch.setattr(sandbox, "PROCESS_LIMIT", 16)
    monkeypatch.setenv("OMP_NUM_THREADS", "32")  # torch's threads, more than 16 (the suite's workers set 1)
    with pytest.raises(NotGraded, match="given cell .* failed before any of the student's code ran"):
        grade(SOLUTIONS / "lab03_bubble.ipynb", seed=1, timeout=20)
