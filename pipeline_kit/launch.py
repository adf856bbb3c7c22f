"""Start a real ``torchrun`` job from Python (labs, the book): the same command a user types.

Why a helper: notebooks need the job's output as text, a bound on its run time, and one thread per
process on an oversubscribed laptop -- and nothing here may pick the backend, so the same call uses
gloo on a CPU and NCCL on GPUs (``pipeline_kit.run`` chooses from the hardware).

Replay, for the test suite only: with ``PIPELINE_KIT_TORCHRUN_REPLAY=DIR`` set, a job whose recording is
in ``DIR`` is not run; its recorded return code, stdout, stderr and the files it wrote (``--trace`` /
``--json``) come back instead.  A job without a recording runs for real.  With
``PIPELINE_KIT_TORCHRUN_RECORD=1`` too, every job runs for real and its recording is (re)written.  A
recording remembers the kit's source it was made with (:func:`source_digest`): once that source changes, the
recording is stale and the job runs for real again, so a test never passes on the output of code that is
gone; ``stale_recordings`` lists them (the test suite prints them at its end, to be recorded again).  The
tests grade the solutions, the untouched labs and typical wrong answers with it (the student's kernel
replays too, see :func:`pipeline_kit.grading.sandbox.replay_dir`), where the run is not what is being
tested; nbval runs every job of the solutions, and the checks on them, for real, and one grading test
runs a grader's own job for real.

Sharing, for a class's batch grade: with ``PIPELINE_KIT_TORCHRUN_SHARE=DIR`` (set by
:mod:`pipeline_kit.grading.batch` for the grader's processes only), a job recorded in ``DIR`` replays and any
other runs for real and is recorded there, so a job that does not depend on the student (lab 5's hangs, a fixed
reference run) runs once per batch.  The students' kernels see ``DIR`` read-only, as a replay folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRACE_S = 10.0  # after SIGTERM, how long torchrun gets to stop its workers before everything is killed
REPLAY_ENV, RECORD_ENV = "PIPELINE_KIT_TORCHRUN_REPLAY", "PIPELINE_KIT_TORCHRUN_RECORD"
SHARE_ENV = "PIPELINE_KIT_TORCHRUN_SHARE"  # a class batch's warm-up: records its labs' fixed jobs into this folder
FIXED_ENV = "PIPELINE_KIT_TORCHRUN_FIXED"  # a class batch's grade: replays those, and records nothing of its own
replayed: list[str] = []  # the jobs this process replayed instead of running (a batch grade's report lists them)
OUTPUT_OPTIONS = ("--trace", "--json")  # options of pipeline_kit.run that name a file the job writes


def torchrun(nproc: int, *args: str, module: str = "pipeline_kit.run", timeout: float = 300,
             cwd: str | os.PathLike | None = None, rerun: bool = False) -> subprocess.CompletedProcess:
    """Run ``torchrun --standalone --nproc-per-node NPROC -m MODULE ARGS...`` and return its output.

    Never raises on a failed job (look at ``returncode``, ``stdout`` and ``stderr``); raises
    ``subprocess.TimeoutExpired`` only if the whole job outlives ``timeout`` seconds.  On a timeout,
    or when the caller is interrupted (Ctrl-C, a notebook's interrupt), the job is stopped as a
    whole before this returns or raises: torchrun gets SIGTERM and stops its workers, and whatever
    is left of the job after ``GRACE_S`` seconds is killed -- no worker outlives the call.  ``rerun``: run it
    even where a recording could replay (a retry of a run whose output was incomplete), recording it again.
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    args = [str(a) for a in args]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", module, *args]
    share, replay = os.environ.get(SHARE_ENV), os.environ.get(REPLAY_ENV)
    batch = share or os.environ.get(FIXED_ENV)  # (a grade never writes the batch's folder: no student's job is shared)
    key = f"{_key(nproc, module, args)}.json"
    if not os.environ.get(RECORD_ENV) and not rerun:
        for folder in [f for f in (batch, None if share else replay) if f]:
            done = _replay(Path(folder) / key, cmd, args) if (Path(folder) / key).is_file() else None
            if done is not None:
                if folder == batch:
                    replayed.append(" ".join(["torchrun", str(nproc), *_shown(args)]))
                return done
    recording = Path(share) / key if share else Path(replay) / key if replay and os.environ.get(RECORD_ENV) else None
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    # its own session: a terminal's Ctrl-C reaches only us, and we stop the job in order; and should this
    # process die without a chance to (SIGKILL), torchrun is sent SIGTERM and stops its workers itself
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd or ROOT, env=env,
                            start_new_session=True, preexec_fn=_terminate_when_parent_dies)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout, stderr = stop_job(proc)
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr) from None
    except BaseException:  # KeyboardInterrupt above all: stop the job, then let the interrupt go on
        stop_job(proc)
        raise
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if recording is not None:
        _record(recording, nproc, module, args, done)
    return done


