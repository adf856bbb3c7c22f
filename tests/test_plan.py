"""The planner (issue 26): its JSON contract, its figures against `simulate`, its memory terms by hand, its
refusals, its reasons, its command line, and one real --verify run."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded import run_cli
from pipeline_kit.layout import even_split, load_model_spec
from pipeline_kit.plan import GB, Hardware, PlanError, plan, rank_memory
from pipeline_kit.plan.explain import FACTORS, baseline, breakdown, deciding_factor, explain
from pipeline_kit.plan.memory import Training, bytes_per_param, wgrad_kept_bytes
from pipeline_kit.plan.verify import kendall_tau
from pipeline_kit.schedules import FAMILIES, build_schedule
from pipeline_kit.sim import simulate

BANK = load_model_spec("bank-pp8")
CANDIDATE_KEYS = {"schedule", "pp", "dp", "chunks", "microbatches", "layout", "step_time_s", "tokens_per_s",
                  "bubble_fraction", "peak_memory_bytes", "fits", "why_not"}


@pytest.fixture(scope="module")
def bank_search():
    return plan(BANK, Hardware(8, 80 * GB), global_batch=16, model_name="bank-pp8")


def test_json_contract_and_best_is_the_fastest_that_fits():
    res = run_cli("plan", "--config", "bank-pp8", "--gpus", "8", "--gpu-memory-gb", "80", "--global-batch", "16",
                  "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert {"model", "gpus", "gpu_memory_bytes", "candidates", "best", "why"} <= set(doc)
    assert doc["gpus"] == 8 and doc["gpu_memory_bytes"] == 80e9
    for c in doc["candidates"]:
        assert CANDIDATE_KEYS <= set(c)
        assert (c["why_not"] is None) == c["fits"]
        if c["fits"]:
            assert len(c["peak_memory_bytes"]) == c["pp"] and max(c["peak_memory_bytes"]) <= 80e9
    fit = [c for c in doc["candidates"] if c["fits"]]
    best, fastest = doc["candidates"][doc["best"]], doc["candidates"][doc["fastest"]]
    assert fastest["step_time_s"] == min(c["step_time_s"] for c in fit)
    assert best["step_time_s"] <= (1 + doc["tolerance"]) * fastest["step_time_s"] and doc["best"] in doc["ties"]
    assert best["schedule"] in doc["why"] and "1F1B" in doc["why"]
    assert doc["framework"] == "any"
    if best["schedule"] in ("1f1b", "interleaved"):
        assert "--pipeline-model-parallel-size" in doc["megatron_args"]
    else:
        assert doc["megatron_args"] is None
    # every family and every pp dividing 8 was visited
    assert {c["schedule"] for c in doc["candidates"]} == set(FAMILIES)
    assert {c["pp"] for c in doc["candidates"]} == {1, 2, 4, 8}


@pytest.mark.parametrize("training", [Training(), Training(recompute="full")], ids=["plain", "full-recompute"])
def test_pipeline_time_and_bubble_equal_the_simulate_command(training):
    search = plan(BANK, Hardware(8, 80 * GB), training, global_batch=32)
    picked = {}
    for i in search.ranked:  # one fitting candidate of each family, the best first
        picked.setdefault(search.candidates[i].schedule, search.candidates[i])
    assert len(picked) == len(FAMILIES)
    for c in picked.values():
        res = run_cli("simulate", *c.simulate_args(), "--json", "--no-timeline")
        assert res.code == 0, (c.label(), res.err)
        sim = json.loads(res.out)
        assert sim["makespan"] == pytest.approx(c.pipeline_time_s, rel=1e-9), c.label()
        assert sim["bubble_fraction"] == pytest.approx(c.bubble_fraction, rel=1e-9), c.label()
        assert c.step_time_s == pytest.approx(c.pipeline_time_s + c.allreduce_time_s, rel=1e-12)


def test_memory_terms_by_hand():
    sched = build_schedule("1f1b", 8, 16)
    layout = even_split(BANK.layers, 8)
    mem = rank_memory(BANK, layout, sched)
    # rank 0 holds the embedding (V h + s h) and two layers ((4 + 2 f) h^2 + (9 + f) h each)
    h = BANK.hidden
    params0 = BANK.vocab * h + BANK.seq_len * h + 2 * (12 * h * h + 13 * h)
    assert mem[0].params == params0
    assert bytes_per_param("adam", 2) == 18 and bytes_per_param("sgd", 2) == 14 and bytes_per_param("adam", 4) == 16
    assert mem[0].state == 18 * params0
    # 1F1B's rank 0 keeps pp = 8 microbatches; W's kept gradients only exist with a split backward
    assert mem[0].wgrad_kept == 0
    # ZB-H1 keeps output gradients for W (on this small model, the last rank's fp32 logits' gradient makes it
    # the fullest rank; test_megatrons_memory_model... holds a 70B model to 1F1B's figure)
    zb = rank_memory(BANK, layout, build_schedule("zb-h1", 8, 16))
    assert zb[7].wgrad_kept >= BANK.seq_len * BANK.vocab * 4 and zb[7].total > mem[7].total
    assert mem[3].p2p_buffers == 2 * BANK.seq_len * BANK.micro_batch_size * h * BANK.dtype_bytes
    # tp splits the state, distributed optimizer shards Adam's 12 bytes over dp
    tp = rank_memory(BANK, layout, sched, Training(tp=2, distributed_optimizer=True), dp=4)
    assert tp[0].weights == pytest.approx(mem[0].weights / 2) and tp[0].optimizer == pytest.approx(mem[0].optimizer / 8)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([f for f in FAMILIES if f not in ("zb-h1", "interleaved-zb", "zbv", "dualpipev")]),
       st.sampled_from([2, 4]), st.integers(1, 12))
def test_activation_peak_is_the_simulators(family, pp, m):
    """Without a split backward the planner's activation term is the simulator's peak_activation_bytes."""
    chunks = FAMILIES[family].default_chunks
    try:
        sched = build_schedule(family, pp, m, None if chunks == 1 else chunks)
    except ValueError:
        return
    layout = even_split(BANK.layers, sched.stages)
    mem = rank_memory(BANK, layout, sched)
    from pipeline_kit.plan import stage_activations
    res = simulate(sched, activation_bytes=stage_activations(BANK, layout))
    assert [r.activations for r in mem] == pytest.approx(res.peak_activation_bytes)


def test_split_backward_keeps_gradients_until_w():
    m = replace(BANK, ffn_mult=4)
    tokens = m.seq_len * m.micro_batch_size
    assert wgrad_kept_bytes(m, 2, False, False) == 2 * 9 * tokens * m.hidden * m.dtype_bytes
    assert wgrad_kept_bytes(m, 0, False, True) == tokens * m.vocab * 4


def test_refusals_say_why(bank_search):
    search = plan(BANK, Hardware(8, 1.0 * GB), global_batch=12)
    why = {}
    for c in search.candidates:
        if not c.fits:
            why.setdefault((c.refusal, c.schedule, c.pp), c.why_not)
    assert "not a multiple of dp x micro-batch = 8 x 1 = 8" in why["batch", "1f1b", 1]  # dp=8 does not divide 12
    assert why["family", "interleaved", 8].startswith("interleaved refuses pp=8, M=12, v=2:")
    assert "use a multiple of 8" in why["family", "interleaved", 8]
    assert "needs microbatches >= 2*pp = 16, got 12" in why["family", "dualpipev", 8]
    memory = why["memory", "gpipe", 8]
    assert memory.startswith("rank 7 needs ") and "GB over the 1 GB budget" in memory  # L: 16 x fp32 logits
    none_fit = plan(load_model_spec("llama-70b-ish"), Hardware(64, 80 * GB))
    assert none_fit.best is None
    text = explain(none_fit).text
    assert text.startswith("No candidate fits") and "tensor parallelism" in text


def test_breakdown_sums_to_the_step_and_names_a_factor(bank_search):
    for i in bank_search.ranked[:10]:
        c = bank_search.candidates[i]
        parts = breakdown(c)
        assert set(parts) == set(FACTORS)
        assert sum(parts.values()) == pytest.approx(c.step_time_s, rel=1e-9)
        assert all(v >= -1e-12 for v in parts.values())
    best = bank_search.candidates[bank_search.best]
    base = bank_search.candidates[baseline(bank_search, best)]
    assert base.schedule == "1f1b" and base.layout_kind == "even" and base.pp == best.pp
    factor, gain = deciding_factor(best, base)
    assert factor in FACTORS and gain > 0
    why = explain(bank_search)
    assert why.factor_vs_baseline == factor and f"{1e3 * base.step_time_s:.1f} ms" in why.text


def test_memory_decides_when_the_other_does_not_fit():
    search = plan(BANK, Hardware(8, 1.5 * GB), global_batch=16)
    refused = next(c for c in search.candidates if c.refusal == "memory")
    assert deciding_factor(search.candidates[search.best], refused) == ("memory", 0.0)


@pytest.mark.slow
def test_large_model_with_tensor_parallelism_fits_and_is_interactive():
    search = plan(load_model_spec("llama-70b-ish"), Hardware(1024, 80 * GB),
                  Training(tp=8, recompute="selective", distributed_optimizer=True))
    best = search.candidates[search.best]
    assert best.pp > 1 and best.dp > 1 and best.allreduce_time_s > 0
    assert best.worst_memory_bytes <= 80 * GB


@pytest.mark.parametrize("args, words", [
    (["--gpus", "0"], "argument --gpus"),
    (["--gpu-memory-gb", "-1"], "argument --gpu-memory-gb"),
    (["--schedules", "1f1b,nope"], "argument --schedules"),
    (["--tp", "3"], "tp=3 does not divide the 8 GPUs"),
    (["--plot", "/tmp"], "is a folder"),
    (["--plot", "/tmp/x.txt"], "should end in .png"),
    (["--synthetic-compute"], "only applies with --verify"),
    (["--global-batch", "100000000", "--gpus", "1024"], "(MAX_PLAN_OPS)"),
    (["--config", "nope"], "neither a preset"),
    (["--tp", "8", "--gpus", "16"], "does not divide the model's attention heads (12)"),
    (["--tolerance", "1.5"], "argument --tolerance"),
    (["--framework", "megatron", "--schedules", "zbv,gpipe"], "megatron runs none of zbv, gpipe"),
])
def test_bad_arguments_are_one_line(args, words):
    base = {"--config": "bank-pp8", "--gpus": "8", "--gpu-memory-gb": "80"}
    for i in range(0, len(args), 2):
        base.pop(args[i], None)
    argv = ["plan", *[x for kv in base.items() for x in kv], *args]
    res = run_cli(*argv)
    assert res.code == 2, (argv, res.out[-500:])
    assert len(res.err_lines) == 1 and words in res.err, res.err


def test_plot_is_written(tmp_path):
    out = tmp_path / "plan.png"
    res = run_cli("plan", "--config", "bank-pp8", "--gpus", "8", "--gpu-memory-gb", "2", "--global-batch", "16",
                  "--plot", str(out))
    assert res.code == 0, res.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {out}" in res.out


def test_the_planner_imports_no_torch_and_no_matplotlib():
    code = ("import sys, pipeline_kit.plan, pipeline_kit.plan.explain, pipeline_kit.plan.commands; "
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_plot_never_replaces_the_config_it_read(tmp_path):
    config = tmp_path / "model.png"  # a JSON model file, oddly named: the plot must not overwrite it
    config.write_text('{"layers": 8}')
    res = run_cli("plan", "--config", str(config), "--gpus", "2", "--gpu-memory-gb", "80", "--plot", str(config))
    assert res.code == 2 and len(res.err_lines) == 1 and "is also an input of this command" in res.err, res.err
    assert config.read_text() == '{"layers": 8}'


def test_kendall_tau():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1
    assert kendall_tau([1], [1]) is None


@settings(max_examples=12, deadline=None)
@given(budget=st.floats(0.5, 3.0), families=st.lists(st.sampled_from(sorted(FAMILIES)), min_size=1, max_size=4,
                                                    unique=True), tp=st.sampled_from([1, 2]))
def test_within_equals_planning_again(budget, families, tp):
    """A search re-ranked under a smaller budget and fewer families is, candidate for candidate, the search planned
    with them (the planning chapter re-ranks one search at several budgets)."""
    training = Training(tp=tp)
    wide = plan(BANK, Hardware(8, 80 * GB), training, global_batch=16)
    again = plan(BANK, Hardware(8, budget * GB), training, global_batch=16, schedules=families)
    assert [c.to_dict() for c in wide.within(budget * GB, families).candidates] == \
        [c.to_dict() for c in again.candidates]
    assert wide.within(budget * GB, families).best == again.best


def test_within_refuses_a_larger_budget_or_an_unsearched_family(bank_search):
    with pytest.raises(PlanError, match="more than the searched budget"):
        bank_search.within(100 * GB)
    with pytest.raises(PlanError, match="schedules"):
        plan(BANK, Hardware(8, 80 * GB), global_batch=16, schedules=["1f1b"]).within(schedules=["gpipe"])


def test_plan_error_names_the_argument():
    with pytest.raises(PlanError, match="argument gpus"):
        Hardware(0, GB)
    with pytest.raises(PlanError, match="schedules"):
        plan(BANK, Hardware(8, GB), schedules=["nope"])


@pytest.mark.slow
def test_a_verify_run_that_outlives_its_time_is_a_row_saying_so():
    from pipeline_kit.plan.verify import verify
    search = plan(load_model_spec("tiny"), Hardware(2, GB), global_batch=8, schedules=["1f1b"])
    report = verify(search, 1, timeout=1)
    assert report["runs"][0]["error"] == "the job outlived the 1 s it was given and was stopped"
    assert report["runs"][0]["measured_s"] is None and report["kendall_tau"] is None


@pytest.mark.slow
@pytest.mark.alone
def test_verify_runs_the_top_candidates_for_real(tmp_path):
    """Two real torchrun jobs with synthetic compute: the report compares, and the peak counts are the simulator's."""
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", "plan", "--config", "tiny", "--gpus", "2",
                           "--gpu-memory-gb", "1", "--global-batch", "8", "--schedules", "1f1b,gpipe", "--verify", "2",
                           "--json"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    report = doc["verify"]
    assert report["mode"] == "synthetic" and len(report["runs"]) == 2
    for run in report["runs"]:
        assert run["error"] is None
        assert run["peak_activations"] == run["predicted_peak_activations"]
        assert 0.5 < run["ratio"] < 2.0
        assert run["ratio_to_plan"] is None  # the plan's P2P was not scaled with its compute: no such ratio
    assert report["kendall_tau"] is None and report["order_agrees"] in (True, False)  # no statistic over two runs
    assert "memory in bytes (a waiting op allocates nothing)" in report["cannot_confirm"]
    assert "verify 1/2:" in proc.stderr and "order as the planner's step times" in proc.stderr
    assert "measured/planned" not in proc.stderr and "the model not built" in proc.stderr


