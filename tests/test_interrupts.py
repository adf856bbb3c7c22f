"""Ctrl-C and SIGTERM end every entry point with one line; a run's output paths are checked first;
``launch.torchrun`` never leaves a worker behind."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from bounded import ROOT, run_capped

from pipeline_kit import launch
from pipeline_kit.interrupts import TEMPORARY_FILES, interrupts_end_in_one_line, write_file_atomically

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
SMALL = ["--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64", "--microbatches", "2"]


def catches(pid: int, signum: int) -> bool:
    """True once process ``pid`` has a handler for ``signum`` (the SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        mask = int(next(line for line in fh if line.startswith("SigCgt:")).split()[1], 16)
    return bool(mask >> (signum - 1) & 1)


def processes_with(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and int(pid) != os.getpid():
            found.append(f"{pid}: {cmd[:120]}")
    return found


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_command_line_says_interrupted_once(tmp_path, signum, code):
    config = tmp_path / "big.json"
    config.write_text('{"layers": 1024}')  # balancing 1024 layers over 256 stages takes half a minute
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_kit", "balance", "--config", str(config), "--pp", "256"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    deadline = time.monotonic() + 30
    # SIGTERM is caught once the command's handlers are in (Python catches SIGINT from the start)
    while not catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code and err == "python -m pipeline_kit: interrupted\n", (proc.returncode, err)


def test_interrupted_block_runs_its_cleanup_then_reports():
    cleaned = []
    with interrupts_end_in_one_line("prog") as outcome:
        try:
            raise KeyboardInterrupt
        finally:
            cleaned.append(True)
    assert cleaned == [True] and outcome.exit_code == 130
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is gone again


def test_an_atomic_write_is_whole_or_absent(tmp_path):
    target = tmp_path / "out.json"
    write_file_atomically(str(target), '{"a": 1}')
    assert target.read_text() == '{"a": 1}' and oct(target.stat().st_mode & 0o777) != oct(0o600)
    with pytest.raises(TypeError):
        write_file_atomically(str(tmp_path / "broken.json"), 5)  # fails half-way: nothing may be left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"] and not TEMPORARY_FILES


def test_a_run_stops_on_ctrl_c_with_one_line_and_no_half_written_output(tmp_path):
    out = tmp_path / "summary.json"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_kit.run", "--steps", "100000", *SMALL, "--json",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    for line in proc.stdout:  # wait until it trains
        if line.startswith("step 1/"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["torchrun ... -m pipeline_kit.run: interrupted (Ctrl-C)"], err
    assert list(tmp_path.iterdir()) == []


def test_output_paths_and_backend_are_refused_before_the_first_step(tmp_path):
    ok = tmp_path / "ok.json"
    t0 = time.monotonic()
    proc = launch.torchrun(2, "--json", "/nonexistent/dir/x.json", "--trace", str(ok), *SMALL, timeout=120)
    assert proc.returncode != 0 and not ok.exists()
    ours = [line for line in proc.stderr.splitlines() if "pipeline_kit.run" in line and "error" in line]
    assert ours == ["torchrun ... -m pipeline_kit.run: error: argument --json: cannot write '/nonexistent/dir/x.json': "
                    "the folder '/nonexistent/dir' does not exist"], proc.stderr[-2000:]
    assert time.monotonic() - t0 < 60
    same = run_capped("--json", str(ok), "--trace", str(ok), module="pipeline_kit.run")
    assert same.code == 2 and same.err_lines == ["torchrun ... -m pipeline_kit.run: error: arguments --json and "
                                                 "--trace name the same file; give each its own"]


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a machine with a GPU may well have NCCL")
def test_nccl_on_a_cpu_machine_is_one_line():
    result = run_capped("--backend", "nccl", *SMALL, module="pipeline_kit.run", timeout=120)
    assert result.code == 2 and result.err_lines == [
        "torchrun ... -m pipeline_kit.run: error: argument --backend: --backend nccl needs CUDA devices, and none was "
        "found; use --backend gloo or leave it out"], result.err


def test_launch_timeout_leaves_no_worker_behind(monkeypatch):
    """Workers run in sessions of their own, so killing torchrun alone orphans them; even a stubborn
    worker (SIGTERM ignored) is killed once the grace period is over.  (Workers that obey SIGTERM go
    the same way in the next test.)"""
    monkeypatch.setattr(launch, "GRACE_S", 3.0)
    marker = f"pk-{uuid.uuid4().hex[:12]}"
    args = [marker, "--ignore-sigterm"]
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as info:
        launch.torchrun(2, *args, module="tests.sleeper", timeout=10)
    assert info.value.output.count("ready rank") == 2, info.value.output  # both workers were up
    assert time.monotonic() - t0 < 10 + 2 * 3.0 + 5
    assert processes_with(marker) == []


def test_an_interrupted_caller_stops_the_whole_job_and_a_killed_one_too():
    """Ctrl-C in the program that called launch.torchrun (a notebook's interrupt button) stops every worker
    before the KeyboardInterrupt goes on; if that program is killed outright, torchrun still stops them."""
    for signum in (signal.SIGINT, signal.SIGKILL):
        marker = f"pk-{uuid.uuid4().hex[:12]}"
        script = ("from pipeline_kit import launch\n"
                  "try:\n"
                  f"    launch.torchrun(2, {marker!r}, module='tests.sleeper', timeout=300)\n"
                  "except KeyboardInterrupt:\n"
                  "    print('caller interrupted', flush=True)\n")
        # (SIGINT as a notebook's kernel has it: a suite started in the background by a shell without job
        # control inherits SIGINT ignored, and so would the caller, which then never sees its Ctrl-C)
        caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, cwd=ROOT, env=ENV,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while len([p for p in processes_with(marker) if "tests.sleeper" in p and "torch.distributed" not in p]) < 2:
            assert time.monotonic() < deadline, processes_with(marker)
            time.sleep(0.1)
        caller.send_signal(signum)
        out, _ = caller.communicate(timeout=60)
        assert ("caller interrupted" in out) == (signum == signal.SIGINT)
        deadline = time.monotonic() + 30  # after SIGKILL, torchrun's own teardown takes a moment
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_with(marker) == [], signum
