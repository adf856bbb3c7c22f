"""The runtime on real processes: torchrun, gloo, the real schedules, real gradients.

Each torchrun start costs seconds on 2 cores, so each test launches once and checks a lot.
"""

import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from runtime_helpers import ROOT, free_port, load, run, run_worker, torchrun_cmd

from pipeline_kit.layout import predict_from_trace
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

SMALL = ["--layers", "8", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--micro-batch-size", "2",
         "--vocab", "64"]


def test_grads_match_reference_for_every_schedule_on_4_ranks(tmp_path):
    cases = {"gpipe": [], "1f1b": ["--tie-embeddings"], "interleaved": ["--chunks", "2"], "zb-h1": []}
    runs = [["--schedule", name, "--microbatches", "8", "--steps", "2", "--check-grads", *extra, *SMALL,
             "--json", str(tmp_path / f"{name}.json")] for name, extra in cases.items()]
    runs.append(["--schedule", "1f1b", "--layout", "Et*3|t*2|t*2|tL", "--microbatches", "4", "--steps", "1",
                 "--check-grads", *SMALL, "--json", str(tmp_path / "layout.json")])
    proc = run_worker(4, runs)
    assert proc.stdout.count("grads match the single-process reference: True") == 5, proc.stdout
    custom = load(tmp_path / "layout.json")
    assert custom["layout"] == "Et*3|t*2|t*2|tL" and custom["grads_match"] is True
    assert custom["stage_params"][0] > custom["stage_params"][1] > custom["stage_params"][3]
    for name in cases:
        out = load(tmp_path / f"{name}.json")
        assert out["grads_match"] is True and out["max_rel_error"] <= 1e-6, (name, out["max_rel_error"])
        if name != "1f1b":  # untied: the order of every sum is the reference's, so grads are bitwise equal
            assert out["grads_bitwise"][0] == out["grads_bitwise"][1], name
        sched = build_schedule(name, 4, 8, 2 if name == "interleaved" else None)
        assert out["peak_activations"] == simulate(sched).peak_activations == out["simulated_peak_activations"]
        assert out["pp"] == 4 and out["schedule"] == name and len(out["step_times"]) == 2
    one = load(tmp_path / "1f1b.json")
    # deallocate_output_tensor freed every sent output: 8 microbatches x b*s*h*4 bytes on ranks 0..2
    assert one["deallocated_output_bytes"] == [8 * 2 * 16 * 32 * 4] * 3 + [0]


@pytest.mark.alone
def test_two_ranks_interleaved_shape_messages_and_trace_prediction(tmp_path):
    """pp = 2: interleaving joins both directions on one pair of ranks; one rank per core also makes
    measured service times an honest model, so the simulator must predict the traced makespan."""
    runs = [["--schedule", "interleaved", "--chunks", "2", "--microbatches", "4", "--steps", "2", "--check-grads",
             "--send-shapes", *SMALL, "--json", str(tmp_path / "i.json")],
            ["--schedule", "1f1b", "--microbatches", "3", "--steps", "1", "--check-grads", "--no-deallocate", *SMALL,
             "--json", str(tmp_path / "o.json")],
            # ops of ~10 ms: long enough that scheduling noise on 2 shared cores stays small beside them
            ["--schedule", "1f1b", "--microbatches", "8", "--steps", "4", "--layers", "4", "--hidden", "256",
             "--seq-len", "64", "--trace", str(tmp_path / "t.json")]]
    run_worker(2, runs)
    trace = load(tmp_path / "t.json")
    predicted = predict_from_trace(trace)
    assert abs(predicted / trace["makespan"] - 1) <= 0.10, (predicted, trace["makespan"])
    inter, plain = load(tmp_path / "i.json"), load(tmp_path / "o.json")
    assert inter["grads_match"] and inter["grads_bitwise"][0] == inter["grads_bitwise"][1]
    assert inter["peak_activations"] == [5, 3]
    assert plain["grads_match"] and plain["deallocated_output_bytes"] == [0, 0]


