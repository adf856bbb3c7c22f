"""Run the command line in this process -- or in a child -- under a time limit and a memory cap.

The input-boundary tests call ``cli.main(argv)`` thousands of times; a child process per call
would cost a second each, so most calls run here, with the output captured, a wall-clock alarm
and an address-space cap (``RLIMIT_AS``) of 4 GiB above what the process already uses.  A hang
becomes a ``TimeoutError`` and a runaway allocation a ``MemoryError``: either fails the test.
A handful of checks run a real ``python -m pipeline_kit`` under a 4 GiB cap, as a user would.
"""

from __future__ import annotations

import io
import os
import re
import resource
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from pipeline_kit import cli

ROOT = Path(__file__).resolve().parent.parent
CAP = 4 * 2**30


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def _address_space() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        return int(re.search(r"VmSize:\s+(\d+) kB", fh.read()).group(1)) * 1024


@contextmanager
def bounded(seconds: float, extra_bytes: int = CAP):
    """Fail with TimeoutError after ``seconds`` and with MemoryError past ``extra_bytes`` more address space."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang or an unbounded computation")

    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + extra_bytes
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, old_handler)


def run_cli(*argv: str, seconds: float = 20) -> Result:
    """``python -m pipeline_kit ARGV`` in this process: exit code, stdout, stderr, seconds."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with bounded(seconds), redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse: --help, a bad option
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return Result(code, out.getvalue(), err.getvalue(), time.monotonic() - t0)


def _cap_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def run_capped(*argv: str, module: str = "pipeline_kit", timeout: float = 60) -> Result:
    """A real ``python -m MODULE ARGV`` under a 4 GiB address-space cap."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env, preexec_fn=_cap_child, check=False)
    return Result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0)