@pytest.mark.parametrize("model, tp, refused", [
    ("llama2-70b", 8, "cannot build grouped-query attention (kv_heads 8 of 64 heads) or a SwiGLU MLP"),
    ("llama-70b-ish", 8, "tensor parallelism (tp=8) and the runtime has none"),
])
def test_verify_refuses_a_plan_the_runtime_would_not_run_as_planned(model, tp, refused):
    """A real --verify run must be the planned model: one the runtime cannot build is refused, not swapped."""
    from pipeline_kit.plan.verify import check_real_run
    search = plan(load_model_spec(model), Hardware(64, 80 * GB), Training(tp=tp, recompute="selective"),
                  global_batch=64, schedules=["1f1b"])
    with pytest.raises(PlanError, match="argument --verify") as err:
        check_real_run(search)
    assert refused in str(err.value)
    check_real_run(plan(load_model_spec("tiny"), Hardware(2, GB), global_batch=8, schedules=["1f1b"]))


# -- honest ties, frameworks, Megatron's settings (issue 37) ---------------------------------------------------------
def test_near_ties_go_to_the_simpler_design(bank_search):
    """Every candidate within the tolerance of the fastest is a tie; the pick is the simplest of them (fewer
    stages, fewer chunks, a family more frameworks run, less memory), and the why says it was a tie."""
    from pipeline_kit.plan.search import simplicity
    ties = bank_search.ties
    fastest = bank_search.candidates[bank_search.fastest]
    assert all(bank_search.candidates[i].step_time_s <= 1.02 * fastest.step_time_s for i in ties)
    pick = bank_search.candidates[bank_search.best]
    assert all(simplicity(pick, BANK.layers) <= simplicity(bank_search.candidates[i], BANK.layers) for i in ties)
    if len(ties) > 1:
        assert f"{len(ties)} candidates are within 2 % of the fastest" in explain(bank_search).text
    exact = replace(bank_search, tolerance=0.0)
    assert exact.best == exact.fastest == bank_search.fastest