def test_command_line_run_trace_and_json(tmp_path):
    trace, summary = tmp_path / "trace.json", tmp_path / "run.json"
    proc, _ = run(torchrun_cmd(4, "-m", "pipeline_kit.run", "--schedule", "1f1b", "--microbatches", "8",
                               "--steps", "3", *SMALL, "--trace", str(trace), "--json", str(summary)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "pipeline-kit: 4 rank(s), backend gloo, device cpu: no CUDA device found, so gloo on CPU"
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 3 and all(re.search(r"time +[\d.]+ ms  loss [\d.]+  tokens/s [\d,]+", s) for s in steps)
    out = load(summary)
    assert {"schedule", "pp", "microbatches", "chunks", "step_times", "grads_match", "peak_activations",
            "makespan"} <= set(out)
    assert out["losses"][-1] < out["losses"][0]  # it trains
    tr = load(trace)
    sim_fields = set(simulate(build_schedule("1f1b", 4, 8)).to_dict()["timeline"][0])
    assert len(tr["timeline"]) == 4 * 16 and all(set(e) == sim_fields for e in tr["timeline"])
    assert all(e["end"] >= e["start"] >= 0 for e in tr["timeline"])
    assert len(tr["waits"]) == 2 * 3 * 8  # one receive per message: 3 boundaries, both directions, 8 microbatches
    r0 = sorted((e for e in tr["timeline"] if e["rank"] == 0), key=lambda e: e["start"])
    assert [e["op"] for e in r0] == ["F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "F6", "B3", "F7", "B4",
                                     "B5", "B6", "B7"]


@pytest.mark.alone
def test_synthetic_compute_makespan_matches_the_simulator(tmp_path):
    # 80 ms forwards: the ~0.5 ms each op costs in Python and wake-ups on 4 ranks sharing 2 cores
    # stays well inside the 5% the check allows
    runs = [["--schedule", name, "--microbatches", "8", "--steps", "3", "--synthetic-compute", "80,160", *extra,
             "--json", str(tmp_path / f"{name}.json")] for name, extra in (("1f1b", []), ("interleaved", ["-v", "2"]))]
    proc = run_worker(4, runs)
    for name in ("1f1b", "interleaved"):
        out = load(tmp_path / f"{name}.json")
        assert abs(out["prediction_error"]) <= 0.05, (name, out["makespan"], out["predicted_makespan"], proc.stdout)


def test_skipped_send_is_diagnosed_and_every_rank_exits(tmp_path):
    timeout = 3
    proc, took = run(torchrun_cmd(4, "-m", "pipeline_kit.run", "--schedule", "1f1b", "--microbatches", "8",
                                  "--steps", "1", *SMALL, "--inject", "skip-send:rank=1,mb=3", "--p2p-timeout",
                                  str(timeout)), timeout=120)
    assert proc.returncode != 0
    err = proc.stderr
    assert "[rank 1] INJECTED FAULT (--inject): skipping the send of the forward activation of microbatch 3" in err
    assert re.search(r"\[rank 2\] P2P TIMEOUT: rank 2 timed out after 3 s waiting to receive the forward activation "
                     r"of microbatch 3, chunk 0 \(stage 2\) from rank 1; expected shape \(2, 16, 32\) float32; "
                     r"messages with rank 1 so far: 3 received, 2 sent", err), err[-3000:]
    # start-up (~8 s here) + the timeout + at most 10 s to bring every rank down
    assert took < 25 + timeout + 10, took


def test_a_crashing_rank_does_not_leave_the_others_hanging():
    proc, took = run(torchrun_cmd(4, "-m", "pipeline_kit.run", "--schedule", "1f1b", "--microbatches", "8",
                                  "--steps", "1", *SMALL, "--inject", "crash:rank=2,mb=1", "--p2p-timeout", "30"),
                     timeout=120)
    assert proc.returncode != 0
    assert "[rank 2] CRASH: rank 2: injected crash in the forward of microbatch 1" in proc.stderr
    assert took < 25 + 10, took  # far below the 30 s P2P timeout: nobody waited for it


def test_bad_arguments_are_one_line_before_any_process_group():
    proc, _ = run([sys.executable, "-m", "pipeline_kit.run", "--schedule", "interleaved", "--microbatches", "4"])
    assert proc.returncode == 2
    expected = ("torchrun ... -m pipeline_kit.run: error: interleaved needs pp >= 2, got pp=1: with one rank there is "
                "nothing to interleave (Megatron requires pipeline-model-parallel size > 1 for a virtual pipeline) "
                "(pp is the number of ranks, 1)")
    assert proc.stderr.strip().splitlines() == [expected]
    proc, _ = run([sys.executable, "-m", "pipeline_kit.run", "--inject", "drop:rank=0,mb=0"])
    assert proc.returncode == 2 and "argument --inject: expected FAULT as" in proc.stderr


def test_single_process_no_pipelining(tmp_path):
    proc, _ = run([sys.executable, "-m", "pipeline_kit.run", "--schedule", "1f1b", "--microbatches", "3",
                   "--steps", "1", "--check-grads", *SMALL])
    assert proc.returncode == 0, proc.stderr
    assert "grads match the single-process reference: True" in proc.stdout


def test_two_launchers_form_one_pipeline_over_c10d_rendezvous(tmp_path):
    """The multi-node path on one machine: two torchrun agents, --nnodes 2, c10d rendezvous on loopback."""
    port = free_port()
    out = tmp_path / "mn.json"
    args = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"127.0.0.1:{port}", "--rdzv-id", "pipeline-kit-test", "-m", "pipeline_kit.run", "--schedule", "1f1b",
            "--microbatches", "4", "--steps", "1", "--check-grads", *SMALL, "--json", str(out)]
    cmd = [sys.executable, "-m", "torch.distributed.run", *args]
    nodes = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [n.communicate(timeout=180) for n in nodes]
    assert all(n.returncode == 0 for n in nodes), [o[1][-2000:] for o in outputs]
    result = load(out)
    assert result["world"] == 4 and result["pp"] == 4 and result["grads_match"] is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_run_picks_a_cuda_path(tmp_path):
    proc, _ = run(torchrun_cmd(2, "-m", "pipeline_kit.run", "--schedule", "1f1b", "--microbatches", "4", "--steps",
                               "1", "--check-grads", *SMALL, "--json", str(tmp_path / "g.json")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = load(tmp_path / "g.json")
    assert out["device"] == "cuda" and out["grads_match"] is True
    assert all(m for m in out["cuda_max_memory_allocated"])
