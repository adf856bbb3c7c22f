"""The planner against configurations people published and ran (issue 37): the depth it picks, Megatron-Core 0.19's
memory formulas term by term, the split backward's memory, and the flags a Megatron user would paste.

Sources: GPT-3 XL (Brown et al. 2020, Table 2.1: 24 layers, d_model 2048, 16 heads in the kit's shape here, batch
0.5M tokens = 256 x 2048... trained here at 512 sequences); Narayanan et al. 2021 ("Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM", Table 1: 39.1B on 512 GPUs TP 8 PP 2 batch 1536, 76.1B on 1,024
GPUs TP 8 PP 4 batch 1792, all with 80 GB A100s, sequence 2048, vocabulary 51,200 and activation recomputation);
Llama-2-70B's shape (Touvron et al. 2023) at TP 8 on 64 GPUs, as Megatron's and NeMo's recipes run it (PP 4).
Achieved throughput is set to 150 TFLOP/s, about what Narayanan et al. report per A100 (138-163).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_kit.layout import ModelSpec, PRESETS, parse_layout
from pipeline_kit.layout.costs import layer_shape
from pipeline_kit.plan.frameworks import megatron_args
from pipeline_kit.plan.memory import Training, layer_activation_bytes_kept, rank_memory
from pipeline_kit.plan.search import GB, Hardware, plan
from pipeline_kit.schedules import build_schedule


def narayanan(hidden: int, heads: int, layers: int) -> ModelSpec:
    return ModelSpec(vocab=51200, seq_len=2048, hidden=hidden, heads=heads, layers=layers, micro_batch_size=1)


PUBLISHED = {  # name: model, GPUs, global batch, tp, recomputation, the published pipeline depth
    "gpt3-xl": (ModelSpec(vocab=50257, seq_len=2048, hidden=2048, heads=16, layers=24, micro_batch_size=1), 8, 512,
                1, "selective", 1),
    "narayanan-39.1b": (narayanan(8192, 64, 48), 512, 1536, 8, "full", 2),
    "narayanan-76.1b": (narayanan(10240, 80, 60), 1024, 1792, 8, "full", 4),
    "llama2-70b": (PRESETS["llama2-70b"][0], 64, 128, 8, "selective", 4),
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_megatron_pick_is_the_published_depth(name):
    """Under --framework megatron --overlap-grad-reduce the pick runs at the published pipeline depth, with a family
    Megatron runs and Megatron's own even split; a Megatron user gets the flags to paste."""
    model, gpus, batch, tp, recompute, depth = PUBLISHED[name]
    search = plan(model, Hardware(gpus, 80 * GB, tflops=150), Training(tp=tp, recompute=recompute,
                                                                        overlap_grad_reduce=True),
                  global_batch=batch, framework="megatron")
    pick = search.candidates[search.best]
    assert (pick.pp, pick.schedule in ("1f1b", "interleaved")) == (depth, True), pick.label()
    flags = megatron_args(pick, search)
    assert flags[flags.index("--pipeline-model-parallel-size") + 1] == str(depth)
    assert "--overlap-grad-reduce" in flags and "--pipeline-model-parallel-layout" not in flags
    assert flags[flags.index("--global-batch-size") + 1] == str(batch)


def test_ties_name_the_depths_they_span():
    """Where the estimates cannot tell two depths apart, the why says which depths tied, with the margin."""
    model, gpus, batch, tp, recompute, _ = PUBLISHED["narayanan-76.1b"]
    search = plan(model, Hardware(gpus, 80 * GB, tflops=150), Training(tp=tp, recompute=recompute,
                                                                        overlap_grad_reduce=True),
                  global_batch=batch, framework="megatron")
    from pipeline_kit.plan.explain import explain
    text = explain(search).text
    depths = sorted({search.candidates[i].pp for i in search.ties})
    assert f"within 2 % of the fastest (pp {', '.join(map(str, depths))};" in text


@pytest.mark.parametrize("ffn_hidden", [0, 2730, 5461])
def test_a_layer_keeps_what_megatron_core_0_19_estimates(ffn_hidden):
    """Fused attention: ``s b h (18 + 4 ffn / h)`` bytes a layer (theoretical_memory_usage.py at core_v0.19.0,
    compute_activation_memory), for any MLP width -- not only 4h."""
    m = ModelSpec(vocab=51200, seq_len=2048, hidden=1024, heads=16, layers=4, micro_batch_size=2,
                  ffn_hidden=ffn_hidden)
    megatron = m.seq_len * m.micro_batch_size * m.hidden * (18 + 4 * m.ffn / m.hidden)
    assert layer_activation_bytes_kept(m) == pytest.approx(megatron, rel=1e-12)