def test_a_framework_keeps_its_families_and_gets_its_arguments():
    from pipeline_kit.plan.frameworks import FRAMEWORKS, megatron_args, torch_args
    search = plan(BANK, Hardware(8, 80 * GB), Training(recompute="selective", distributed_optimizer=True,
                                                       overlap_grad_reduce=True), global_batch=32,
                  framework="megatron")
    assert {c.schedule for c in search.candidates} == set(FRAMEWORKS["megatron"])
    for c in search.candidates:
        if not c.fits:
            continue
        args = megatron_args(c, search)
        flags = dict(zip(args[::2], args[1::2]))
        assert flags["--pipeline-model-parallel-size"] == str(c.pp) and flags["--global-batch-size"] == "32"
        assert {"--use-distributed-optimizer", "--overlap-grad-reduce"} <= set(args)
        assert args[args.index("--recompute-granularity") + 1] == "selective"
        stages = c.pp * c.chunks
        if BANK.layers % stages == 0 and c.layout == str(even_split(BANK.layers, stages)):
            assert "--pipeline-model-parallel-layout" not in args
            assert ("--num-virtual-stages-per-pipeline-rank" in args) == (c.chunks > 1)
        else:  # Megatron's own split cannot say it: the kit's layout string is Megatron's format
            assert args[args.index("--pipeline-model-parallel-layout") + 1] == c.layout
    zbv = next(c for c in plan(BANK, Hardware(8, 80 * GB), global_batch=32).candidates if c.schedule == "zbv"
               and c.fits and c.pp == 4)
    search_any = plan(BANK, Hardware(8, 80 * GB), global_batch=32, schedules=["zbv"])
    assert megatron_args(zbv, search_any) is None  # Megatron runs no V schedule
    spec = torch_args(zbv, search_any)
    assert spec["schedule_class"] == "ScheduleZBVZeroBubble" and spec["style"] == "v"
    assert spec["ranks"][0]["stages"] == [0, 7] and len(spec["ranks"]) == 4


