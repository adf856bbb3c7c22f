"""Launching real torchrun processes from tests."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "torchrun_worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(nproc: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--standalone", *extra]


def run(cmd: list[str], timeout: float = 240) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False)
    return proc, time.monotonic() - t0


def run_worker(nproc: int, runs: list[list[str]], timeout: float = 240) -> subprocess.CompletedProcess:
    proc, _ = run(torchrun_cmd(nproc, str(WORKER), json.dumps(runs)), timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def load(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
