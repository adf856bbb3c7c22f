"""Layouts: parsing with precise errors, per-stage costs (the question bank's PP8 case), the exact balancer, speedup
factors."""

import itertools
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit.layout import (
    PRESETS,
    ItemTimes,
    LayoutError,
    ModelSpec,
    balance,
    best_cuts,
    boundary_bytes,
    decompose_speedup,
    even_layout,
    p2p_volume,
    parse_layout,
    plan_for,
    predict_from_trace,
    stage_costs,
    uneven_layout,
)
from pipeline_kit.layout.costs import embedding_params, layer_params, loss_params
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate


def test_parse_and_print():
    layout = parse_layout("Et*3|t*4|t*4|t*3L", pp=4, layers=14)
    assert [(s.embedding, list(s.layers), s.loss) for s in layout.stages] == [
        (True, [0, 1, 2], False), (False, [3, 4, 5, 6], False), (False, [7, 8, 9, 10], False),
        (False, [11, 12, 13], True)]
    assert str(layout) == "Et*3|t*4|t*4|t*3L"
    assert str(parse_layout("E|(t*2|)*3t*2L")) == "E|t*2|t*2|t*2|t*2L"
    assert str(parse_layout("Ett|(tt)*2|tL")) == "Et*2|t*4|tL"
    assert parse_layout("Et|t|t|tL").owner(3, 2) == (1, 1)  # stage k -> rank k % pp, chunk k // pp


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12))
def test_print_parse_round_trip(sizes):
    sizes[0] = max(sizes[0], 0)
    text = "|".join(("E" if k == 0 else "") + "t" * n + ("L" if k == len(sizes) - 1 else "")
                    for k, n in enumerate(sizes))
    if any(n == 0 and 0 < k < len(sizes) - 1 for k, n in enumerate(sizes)):
        with pytest.raises(LayoutError, match="is empty"):
            parse_layout(text)
        return
    layout = parse_layout(text)
    assert parse_layout(str(layout)) == layout
    assert [len(s.layers) for s in layout.stages] == sizes


@pytest.mark.parametrize("text,message", [
    ("Et*2|t*2|...|tL", "position 10: unknown symbol '.'"),
    ("tE|tL", "position 2: E must be the first item of the first stage (found in stage 0)"),
    ("Et|t|L|t", "position 6: L must be the last item of the last stage (found in stage 2)"),
    ("Et||tL", "stage 1 (after the '|' at position 3) is empty"),
    ("|Et|tL", "stage 0 (before the '|' at position 1) is empty"),
    ("Et*0|tL", "position 4: a repeat count must be at least 1, got 0"),
    ("Et*|tL", "position 3: '*' must be followed by a repeat count"),
    ("E(t|tL", "position 2: '(' is never closed"),
    ("Et|t)L", "position 5: ')' without a matching '('"),
    ("Et|tLm", "position 6: unknown symbol 'm' (this kit's model has no MTP layers)"),
    ("t|tL", "the layout has no E"),
    ("Et|t", "position 4: the layout has no L"),
    ("EEt|tL", "position 2: a second E (the first is at position 1)"),
    ("*t|tL", "position 1: '*' must follow an item"),
    ("", "the layout is empty"),
])
def test_layout_errors_name_position_and_rule(text, message):
    with pytest.raises(LayoutError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")
                       .replace("|", r"\|").replace(".", r"\.")):
        parse_layout(text)


def test_layout_checks_layers_and_pp():
    with pytest.raises(LayoutError, match="the layout has 7 decoder layers .t. but the model has 8"):
        parse_layout("Et*2|t*2|t*2|tL", layers=8)
    with pytest.raises(LayoutError, match="the layout has 3 stages, which pp=2 does not divide"):
        parse_layout("Et|t|tL", pp=2)


def test_even_and_uneven_splits_as_layouts():
    assert str(even_layout(16, 8)) == "Et*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2L"
    assert str(uneven_layout(16, 8, first=1, last=3)) == "Et|t*2|t*2|t*2|t*2|t*2|t*2|t*3L"
    assert str(uneven_layout(9, 4, first=0)) == "E|t*3|t*3|t*3L"  # a standalone embedding stage
    with pytest.raises(LayoutError, match="leave 14 for 6 middle stage"):
        uneven_layout(16, 8, first=1, last=1)
    with pytest.raises(LayoutError, match="multiple of the stage count"):
        even_layout(10, 4)