def test_overlap_and_the_distributed_optimizer_shorten_only_the_reduce():
    from pipeline_kit.plan.search import allreduce_seconds
    hw = Hardware(8, 80 * GB, p2p_latency_us=0)
    assert allreduce_seconds(8e9, 4, hw, param_bytes=4e9) == pytest.approx(0.75 * allreduce_seconds(8e9, 4, hw))
    plain = plan(BANK, hw, global_batch=32, schedules=["1f1b"])
    hidden = plan(BANK, hw, Training(overlap_grad_reduce=True), global_batch=32, schedules=["1f1b"])
    for a, b in zip(plain.candidates, hidden.candidates):
        if not a.fits:
            continue
        assert b.pipeline_time_s == a.pipeline_time_s and 0 <= b.allreduce_time_s <= a.allreduce_time_s
        if a.dp > 1:
            assert b.allreduce_time_s < a.allreduce_time_s  # the last microbatch's backward hides some of it


def test_tensor_parallel_communication_is_charged():
    slow, fast = (plan(BANK, Hardware(8, 80 * GB, tp_gbps=gbps), Training(tp=2), global_batch=16,
                       schedules=["1f1b"]) for gbps in (50.0, 1e6))
    for a, b in zip(slow.candidates, fast.candidates):
        if a.fits:
            assert a.pipeline_time_s > b.pipeline_time_s


