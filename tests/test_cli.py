"""The command line, run as users run it: a real ``python -m pipeline_kit`` process."""

import json
import subprocess
import sys

import pytest


def run(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, text=True, timeout=120,
                          check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_schedule_text_grid():
    out = run("schedule", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8").stdout
    lines = out.splitlines()
    assert lines[0].startswith("# 1f1b: pp=4 microbatches=8 chunks=1 (64 ops")
    assert lines[1] == "r0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert lines[4] == "r3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_schedule_grid_is_aligned_with_chunks():
    out = run("schedule", "--schedule", "interleaved", "--pp", "2", "--microbatches", "2", "--chunks", "2").stdout
    assert out.splitlines()[1] == "r0: F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0"


def test_schedule_json_contract():
    d = json.loads(run("schedule", "--schedule", "interleaved", "--pp", "2", "--microbatches", "4", "--chunks", "2",
                       "--json").stdout)
    assert set(d) == {"schedule", "pp", "microbatches", "chunks", "ranks"}
    assert (d["schedule"], d["pp"], d["microbatches"], d["chunks"]) == ("interleaved", 2, 4, 2)
    assert d["ranks"][1][:4] == ["F0c0", "F1c0", "F0c1", "B0c1"]


def test_forward_only_flag():
    d = json.loads(run("schedule", "--pp", "2", "--microbatches", "3", "--forward-only", "--json").stdout)
    assert d["ranks"] == [["F0", "F1", "F2"]] * 2


def test_simulate_json_contract_and_exact_bubble():
    d = json.loads(run("simulate", "--schedule", "1f1b", "--pp", "8", "--microbatches", "16", "--json").stdout)
    assert {"makespan", "bubble_fraction", "ideal_time", "ranks", "timeline"} <= set(d)
    assert d["makespan"] == 69 and d["ideal_time"] == 48
    assert d["bubble_fraction"] == pytest.approx(7 / 23, rel=1e-12)
    assert [r["peak_activations"] for r in d["ranks"]] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert all({"busy", "idle", "peak_activations"} <= set(r) for r in d["ranks"])
    assert len(d["timeline"]) == 8 * 16 * 2
    assert {"rank", "op", "start", "end"} <= set(d["timeline"][0])


def test_simulate_table_zb_h1_with_wgrad_and_stage_costs():
    out = run("simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--wgrad", "1").stdout
    assert "makespan          27" in out and "bubble fraction   0.1111" in out
    out = run("simulate", "--pp", "4", "--microbatches", "8", "--stage-costs", "1,1,2,1").stdout
    assert "   2          48           " in out  # rank 2 is twice as busy
    out = run("simulate", "--schedule", "interleaved", "--pp", "2", "--microbatches", "2", "--chunks", "2",
              "--stage-costs", "1,1,1,1", "--p2p-latency", "0.5", "--json", "--no-timeline").stdout
    assert "timeline" not in json.loads(out)


@pytest.mark.parametrize("args,message", [
    (["simulate", "--pp", "0", "--microbatches", "4"], "argument --pp: expected a positive integer, got '0'"),
    (["simulate", "--pp", "4"], "the following arguments are required: --microbatches"),
    (["schedule", "--schedule", "pipedream", "--pp", "2", "-m", "2"],
     "argument --schedule: invalid choice: 'pipedream'"),
    (["schedule", "--schedule", "interleaved", "--pp", "4", "-m", "6"], "the last group would hold 2 < pp=4"),
    (["schedule", "--schedule", "1f1b", "--pp", "4", "-m", "8", "--chunks", "2"],
     "--chunks 2 only applies to interleaved, looped-bfs, interleaved-zb, zbv, dualpipev; 1f1b has one chunk"),
    (["schedule", "--schedule", "zbv", "--pp", "4", "-m", "8", "--chunks", "3"],
     'zbv needs --chunks 2, got 3: "ZBV requires exactly 2 stages per rank, but got 3."'),
    (["simulate", "--schedule", "dualpipev", "--pp", "4", "-m", "6"],
     '"DualPipeV requires at least as many microbatches as stages, but got 6 microbatches and 8 stages."'),
    (["simulate", "--pp", "4", "-m", "8", "--stage-costs", "1,2"],
     "argument --stage-costs: got 2 values, expected 4 (one per rank)"),
    (["simulate", "--pp", "4", "-m", "8", "--stage-costs", "a,b"],
     "argument --stage-costs: expected comma-separated numbers"),
    (["simulate", "--pp", "4", "-m", "8", "--fwd", "-1"], "argument --fwd: expected a non-negative number, got '-1'"),
    (["simulate", "--pp", "4", "-m", "8", "--wgrad", "5"], "wgrad on stage 0 is 5.0, larger than the whole backward"),
    (["simulate", "--pp", "4", "-m", "8", "--p2p-bytes", "10"], "p2p_bytes needs a bandwidth"),
    (["validate", "/nonexistent/schedule.txt"], "argument FILE: cannot read '/nonexistent/schedule.txt'"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
])
def test_bad_arguments_give_one_line_and_exit_2(args, message):
    proc = run(*args, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


def test_validate_file(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text(run("schedule", "--schedule", "zb-h1", "--pp", "3", "-m", "4").stdout.split("\n", 1)[1])
    out = run("validate", str(good)).stdout
    assert out.strip() == "valid: custom pp=3 microbatches=4 chunks=1, 36 ops"
    as_json = tmp_path / "s.json"
    as_json.write_text(run("schedule", "--pp", "2", "-m", "2", "--json").stdout)
    assert run("validate", str(as_json)).stdout.startswith("valid: 1f1b pp=2")
    bad = tmp_path / "bad.txt"
    bad.write_text("r0: F0 B0 F1 B1\nr1: F0 F1 B0 B1\n")
    proc = run("validate", str(bad), check=False)
    assert proc.returncode == 1
    assert proc.stdout.startswith("invalid: deadlock, circular wait rank 0 -> rank 1 -> rank 0")
    garbled = tmp_path / "garbled.txt"
    garbled.write_text("r0: F0 Z1\n")
    proc = run("validate", str(garbled), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("line 1, item 2: 'Z1' is not an op: expected a kind F, B, I or W, a microbatch "
                                        "number and an optional chunk, e.g. F3, B3, I3c1, W3c1")


def test_simulate_states_the_unit_of_peak_activations_and_zbv_reads_like_1f1b():
    """Issue 27: ZB-V's 8 chunk activations are 4 rank shares, as 1F1B's rank 0 -- the table says so, in a unit."""
    zbv = run("simulate", "--schedule", "zbv", "--pp", "4", "-m", "8", "--no-timeline").stdout.splitlines()
    one = run("simulate", "--schedule", "1f1b", "--pp", "4", "-m", "8", "--no-timeline").stdout.splitlines()
    assert zbv[1].endswith("peak act (rank shares)") and one[1].endswith("peak act (rank shares)")
    assert zbv[2].split()[-4:] == ["4", "(8", "chunk", "acts)"] and one[2].split()[-1] == "4"
    assert zbv[-1].startswith("(peak act: the most microbatch activations a rank holds at once, in microbatches'")


def test_demo_runs_and_shows_every_family():
    out = run("demo").stdout
    assert "== 1f1b, pp=4 microbatches=8 chunks=1" in out
    assert "== zbv, pp=4 microbatches=8 chunks=2 placement=v (c0 = stage r, c1 = stage 7-r)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[-1:] and
            line.split()[-1].startswith(("Schedule", "-"))}
    assert set(rows) == {"gpipe", "1f1b", "interleaved", "zb-h1", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"}
    assert rows["zbv"][1:] == ["v", "51.5", "0.0680", "8", "ScheduleZBVZeroBubble"]  # tests/test_multi_stage_sim.py
    assert rows["dualpipev"][1:] == ["v", "51.5", "0.0680", "8.5", "ScheduleDualPipeV"]


def test_v_schedule_text_json_and_validate_round_trip(tmp_path):
    """c is the rank's local chunk: on a V, c0 is stage r and c1 stage 2pp-1-r; the files say placement=v."""
    out = run("schedule", "--schedule", "zbv", "--pp", "2", "-m", "4").stdout
    assert out.splitlines()[0].startswith(
        "# zbv: pp=2 microbatches=4 chunks=2 placement=v (c0 = stage r, c1 = stage 3-r)")
    assert out.splitlines()[2].startswith("r1: F0c0 F0c1 F1c0 F1c1 I0c1 W0c1")
    d = json.loads(run("schedule", "--schedule", "dualpipev", "--pp", "2", "-m", "4", "--json").stdout)
    assert (d["schedule"], d["chunks"], d["placement"]) == ("dualpipev", 2, "v")
    assert d["ranks"][0][8] == "B1c1"
    path = tmp_path / "v.json"
    path.write_text(json.dumps(d))
    assert run("validate", str(path)).stdout.strip() == (
        "valid: dualpipev pp=2 microbatches=4 chunks=2 placement=v (c0 = stage r, c1 = stage 3-r), 37 ops")
    sim = json.loads(run("simulate", "--schedule", "interleaved-zb", "--pp", "4", "-m", "8", "--chunks", "2",
                         "--json", "--no-timeline").stdout)
    assert (sim["makespan"], sim["ideal_time"]) == (25.5, 24)  # one forward ramp of (pp - 1) chunk forwards


def test_schedule_core_imports_no_torch():
    code = ("import sys, pipeline_kit, pipeline_kit.schedules, pipeline_kit.sim, pipeline_kit.cli; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