def test_bank_case_reproduces_the_endpoint_imbalance():
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(16, 8), spec, 8)
    params = [c.params for c in costs]
    assert params[0] == 39_144_960 and params[7] == 38_753_280 and set(params[1:7]) == {14_175_744}
    assert round(max(params) / 1e6, 1) == 39.1 and round(min(params) / 1e6, 1) == 14.2
    assert round(max(params) / min(params), 2) == 2.76



def test_the_old_preset_name_is_an_alias_of_bank_pp8():
    """``seed-pp8`` (the preset's old name) still gives the same spec -- in PRESETS, load_model_spec and the CLI --
    but is not listed as a model of its own."""
    from pipeline_kit.layout import load_model_spec
    assert PRESETS["seed-pp8"] is PRESETS["bank-pp8"] and PRESETS.get("seed-pp8") is PRESETS["bank-pp8"]
    assert "seed-pp8" in PRESETS and load_model_spec("seed-pp8") == load_model_spec("bank-pp8")
    assert "seed-pp8" not in list(PRESETS) and "seed-pp8" not in dict(PRESETS.items())
    with pytest.raises(KeyError):
        PRESETS["seed-pp9"]
    assert run_cli("layout", "--pp", "8", "--config", "seed-pp8").stdout == \
        run_cli("layout", "--pp", "8", "--config", "bank-pp8").stdout
    helps = "".join((run_cli("layout", "--help").stdout + run_cli("speedup", "--help").stdout).split())  # unwrapped
    assert "bank-pp8" in helps and "seed-pp8" not in helps

def test_boundary_bytes_and_volume():
    spec = ModelSpec(seq_len=2048, micro_batch_size=1, hidden=4096, dtype_bytes=2)
    assert boundary_bytes(spec) == 2048 * 1 * 4096 * 2
    vol = p2p_volume(even_layout(8, 4), spec, microbatches=16)
    assert vol["per_direction_per_step"] == 16 * 3 * boundary_bytes(spec)
    assert vol["total_per_step"] == 2 * vol["per_direction_per_step"]


@pytest.mark.parametrize("preset", ["tiny", "bank-pp8"])
def test_parameter_counts_equal_torch(preset):
    torch = pytest.importorskip("torch")
    from pipeline_kit.runtime.model import GPTConfig, build_stage
    spec = PRESETS[preset][0]
    cfg = GPTConfig(vocab=spec.vocab, seq_len=spec.seq_len, hidden=spec.hidden, heads=spec.heads,
                    layers=spec.layers, ffn_mult=spec.ffn_mult)
    layout = even_layout(spec.layers, 8 if preset == "bank-pp8" else 4)
    costs = stage_costs(layout, spec, layout.num_stages)
    with torch.device("meta"):
        for k in (0, 1, layout.num_stages - 1):
            module = build_stage(cfg, k, layout.num_stages, layout.stages[k].layers)
            assert module.num_params() == costs[k].params
    assert layer_params(spec) + embedding_params(spec) + loss_params(spec) > 0


def brute_force_min_max(costs, parts):
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = [0, *cuts, n]
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=3, max_size=10), st.data())
def test_balancer_is_exact(costs, data):
    parts = data.draw(st.integers(1, len(costs)))
    cuts = best_cuts([float(c) for c in costs], parts)
    bounds = [0, *cuts, len(costs)]
    assert len(cuts) == parts - 1 and all(b > a for a, b in itertools.pairwise(bounds))
    assert max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)) == brute_force_min_max(costs, parts)