def test_a_model_whose_heads_do_not_divide_its_hidden_size_is_refused(tmp_path):
    config = tmp_path / "model.json"
    config.write_text('{"hidden": 768, "heads": 7}')
    res = run_cli("plan", "--config", str(config), "--gpus", "8", "--gpu-memory-gb", "80")
    assert res.code == 2 and len(res.err_lines) == 1 and "768 is not a multiple of heads (7)" in res.err, res.err


def test_megatrons_memory_model_fused_attention_and_the_split_backward():
    """Per layer, Megatron-Core 0.19's theoretical_memory_usage.py: s b h (18 + 4 ffn / h) bytes at 16 bits
    (fused attention keeps no scores); unfused adds Korthikanti's 5 a s / h; on a 70B model ZB-H1's worst rank
    stays within 10 % of 1F1B's, as the zero-bubble paper says (1.13x when I freed nothing: 54.9 GB against 48.4)."""
    from pipeline_kit.layout.costs import layer_activation_bytes
    from pipeline_kit.plan.memory import layer_activation_bytes_kept
    s, b, h = BANK.seq_len, BANK.micro_batch_size, BANK.hidden
    for ffn in (2, 4, 8):
        m = replace(BANK, ffn_mult=ffn)
        assert layer_activation_bytes_kept(m) == s * b * h * (18 + 4 * ffn)
    assert layer_activation_bytes_kept(BANK, attention="unfused") == layer_activation_bytes(BANK)
    assert layer_activation_bytes_kept(BANK, "selective", "unfused") == layer_activation_bytes_kept(BANK)
    big, tp8 = load_model_spec("llama-70b-ish"), Training(tp=8, recompute="selective")
    for pp, m in ((4, 8), (4, 16), (8, 32)):  # the 70B preset at Megatron's settings
        layout = even_split(big.layers, pp)
        one = max(r.total for r in rank_memory(big, layout, build_schedule("1f1b", pp, m), tp8))
        zb = max(r.total for r in rank_memory(big, layout, build_schedule("zb-h1", pp, m), tp8))
        assert zb <= 1.1 * one, (pp, m, zb / one)


