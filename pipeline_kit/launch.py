"""Start a real ``torchrun`` job from Python (labs, the book): the same command a user types.

Why a helper: notebooks need the job's output as text, a bound on its run time, and one thread per
process on an oversubscribed laptop -- and nothing here may pick the backend, so the same call uses
gloo on a CPU and NCCL on GPUs (``pipeline_kit.run`` chooses from the hardware).

Replay, for the test suite only: with ``PIPELINE_KIT_TORCHRUN_REPLAY=DIR`` set, a job whose recording is
in ``DIR`` is not run; its recorded return code, stdout, stderr and the files it wrote (``--trace`` /
``--json``) come back instead.  A job without a recording runs for real.  With
``PIPELINE_KIT_TORCHRUN_RECORD=1`` too, every job runs for real and its recording is (re)written.  The
tests grade typical wrong answers with it, where the run is not what is being tested; the solutions'
full-marks gradings and nbval always run the real jobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLAY_ENV, RECORD_ENV = "PIPELINE_KIT_TORCHRUN_REPLAY", "PIPELINE_KIT_TORCHRUN_RECORD"
OUTPUT_OPTIONS = ("--trace", "--json")  # options of pipeline_kit.run that name a file the job writes


def torchrun(nproc: int, *args: str, module: str = "pipeline_kit.run", timeout: float = 300,
             cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``torchrun --standalone --nproc-per-node NPROC -m MODULE ARGS...`` and return its output.

    Never raises on a failed job (look at ``returncode``, ``stdout`` and ``stderr``); raises
    ``subprocess.TimeoutExpired`` only if the whole job outlives ``timeout`` seconds.
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    args = [str(a) for a in args]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", module, *args]
    replay = os.environ.get(REPLAY_ENV)
    recording = Path(replay) / f"{_key(nproc, module, args)}.json" if replay else None
    if recording is not None and recording.is_file() and not os.environ.get(RECORD_ENV):
        return _replay(recording, cmd, args)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=env,
                          check=False)
    if recording is not None and os.environ.get(RECORD_ENV):
        _record(recording, nproc, module, args, proc)
    return proc


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


def _record(path: Path, nproc: int, module: str, args: list[str], proc: subprocess.CompletedProcess) -> None:
    files = {opt: Path(p).read_text() for opt, p in _output_files(args).items() if Path(p).is_file()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"nproc": nproc, "module": module, "args": _shown(args), "returncode": proc.returncode,
                                "stdout": proc.stdout, "stderr": proc.stderr, "files": files}, indent=1) + "\n")


def _replay(path: Path, cmd: list[str], args: list[str]) -> subprocess.CompletedProcess:
    rec = json.loads(path.read_text())
    for opt, target in _output_files(args).items():
        if opt in rec["files"]:
            Path(target).write_text(rec["files"][opt])
    return subprocess.CompletedProcess(cmd, rec["returncode"], rec["stdout"], rec["stderr"])
