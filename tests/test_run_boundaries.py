"""``pipeline_kit.run`` at its last input boundaries, on real processes: the launcher's variables, a busy
``MASTER_PORT``, and a disk too small for the outputs -- each one line and exit 2 before step 1 -- and the
room reserved for ``--trace`` / ``--json`` still there when the disk fills during the run."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from bounded import ROOT
from runtime_helpers import free_port, run, torchrun_cmd

from pipeline_kit.runtime.outputs import RESERVATION_PREFIX, summary_bytes, trace_bytes
from pipeline_kit.schedules import build_schedule
from pipeline_kit.trace import load_trace

PROG = "torchrun ... -m pipeline_kit.run: error: "
SMALL = ["--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64", "--microbatches", "2"]
LAUNCHER = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "ROLE_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")
BARE = {k: v for k, v in os.environ.items() if k not in LAUNCHER}
BARE.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def start(*argv: str, **variables: str) -> subprocess.Popen:
    """``python -m pipeline_kit.run ARGV`` in an environment with no launcher variables but ``variables``."""
    return subprocess.Popen([sys.executable, "-m", "pipeline_kit.run", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**BARE, **variables})


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, list[str]]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err.strip().splitlines()


def wait_for_step_one(proc: subprocess.Popen) -> None:
    for line in proc.stdout:
        if line.startswith("step 1/"):
            return
    pytest.fail(f"the run ended before step 1: {proc.communicate()}")


@contextmanager
def small_disk(folder: Path, size: str):
    """A tmpfs of ``size`` mounted at ``folder`` for the block: a disk that fills (needs root)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> int:
    """Write into ``folder`` until its disk is full; the bytes written."""
    written = 0
    with open(folder / "filler", "wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(b"x" * 4096)
            except OSError:
                return written


@pytest.mark.parametrize("variables,message", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE 'abc' is not an integer from 1 to 1024 (the number of processes in the job, "
                            "at most MAX_RANKS; torchrun sets it)"),
    ({"RANK": "-1"}, "RANK '-1' is not an integer from 0 to 0 (this process's number, below WORLD_SIZE 1; torchrun "
                     "sets it)"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
     "RANK '2' is not an integer from 0 to 1 (this process's number, below WORLD_SIZE 2; torchrun sets it)"),
    ({"LOCAL_RANK": "one"}, "LOCAL_RANK 'one' is not an integer from 0 to 0 (this process's number on its machine, "
                            "below LOCAL_WORLD_SIZE; torchrun sets it)"),
    ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE '0' is not an integer from 1 to 1 (the processes on this machine, "
                                "at most WORLD_SIZE 1; torchrun sets it)"),
    ({"WORLD_SIZE": "7" * 200}, f"WORLD_SIZE {'7' * 30!r}... (200 characters) is not an integer from 1 to 1024 (the "
                                "number of processes in the job, at most MAX_RANKS; torchrun sets it)"),
    ({"MASTER_ADDR": "10.1.2.3"}, "MASTER_ADDR is set ('10.1.2.3') but RANK, WORLD_SIZE and MASTER_PORT are not: a "
                                  "job of several processes needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
                                  "(torchrun sets all four); unset MASTER_ADDR to run a single process"),
    ({"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "http"},
     "MASTER_PORT 'http' is not an integer from 1 to 65535 (the TCP port where the job's processes meet)"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE is 2 but MASTER_ADDR is not set: the processes of a job meet at "
                          "MASTER_ADDR:MASTER_PORT (torchrun sets both); start the job with torchrun"),
])
def test_a_bad_launcher_variable_is_one_line(variables, message):
    code, _, err = finish(start(*SMALL, **variables))
    assert (code, err) == (2, [PROG + message])


def test_a_busy_master_port_is_one_line_in_seconds():
    with socket.socket() as other_program:
        other_program.bind(("127.0.0.1", 0))
        other_program.listen()
        port = other_program.getsockname()[1]
        t0 = time.monotonic()
        code, _, err = finish(start(*SMALL, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1"))
    assert (code, err) == (2, [f"{PROG}MASTER_PORT {port} on 127.0.0.1 is already in use by another program; free it "
                               "or pick another port"])
    assert time.monotonic() - t0 < 30


def test_a_single_process_finds_a_free_port_itself():
    """The old default, 29500 + pid % 1000, lands in a range another program holds whole here."""
    held = []
    try:
        for port in range(29500, 30500):
            s = socket.socket()
            try:
                s.bind(("0.0.0.0", port))
            except OSError:  # held already
                s.close()
                continue
            held.append(s)
        code, out, err = finish(start(*SMALL, "--steps", "1"))
    finally:
        for s in held:
            s.close()
    assert code == 0 and "step 1/1" in out, err


def test_a_disk_too_small_for_the_trace_stops_every_rank_before_step_1(tmp_path):
    args = ["--schedule", "1f1b", *SMALL, "--microbatches", "64", "--steps", "1"]
    need = trace_bytes(build_schedule("1f1b", 2, 64))
    assert need > 64 * 1024  # what the 64 KiB disk below cannot hold
    with small_disk(tmp_path / "disk", "64k") as disk:
        trace = disk / "t.json"
        line = (f"{PROG}argument --trace: cannot reserve {need:,} bytes for {str(trace)!r} (the trace of 256 ops): "
                "No space left on device")
        proc, took = run(torchrun_cmd(2, "-m", "pipeline_kit.run", *args, "--trace", str(trace)), timeout=120)
        ours = [x for x in proc.stderr.splitlines() if "pipeline_kit.run" in x and "error" in x]
        assert proc.returncode != 0 and ours == [line], proc.stderr[-3000:]
        assert proc.stderr.count("exitcode  : 2") == 2, proc.stderr[-3000:]  # both ranks ended by themselves, with 2
        assert "step 1" not in proc.stdout and took < 60
        assert os.listdir(disk) == []
        # launched by hand (no torchrun to stop rank 1): rank 1 learns rank 0's refusal, and both end with 2
        number = str(free_port())
        t0 = time.monotonic()
        ranks = [start(*args, "--trace", str(trace), MASTER_ADDR="127.0.0.1", MASTER_PORT=number, RANK=str(r),
                       WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2") for r in range(2)]
        (code0, out0, err0), (code1, out1, err1) = [finish(r, timeout=120) for r in ranks]
        assert (code0, err0, code1, err1) == (2, [line], 2, []) and out1 == ""
        assert time.monotonic() - t0 < 60 and os.listdir(disk) == []


def test_the_room_reserved_before_step_1_is_there_when_the_disk_fills(tmp_path):
    """The disk fills while the job trains; the trace and the summary are written all the same, into the room
    rank 0 reserved -- and they are no larger than the estimate (a schedule with many waits, the tightest)."""
    schedule = build_schedule("interleaved", 2, 16, 2)
    with small_disk(tmp_path / "disk", "1m") as disk:
        trace, summary = disk / "t.json", disk / "s.json"
        job = subprocess.Popen(torchrun_cmd(2, "-m", "pipeline_kit.run", "--schedule", "interleaved", "--chunks", "2",
                                            *SMALL, "--layers", "4", "--microbatches", "16", "--steps", "8",
                                            "--synthetic-compute", "10,20", "--trace", str(trace), "--json",
                                            str(summary)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=BARE)
        try:
            wait_for_step_one(job)  # 7 steps of at least 16 x 30 ms remain: the disk is full long before the end
            assert sorted(p.name.startswith(RESERVATION_PREFIX) for p in disk.iterdir()) == [True, True]
            assert fill(disk) > 0 and shutil.disk_usage(disk).free < 4096
            out, err = job.communicate(timeout=120)
        finally:
            job.kill()
        assert job.returncode == 0, err[-3000:]
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "s.json", "t.json"]
        assert len(load_trace(str(trace))["timeline"]) == schedule.num_ops
        assert json.loads(summary.read_text())["world"] == 2
        assert trace.stat().st_size <= trace_bytes(schedule) and summary.stat().st_size <= summary_bytes(schedule, 8)


def test_an_output_lost_after_training_is_one_line_saying_what_was_saved(tmp_path):
    """The trace's folder is replaced by a file while the run trains: the summary is saved, the trace cannot be;
    one line says which is where, no traceback."""
    summary, folder = tmp_path / "s.json", tmp_path / "traces"
    folder.mkdir()
    trace = folder / "t.json"
    proc = start(*SMALL, "--steps", "10", "--synthetic-compute", "50,100", "--json", str(summary), "--trace",
                 str(trace))
    try:
        wait_for_step_one(proc)  # 9 steps of at least 300 ms remain
        shutil.rmtree(folder)
        folder.write_text("not a folder any more")
        code, _, err = finish(proc)
    finally:
        proc.kill()
    assert (code, err) == (1, [f"[rank 0] ERROR: the 10 step(s) ran, but not every output was saved: --json saved to "
                               f"{str(summary)!r}; --trace NOT saved to {str(trace)!r}: Not a directory"])
    assert json.loads(summary.read_text())["step_times"] and sorted(p.name for p in tmp_path.iterdir()) == [
        "s.json", "traces"]
