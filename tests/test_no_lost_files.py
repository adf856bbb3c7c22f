"""What a user has is never lost: outputs never replace inputs, special files or the solutions; inputs are
checked for what they are before they are opened; standard output on a full disk or a closed pipe is one line;
make-labs touches only what it made.  Real processes where the case is about a process (a FIFO, /dev/full,
``| head``), the command line in-process (``bounded.run_cli``) everywhere else."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bounded import ROOT, run_cli

from pipeline_kit.inputs import InputError, parse_json
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def refused(result, *parts: str) -> str:
    """The run was refused with exactly one short line holding every one of ``parts``."""
    assert result.code == 2 and len(result.err_lines) == 1, (result.code, result.err[-2000:])
    line = result.err_lines[0]
    assert len(line.encode()) <= 1000 and all(p in line for p in parts), line
    return line


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "run.json"
    data = {**simulate(build_schedule("1f1b", 2, 2)).to_dict(), "waits": [], "layers": 8, "layout": "Et*4|t*4L"}
    path.write_text(json.dumps(data))
    return path


# -- outputs never destroy what the user has ------------------------------------------------------------
def test_an_output_that_is_the_input_is_refused_and_the_input_kept(trace):
    before = trace.read_bytes()
    refused(run_cli("draw", "--trace", str(trace), "--perfetto", str(trace)),
            "argument --perfetto", "is also an input of this command")
    link = trace.with_name("link.json")
    link.symlink_to(trace)  # the same file by another name
    refused(run_cli("draw", "--trace", str(trace), "--perfetto", str(link)), "is also an input")
    assert trace.read_bytes() == before and link.is_symlink()


def test_special_files_are_never_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, kind in ((fifo, "a FIFO"), (sock_path, "a socket"), (Path("/dev/null"), "a device")):
            refused(run_cli("draw", "--pp", "2", "-m", "2", "--perfetto", str(path)), "argument --perfetto", kind,
                    "only to a regular file")
        assert fifo.is_fifo() and sock_path.is_socket() and Path("/dev/null").is_char_device()
    finally:
        sock.close()


def test_nothing_is_written_inside_the_solutions():
    refused(run_cli("draw", "--pp", "2", "-m", "2", "-o", "solutions/x.png"), "inside the kit's solutions/")
    assert not (ROOT / "solutions" / "x.png").exists()


def test_a_link_to_a_regular_file_is_followed_and_stays_a_link(tmp_path):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    result = run_cli("draw", "--pp", "2", "-m", "2", "--perfetto", str(link))
    assert result.code == 0, result.err
    assert link.is_symlink() and json.loads(target.read_text())["traceEvents"]


def test_two_outputs_naming_one_file_are_refused(tmp_path):
    out = tmp_path / "a.png"
    refused(run_cli("draw", "--pp", "2", "-m", "2", "-o", str(out), "--perfetto", str(out)),
            "arguments -o and --perfetto name the same file")
    assert not out.exists()


# -- inputs are checked for what they are, before they are opened ---------------------------------------
@pytest.mark.parametrize("argv", [["validate", "{}"], ["check-timeline", "{}", "--pp", "2", "-m", "2"],
                                  ["balance", "--config", "{}", "--pp", "2"], ["grade", "{}"]])
def test_a_fifo_input_is_refused_without_blocking(tmp_path, argv):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = [str(fifo) if a == "{}" else a for a in argv]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=ENV, timeout=60, check=False)
    assert time.monotonic() - start < 30
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "is a FIFO (named pipe), not a regular file" in proc.stderr


def test_grading_dev_zero_is_refused_at_once():
    refused(run_cli("grade", "/dev/zero", seconds=20), "/dev/zero: not a readable notebook", "is a device")


def test_duplicate_json_keys_are_refused(tmp_path):
    with pytest.raises(InputError, match="the key 'pp' appears twice in one object"):
        parse_json('{"pp": 2, "microbatches": 4, "pp": 8}', "x")
    config = tmp_path / "model.json"
    config.write_text('{"layers": 8, "layers": 4}')
    refused(run_cli("layout", "--pp", "2", "--config", str(config)), "the key 'layers' appears twice")


def test_a_huge_token_or_key_gives_a_short_line(tmp_path):
    token = "X" * 5_000_000
    text = tmp_path / "t.txt"
    text.write_text(f"r0: F0 {token} B0\nr1: F0 B0\n")
    refused(run_cli("validate", str(text)), "(5,000,000 characters)")
    report = run_cli("check-timeline", str(text), "--pp", "2", "-m", "1", "--json")
    assert report.code == 0 and len(report.out) < 5_000, len(report.out)
    key = tmp_path / "k.json"
    key.write_text(json.dumps({"layers": 8, "k" * 5_000_000: 1}))
    refused(run_cli("layout", "--pp", "2", "--config", str(key)), "unknown field(s) 'kkkk", "(5,000,000 characters)")


# -- work is bounded by what it will do ------------------------------------------------------------------
def test_a_comparison_is_bounded_by_the_schedule_the_trace_claims(tmp_path):
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps({"schedule": "1f1b", "pp": 1024, "microbatches": 976, "chunks": 1, "timeline": [
        {"rank": 0, "kind": "F", "microbatch": 0, "chunk": 0, "stage": 0, "start": 0, "end": 1}]}))
    start = time.monotonic()
    refused(run_cli("draw", "--trace", str(claim), "--compare", "-o", str(tmp_path / "x.png")),
            "has up to 1,998,848 ops", "MAX_DRAW_OPS")
    assert time.monotonic() - start < 10 and not (tmp_path / "x.png").exists()


def test_balance_refuses_a_partial_trace_and_an_empty_config(tmp_path):
    partial = tmp_path / "part.json"
    partial.write_text(json.dumps({"schedule": "1f1b", "pp": 4, "microbatches": 4, "chunks": 1, "layers": 8,
                                   "timeline": [{"rank": 0, "kind": "F", "microbatch": 0, "chunk": 0, "stage": 0,
                                                 "start": 0, "end": 1}]}))
    refused(run_cli("balance", "--config", "tiny", "--pp", "4", "--trace", str(partial)),
            "the trace holds 1 op(s), none of them on stage(s) 1, 2, 3")
    refused(run_cli("balance", "--config", "", "--pp", "2"), "argument --config: '' is empty")


# -- standard output: a full disk or a closed pipe -------------------------------------------------------
@pytest.mark.parametrize("argv", [["schedule", "--pp", "4", "-m", "8"], ["demo"], ["layout", "--pp", "2"]])
def test_a_full_disk_on_standard_output_is_one_line(argv):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "pipeline_kit", *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, env=ENV, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"python -m pipeline_kit {argv[0]}: error: cannot write to standard output: "
                                        "No space left on device"]


def test_a_closed_pipe_ends_quietly():
    proc = subprocess.run(f"{sys.executable} -m pipeline_kit schedule --pp 64 -m 2000 | head -c 10",
                          shell=True, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120, check=False)
    assert proc.stdout == "# 1f1b: pp" and proc.stderr == ""


# -- make-labs touches only what it made -----------------------------------------------------------------
def make_labs(*args: str):
    return run_cli("make-labs", *args, seconds=120)


@pytest.mark.slow
def test_make_labs_keeps_a_users_notebook_and_removes_only_its_own(tmp_path):
    labs = tmp_path / "labs"
    labs.mkdir()
    mine = labs / "my_experiments.ipynb"
    mine.write_text('{"mine": true}')
    assert make_labs("--labs", str(labs)).code == 0
    assert mine.read_text() == '{"mine": true}'
    manifest = json.loads((labs / ".made-by-make-labs.json").read_text())
    assert "lab01_schedule_selection.ipynb" in manifest["notebooks"] and "my_experiments.ipynb" not in manifest[
        "notebooks"]
    # a lab make-labs wrote whose solution is gone since: removed; the user's notebook: kept
    manifest["notebooks"].append("lab00_gone.ipynb")
    (labs / ".made-by-make-labs.json").write_text(json.dumps(manifest))
    (labs / "lab00_gone.ipynb").write_text("{}")
    result = make_labs("--labs", str(labs))
    assert result.code == 0 and "removed" in result.out and "lab00_gone.ipynb" in result.out, result.out
    assert not (labs / "lab00_gone.ipynb").exists() and mine.read_text() == '{"mine": true}'
    check = make_labs("--check", "--labs", str(labs))
    assert check.code == 1 and "my_experiments.ipynb: has no source" in check.out and "it is kept" in check.out


@pytest.mark.parametrize("labs", ["SOL", "SOL/inner", "PARENT"])
def test_make_labs_never_writes_among_the_solutions(tmp_path, labs):
    solutions = tmp_path / "sol"
    solutions.mkdir()
    source = ROOT / "solutions" / "lab01_schedule_selection.ipynb"
    (solutions / source.name).write_bytes(source.read_bytes())
    folder = {"SOL": solutions, "SOL/inner": solutions / "inner", "PARENT": tmp_path}[labs]
    refused(make_labs("--solutions", str(solutions), "--labs", str(folder)),
            "arguments --labs and --solutions", "overlap")
    assert sorted(p.name for p in solutions.iterdir()) == [source.name]
    assert (solutions / source.name).read_bytes() == source.read_bytes()


def test_make_labs_into_a_file_is_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    refused(make_labs("--labs", str(afile)), "argument --labs", "is not a folder")
    assert afile.read_text() == "mine"