def test_balancer_on_the_bank_case_moves_layers_off_the_loss_stage():
    spec = PRESETS["bank-pp8"][0]
    from pipeline_kit.layout import item_times_from_flops
    result = balance(item_times_from_flops(spec, 100.0), pp=8, microbatches=16)
    assert str(result.even.layout) == "Et*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2L"
    best = result.best.layout
    assert best.stages[0].embedding and best.stages[-1].loss and best.num_layers == 16
    assert len(best.stages[-1].layers) < 2  # the heavy output layer gets fewer decoder layers beside it
    assert result.best.slowest_stage < result.even.slowest_stage
    assert result.best.makespan < result.even.makespan


def test_balancer_with_chunks_and_uniform_layers():
    result = balance(ItemTimes.uniform(16), pp=4, chunks=2, microbatches=8)
    assert result.best.layout.num_stages == 8
    assert result.best.slowest_stage == result.even.slowest_stage  # a uniform model is already balanced
    with pytest.raises(LayoutError, match="cannot cut 4 items .E, 2 layers, L. into 5 non-empty stages"):
        best_cuts([1.0] * 4, 5)


def test_speedup_factors_multiply_to_the_measured_speedup():
    rows = decompose_speedup(8, 16, [1.0] * 7 + [2.0], [2.0] * 7 + [4.0], p2p_latency=0.05, measured=2.59)
    assert [r.name for r in rows] == ["ideal", "bubble", "stage imbalance", "P2P", "remainder"]
    product = 8.0
    for r in rows[1:]:
        product *= r.factor
    assert product == pytest.approx(2.59)
    assert rows[1].factor == pytest.approx(16 / 23)  # the bubble bound, exactly
    assert rows[2].factor < 1 and rows[3].factor < 1


def test_prediction_from_a_trace_of_a_simulated_run_is_exact():
    sched = build_schedule("1f1b", 4, 8)
    res = simulate(sched, fwd=[1, 1, 2, 1], bwd=[2, 2, 4, 2], p2p_latency=0.25)
    trace = {**res.to_dict(), "p2p_latency": 0.25, "waits": []}
    assert predict_from_trace(trace) == pytest.approx(res.makespan)


def test_plan_for_rejects_mismatched_layers():
    with pytest.raises(LayoutError, match="the layout has 8 layers but the item times cover 4"):
        plan_for(even_layout(8, 4), ItemTimes.uniform(4), 4, 8)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_layout_command_prints_the_table():
    out = run_cli("layout", "--pp", "8", "--config", "bank-pp8").stdout
    assert "layout Et*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2L" in out
    assert "params max/min = 39,144,960 / 14,175,744 = 2.76x" in out
    assert "786,432 bytes per transfer" in out
    out = run_cli("layout", "Et*3|t*2|t*2|tL", "--pp", "4").stdout
    assert out.splitlines()[2].split()[:4] == ["0", "0", "0", "Et*3"]


@pytest.mark.parametrize("args,message", [
    (["layout", "Et*2|t*2|...|tL", "--pp", "8"], "argument LAYOUT: position 10: unknown symbol '.'"),
    (["layout", "Et|t|tL", "--pp", "2"], "the layout has 3 stages, which pp=2 does not divide"),
    (["layout", "Et|tL", "--pp", "2", "--config", "bank-pp8"],
     "the layout has 2 decoder layers (t) but the model has 16"),
    (["balance", "--config", "nope", "--pp", "2"], "--config 'nope' is neither a preset"),
    (["balance", "--config", "tiny", "--pp", "2", "--trace", "/nonexistent.json"], "argument --trace: --trace"),
])
def test_layout_commands_bad_input_one_line(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_balance_and_speedup_commands():
    out = run_cli("balance", "--config", "bank-pp8", "--pp", "8").stdout
    assert "balanced layout: E" in out and "predicted speedup of the step" in out
    out = run_cli("speedup", "--measured", "2.59").stdout
    assert "bubble" in out and "16/23" in out and "2.59x" in out


def test_config_file(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"vocab": 1000, "hidden": 32, "heads": 2, "layers": 4, "seq_len": 16}))
    assert "layout Et|t|t|tL" in run_cli("layout", "--pp", "4", "--config", str(path)).stdout
    path.write_text(json.dumps({"vocab": 1000, "hiden": 32}))
    assert "unknown field(s) 'hiden';" in run_cli("layout", "--pp", "4", "--config", str(path)).stderr