def test_the_first_rank_holds_megatron_s_activation_figure():
    """1F1B's first rank keeps pp microbatches of its L/pp layers: L layers' worth, Megatron's estimate for the
    first stage (its embedding terms differ from the kit's by under 1 %)."""
    model, tp, pp = narayanan(8192, 64, 48), 8, 8
    sched = build_schedule("1f1b", pp, 32)
    first = rank_memory(model, parse_layout("E" + "t" * 6 + "|" + "|".join(["t" * 6] * 6) + "|" + "t" * 6 + "L"),
                        sched, Training(tp=tp))[0]
    s, b, h = model.seq_len, model.micro_batch_size, model.hidden
    megatron = (s * b * h * (18 + 4 * 4) * model.layers + 8 * s * b * pp + s * b * h * pp) / tp
    assert first.activations == pytest.approx(megatron, rel=0.01)


@pytest.mark.parametrize("preset", ["llama2-70b", "llama-70b-ish"])
def test_linear_weights_follow_megatron_s_parameter_formula(preset):
    """QKV with grouped-query attention, the output projection and a gated MLP: ``2 h^2 (1 + kv/a) + 2 h ffn x 3/2``
    (compute_weight_and_optimizer_memory at core_v0.19.0; the kit adds biases and LayerNorms on top)."""
    m = PRESETS[preset][0]
    h, kv_ratio = m.hidden, m.query_groups / m.heads
    megatron = 2 * h * h * (1 + kv_ratio) + 2 * h * m.ffn * (1.5 if m.swiglu else 1)
    assert layer_shape(m).linear_weights == megatron


def test_swiglu_and_grouped_query_attention_change_the_activations_as_their_tensors_do():
    """Llama-2-70B's layer: K and V an eighth of Q (7 + 4/8), SwiGLU's fc1 twice 28672 wide (3 + 2 (2 + 1) 3.5) and
    the two LayerNorms (4): 35.5 s b h bytes, where Megatron's estimator, which leaves both out, says 32."""
    m = PRESETS["llama2-70b"][0]
    sbh = m.seq_len * m.micro_batch_size * m.hidden
    assert layer_activation_bytes_kept(m) == pytest.approx(35.5 * sbh, rel=1e-12)


@pytest.mark.parametrize("pp", [4, 8])
def test_zb_h1_keeps_about_1f1b_s_memory(pp):
    """Qi et al. (2024): ZB-H1's I frees what W does not need, so its worst rank stays within 10 % of 1F1B's at the
    same depth."""
    model = PRESETS["llama-70b-ish"][0]
    search = plan(model, Hardware(8 * pp, 200 * GB), Training(tp=8, recompute="selective"), global_batch=8 * pp,
                  schedules=["1f1b", "zb-h1"])
    worst = {c.schedule: c.worst_memory_bytes for c in search.candidates if c.pp == pp and c.layout_kind == "even"}
    assert worst["zb-h1"] <= 1.10 * worst["1f1b"]


MEGATRON = os.environ.get("PK_MEGATRON_SRC")  # a Megatron-LM checkout at core_v0.19.0 (its parser needs no GPU)


@pytest.mark.skipif(not MEGATRON, reason="set PK_MEGATRON_SRC to a Megatron-LM checkout to parse the flags with it")
@pytest.mark.parametrize("name", list(PUBLISHED))
def test_megatron_s_own_parser_accepts_the_flags(name):
    """Megatron-LM's parse_args + validate_args take the printed flags (tests/megatron_args_check.py stubs the GPU
    packages it imports but never calls)."""
    model, gpus, batch, tp, recompute, _ = PUBLISHED[name]
    search = plan(model, Hardware(gpus, 80 * GB, tflops=150), Training(tp=tp, recompute=recompute,
                                                                        overlap_grad_reduce=True),
                  global_batch=batch, framework="megatron")
    flags = megatron_args(search.candidates[search.best], search)
    check = Path(__file__).with_name("megatron_args_check.py")
    proc = subprocess.run([sys.executable, str(check), MEGATRON, str(gpus), str(model.layers), str(model.hidden),
                           str(model.heads), str(model.seq_len), *flags], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "parsed and validated" in proc.stdout
