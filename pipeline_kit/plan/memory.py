"""What one pipeline rank holds at its peak: the planner's memory model (M052, and the zero-bubble families).

Why its own module: the planner, lab 10's grader and the book's planning chapter must size a rank the same
way, and each term has to be one a reader can check by hand.  Per rank ``r`` of a layout on ``pp`` ranks:

* **weights** -- the parameters of every stage ``r`` holds, ``dtype_bytes`` each (2 for bf16 training);
* **gradients** -- one fp32 ``main_grad`` per parameter, 4 bytes (Megatron accumulates in fp32 by default);
* **optimizer state** -- Adam keeps an fp32 master copy, ``exp_avg`` and ``exp_avg_sq``: 12 bytes per
  parameter (8 when training in fp32, which needs no master copy); SGD with momentum 8 (4 in fp32).  With
  bf16 weights Adam totals the well-known 18 bytes per parameter of Megatron without the distributed
  optimizer;
* **activations** -- what the schedule keeps alive at once: each forward adds the stage's activation bytes
  per microbatch (:func:`layer_activation_bytes_kept`: Megatron-Core 0.19's per-layer estimate, fused attention
  by default), a full backward ``B`` frees them.  A split backward's ``I`` frees all but the linear layers'
  inputs, which its ``W`` needs and then frees (:func:`w_input_bytes`, as the zero-bubble paper counts it);
* **W's kept gradients** -- a split backward (``I`` now, ``W`` later) must keep, from ``I`` to ``W``, the
  output gradients the weight gradients need: per decoder layer those of its four linear layers,
  ``(5 + f) s b h`` elements (QKV ``3h``, projection ``h``, MLP ``f h`` and ``h``), plus the embedding
  output's gradient on E and the fp32 logits' gradient ``s b V`` on L.  This is what ZB-H1 and ZB-V trade
  for their smaller bubble, and what sizing a zero-bubble schedule from 1F1B's figures forgets;
* **P2P buffers** -- one receive buffer for the activation and one for its gradient per chunk,
  ``2 v s b h dtype_bytes`` (none without a pipeline).

:class:`Training` changes these terms: ``tp`` divides every one of them, ``recompute`` the activations, the
distributed optimizer shards the optimizer state over the data-parallel replicas.  Not counted, and said so
wherever a figure is shown: the CUDA context and allocator fragmentation (leave a few GB of headroom), and the
buffers of tensor parallelism's own communication.  The peak is the largest sum over the rank's op order --
memory only changes at the rank's own ops, so no timing is needed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..arguments import Arguments
from ..layout.costs import (ModelSpec, boundary_bytes, layer_activation_bytes, layer_activation_units, layer_shape,
                            stage_costs)
from ..layout.spec import Layout, LayoutError
from ..schedules.ops import Schedule, _stage_owner

OPTIMIZERS = ("adam", "sgd")
RECOMPUTE = ("none", "selective", "full")  # Megatron's --recompute-granularity, and none
ATTENTION = ("fused", "unfused")  # fused/flash kernels keep no attention scores (Megatron-Core 0.19's default, auto)
GRAD_BYTES = 4  # fp32 main grads


@dataclass(frozen=True)
class Training:
    """How the model is trained, as far as memory and time per rank go.

    ``tp``: the tensor-parallel size, with sequence parallelism: weights, activations, the boundary tensor and
    compute are split ``tp`` ways (its all-reduces are not modelled).  ``recompute``: ``selective`` keeps no
    attention scores (Megatron's selective recomputation, and what flash attention gives), ``full`` keeps only
    each layer's input and runs every forward again in the backward.  ``distributed_optimizer``: the optimizer
    state is sharded over the data-parallel replicas (Megatron's ``--use-distributed-optimizer``).
    ``overlap_grad_reduce``: the data-parallel gradient reduce starts inside the last microbatch's backward
    (Megatron's ``--overlap-grad-reduce``, off by default there and here); it changes time, not memory.
    ``attention``: ``fused`` (Megatron-Core 0.19's default backend picks a fused or flash kernel, which keeps no
    ``s x s`` scores) or ``unfused`` (Korthikanti et al.'s 2022 accounting, with the ``5 a s / h`` score term).
    """

    optimizer: str = "adam"
    tp: int = 1
    recompute: str = "none"
    distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    attention: str = "fused"

    def __post_init__(self) -> None:
        arg = Arguments("Training", LayoutError)
        arg.text("optimizer", self.optimizer, OPTIMIZERS)
        arg.integer("tp", self.tp, limit="MAX_RANKS")
        arg.text("recompute", self.recompute, RECOMPUTE)
        arg.boolean("distributed_optimizer", self.distributed_optimizer)
        arg.boolean("overlap_grad_reduce", self.overlap_grad_reduce)
        arg.text("attention", self.attention, ATTENTION)

    def words(self) -> str:
        """``Adam, tp=8, selective recomputation, distributed optimizer`` -- for reports."""
        parts = ["Adam" if self.optimizer == "adam" else "SGD with momentum"]
        if self.tp > 1:
            parts.append(f"tp={self.tp} with sequence parallelism")
        parts.append(f"{self.attention} attention")
        if self.recompute != "none":
            parts.append(f"{self.recompute} recomputation")
        if self.distributed_optimizer:
            parts.append("distributed optimizer")
        parts.append("gradient reduce overlapped with the backward" if self.overlap_grad_reduce else
                     "gradient reduce after the flush")
        return ", ".join(parts)


def optimizer_bytes_per_param(optimizer: str, dtype_bytes: int) -> int:
    """Optimizer state per parameter: an fp32 master copy when training in lower precision, plus Adam's two
    moments or SGD's momentum."""
    Arguments("optimizer_bytes_per_param").text("optimizer", optimizer, OPTIMIZERS)
    master = 4 if dtype_bytes < 4 else 0
    return master + (8 if optimizer == "adam" else 4)


def bytes_per_param(optimizer: str, dtype_bytes: int) -> int:
    """Weights + gradients + optimizer state per parameter (18 for Adam with bf16 weights)."""
    return dtype_bytes + GRAD_BYTES + optimizer_bytes_per_param(optimizer, dtype_bytes)


def layer_activation_bytes_kept(m: ModelSpec, recompute: str = "none", attention: str = "fused") -> float:
    """Bytes one decoder layer keeps per microbatch for its backward (before the ``tp`` split): ``s b h (18 + 4 f)``
    at 16 bits for the kit's GPT, ``f`` the MLP's width over ``h`` -- Megatron-Core 0.19's own estimate
    (``theoretical_memory_usage.py``, Korthikanti et al.'s Table 2 with the MLP's width), which is ``34 s b h`` for
    ``f = 4``; grouped-query attention and SwiGLU change it (:func:`~pipeline_kit.layout.costs.layer_activation_units`).
    Unfused attention without recomputation adds the ``5 a s / h`` score term
    (Korthikanti's ``s b h (34 + 5 a s / h)``, :func:`~pipeline_kit.layout.costs.layer_activation_bytes`); full
    recomputation keeps the layer's input alone, ``s b h`` elements."""
    arg = Arguments("layer_activation_bytes_kept")
    arg.text("recompute", recompute, RECOMPUTE)
    arg.text("attention", attention, ATTENTION)
    sbh = m.seq_len * m.micro_batch_size * m.hidden
    if recompute == "full":
        return sbh * m.dtype_bytes
    kept = sbh * layer_activation_units(m) * m.dtype_bytes / 2
    if attention == "unfused" and recompute == "none":
        kept += sbh * 5 * m.heads * m.seq_len / m.hidden * m.dtype_bytes / 2
    return kept


def stage_activations(m: ModelSpec, layout: Layout, training: Training | None = None, costs=None) -> list[float]:
    """Bytes each stage of ``layout`` keeps for one microbatch's backward (before the ``tp`` split): its E and L
    parts as ``stage_costs`` counts them, its decoder layers as ``layer_activation_bytes_kept`` does for
    ``training``'s attention and recomputation."""
    training = Training() if training is None else training
    costs = stage_costs(layout, m, 1) if costs is None else costs
    per_layer = layer_activation_bytes(m)
    kept_layer = layer_activation_bytes_kept(m, training.recompute, training.attention)
    return [c.activation_bytes + len(c.spec.layers) * (kept_layer - per_layer) for c in costs]


def w_input_bytes(m: ModelSpec, layers: int, loss: bool) -> float:
    """What a stage's ``W`` needs of its activations (Qi et al.'s zero-bubble paper: the linear layers' inputs),
    per microbatch: per decoder layer the inputs of QKV, of the projection and of the two MLP layers, ``(3 + f)
    s b h`` elements, and the output layer's input on L.  ``I`` frees the rest of the stage's activations."""
    tokens = m.seq_len * m.micro_batch_size
    return (layers * (3 * m.hidden + m.ffn) + (m.hidden if loss else 0)) * tokens * m.dtype_bytes


def wgrad_kept_bytes(m: ModelSpec, layers: int, embedding: bool, loss: bool) -> float:
    """Bytes a stage keeps from a microbatch's ``I`` to its ``W``: the output gradients its weight gradients need."""
    tokens = m.seq_len * m.micro_batch_size
    sh = layer_shape(m)  # the outputs of QKV, the projection, fc1 and fc2: (5 + f) h for the kit's GPT
    out = layers * (sh.qkv + sh.hidden + sh.fc1 + sh.hidden) * tokens * m.dtype_bytes
    if embedding:
        out += tokens * m.hidden * m.dtype_bytes
    if loss:
        out += tokens * m.vocab * 4
    return out


@dataclass(frozen=True)
class RankMemory:
    """One rank's bytes by term; ``total`` is their sum, the figure compared with the GPU's memory."""

    rank: int
    params: float  # this rank's share (a tp-th of its stages' parameters)
    weights: float
    gradients: float
    optimizer: float
    activations: float  # the part of the peak held as forward activations
    wgrad_kept: float  # the part of the peak held as output gradients waiting for W
    p2p_buffers: float

    @property
    def state(self) -> float:
        """Weights, gradients and optimizer state: what the rank holds whatever the schedule."""
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return self.state + self.activations + self.wgrad_kept + self.p2p_buffers

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def rank_memory(m: ModelSpec, layout: Layout, schedule: Schedule, training: Training | None = None,
                dp: int = 1) -> list[RankMemory]:
    """Every rank's peak memory when ``schedule`` runs ``layout`` of model ``m`` (see the module docstring);
    ``dp`` only matters with the distributed optimizer, whose state it shards."""
    arg = Arguments("rank_memory", LayoutError)
    arg.instance("m", m, ModelSpec, "a ModelSpec (or load_model_spec(...))")
    arg.instance("layout", layout, Layout, "a Layout (from parse_layout)")
    arg.instance("schedule", schedule, Schedule, "a Schedule (from build_schedule)")
    training = Training() if training is None else arg.instance("training", training, Training, "a Training")
    arg.integer("dp", dp, limit="MAX_GPUS")
    tp = training.tp
    pp, stages = schedule.pp, schedule.stages
    if layout.num_stages != stages:
        arg.fail(f"the layout has {layout.num_stages} stages but the schedule runs {stages} "
                 f"(pp={pp} x {schedule.chunks} chunk(s))")
    costs = stage_costs(layout, m, pp)
    act = [a / tp for a in stage_activations(m, layout, training, costs)]
    kept = [wgrad_kept_bytes(m, len(st.layers), st.embedding, st.loss) / tp for st in layout.stages]
    needs = [w_input_bytes(m, len(st.layers), st.loss) / tp for st in layout.stages]  # kept from I to W
    params = [0] * pp
    for s, c in enumerate(costs):
        params[_stage_owner(s, pp, schedule.placement)[0]] += c.params / tp
    per_param_opt = optimizer_bytes_per_param(training.optimizer, m.dtype_bytes)
    if training.distributed_optimizer:
        per_param_opt /= dp
    p2p = 2 * schedule.chunks * boundary_bytes(m) / tp if stages > 1 else 0
    keep = not schedule.forward_only  # a property that walks every op: read it once
    out = []
    for r in range(pp):
        live, pending, peak, at_peak = 0.0, 0.0, 0.0, (0.0, 0.0)
        stage_of = schedule.stages_of(r)
        for kind, _, chunk in schedule.ranks[r]:
            s = stage_of[chunk]
            if kind == "F":
                if not keep:
                    continue
                live += act[s]
            elif kind == "I":  # frees what W does not need, keeps the output gradients W does
                live -= act[s] - needs[s]
                pending += kept[s]
            elif kind == "W":
                live -= needs[s]
                pending -= kept[s]
            else:  # B: the whole backward frees the microbatch's activations at once
                live -= act[s]
            if live + pending > peak:
                peak, at_peak = live + pending, (live, pending)
        out.append(RankMemory(r, params[r], params[r] * m.dtype_bytes, params[r] * GRAD_BYTES,
                              params[r] * per_param_opt, at_peak[0], at_peak[1], p2p))
    return out