def test_a_trace_s_measured_costs_drive_the_plan(tmp_path):
    """``plan --trace``: per-layer times from a run's trace (here a simulated one in the runtime's format, whose
    backward is 3x its forward, not the FLOPs model's 2x) replace the FLOPs estimate; every prediction is still what
    ``simulate`` prints for its arguments, the backward given its own factors."""
    from pipeline_kit import trace
    from pipeline_kit.sim import Costs
    layout = "Etttt|ttttL"
    sched = build_schedule("1f1b", 2, 4)
    measured = trace.from_sim(simulate(sched, Costs(fwd=[1.0, 1.5], bwd=[3.0, 4.5])), per_second=1000,
                              layers=8, layout=layout)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(measured))
    res = run_cli("plan", "--config", "tiny", "--gpus", "4", "--gpu-memory-gb", "1", "--global-batch", "8",
                  "--schedules", "1f1b,interleaved", "--trace", str(path), "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["cost_source"] == f"measured per-layer times from {path}"
    best = doc["candidates"][doc["best"]]
    assert "--stage-bwd-costs" in best["simulate_args"]
    for c in doc["candidates"]:
        if c["fits"] and c["pp"] > 1:
            sim = json.loads(run_cli("simulate", *c["simulate_args"], "--json", "--no-timeline").out)
            assert sim["makespan"] == pytest.approx(c["pipeline_time_s"], rel=1e-9)
    flops = json.loads(run_cli("plan", "--config", "tiny", "--gpus", "4", "--gpu-memory-gb", "1", "--global-batch",
                               "8", "--schedules", "1f1b,interleaved", "--json").out)
    assert flops["cost_source"] == "FLOPs at 400 TFLOP/s"
    assert flops["candidates"][0]["step_time_s"] != doc["candidates"][0]["step_time_s"]
    refused = run_cli("plan", "--config", "tiny", "--gpus", "4", "--gpu-memory-gb", "1", "--tp", "2", "--trace",
                      str(path))
    assert refused.code == 2 and "argument --trace: a trace times the kit's runtime" in refused.err
    other = run_cli("plan", "--config", "bank-pp8", "--gpus", "4", "--gpu-memory-gb", "80", "--trace", str(path))
    assert other.code == 2 and "the traced run had 8 layers but --config has 16" in other.err
