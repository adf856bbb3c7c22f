"""Start a real ``torchrun`` job from Python (labs, the book): the same command a user types.

Why a helper: notebooks need the job's output as text, a bound on its run time, and one thread per
process on an oversubscribed laptop -- and nothing here may pick the backend, so the same call uses
gloo on a CPU and NCCL on GPUs (``pipeline_kit.run`` chooses from the hardware).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def torchrun(nproc: int, *args: str, module: str = "pipeline_kit.run", timeout: float = 300,
             cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``torchrun --standalone --nproc-per-node NPROC -m MODULE ARGS...`` and return its output.

    Never raises on a failed job (look at ``returncode``, ``stdout`` and ``stderr``); raises
    ``subprocess.TimeoutExpired`` only if the whole job outlives ``timeout`` seconds.
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", module, *map(str, args)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=env,
                          check=False)