def _terminate_when_parent_dies() -> None:
    """In the child, before exec: Linux's ``PR_SET_PDEATHSIG`` -- SIGTERM when the launching thread dies."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the timeout and interrupt paths still stop the job
        pass


def stop_job(proc: subprocess.Popen) -> tuple[str, str]:
    """Stop a torchrun job and every process it started; return what it printed.

    torchrun starts each worker in a session of its own, so killing torchrun's process group would
    miss them: the workers are found first (every descendant, from ``/proc``), torchrun is asked to
    stop them (SIGTERM), and after ``GRACE_S`` seconds every one of them still alive is killed.
    """
    job = _descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        stdout, stderr = None, None
        job += [pid for pid in _descendants(proc.pid) if pid not in job]  # workers started meanwhile
    for pid in [proc.pid, *job]:
        try:
            os.killpg(pid, signal.SIGKILL)  # torchrun and each worker lead their own group
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    if stdout is None:
        try:
            stdout, stderr = proc.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:  # a process outside the job we saw still holds the pipes: stop reading
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
            stdout, stderr = "", ""
    deadline = time.monotonic() + GRACE_S
    while any(_alive(pid) for pid in job) and time.monotonic() < deadline:
        time.sleep(0.05)
    return stdout, stderr


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``; elsewhere none, and only torchrun is signalled)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped by its parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _output_files(args: list[str]) -> dict[str, str]:
    """option -> the path given for it, for the options that name a file the job writes."""
    return {a: args[i + 1] for i, a in enumerate(args[:-1]) if a in OUTPUT_OPTIONS}


def _shown(args: list[str]) -> list[str]:
    """The arguments with output paths (temporary names) replaced by a placeholder."""
    outputs = {i + 1 for i, a in enumerate(args[:-1]) if a in OUTPUT_OPTIONS}
    return [f"<{args[i - 1]} FILE>" if i in outputs else a for i, a in enumerate(args)]


def _key(nproc: int, module: str, args: list[str]) -> str:
    """A job's identity: its size, module and arguments, output paths left out."""
    return hashlib.sha256(json.dumps([nproc, module, _shown(args)]).encode()).hexdigest()[:20]


@functools.cache
def source_digest() -> str:
    """A digest of the code a job runs: every ``.py`` of the kit but the grading engine and the course's checks
    (which no job imports: they sit above the runtime, ``tests/test_import_layers.py``).

    Coarse on purpose: a change to any module the runtime might reach makes the recordings stale, and a stale
    recording only costs a real run; a digest too narrow would replay the output of code that changed.
    """
    package = ROOT / "pipeline_kit"
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if not rel.startswith(("grading/", "course/")):
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def stale_recordings(folder: str | os.PathLike) -> list[Path]:
    """The recordings in ``folder`` made with other kit sources than these (their jobs would run for real)."""
    return [p for p in sorted(Path(folder).glob("*.json"))
            if json.loads(p.read_text()).get("source") != source_digest()]


def _record(path: Path, nproc: int, module: str, args: list[str], proc: subprocess.CompletedProcess) -> None:
    files = {opt: Path(p).read_text() for opt, p in _output_files(args).items() if Path(p).is_file()}
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")  # whole or not at all: another grade may replay it
    part.write_text(json.dumps({"nproc": nproc, "module": module, "args": _shown(args), "source": source_digest(),
                                "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                                "files": files}, indent=1) + "\n")
    os.chmod(part, 0o644)  # the students' kernels read a batch's shared recordings
    os.replace(part, path)


def _replay(path: Path, cmd: list[str], args: list[str]) -> subprocess.CompletedProcess | None:
    """The recorded job, its files written where this call asked; None if the recording is stale."""
    rec = json.loads(path.read_text())
    if rec.get("source") != source_digest():
        return None
    for opt, target in _output_files(args).items():
        if opt in rec["files"]:
            Path(target).write_text(rec["files"][opt])
    return subprocess.CompletedProcess(cmd, rec["returncode"], rec["stdout"], rec["stderr"])
