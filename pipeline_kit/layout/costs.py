"""What each stage of a layout costs: parameters, FLOPs, activation memory, boundary traffic (M046, M047).

Counted analytically for the kit's GPT (the same architecture :mod:`pipeline_kit.runtime.model`
builds; a test checks every parameter count against torch).  No torch here: the tables in the
book and the balancer are computed in microseconds for models far larger than a laptop holds.

Per item, for hidden ``h``, FFN width ``f h``, sequence ``s``, vocabulary ``V``, heads ``a``:

* parameters -- ``E``: ``V h + s h`` (token + position tables); ``t``: ``(4 + 2f) h^2 + (9 + f) h``;
  ``L``: ``V h + 2h`` (output layer + final norm; with tied embeddings the last stage still holds a
  copy of ``V h``, as in Megatron).
* forward FLOPs per token -- ``E``: ~0 (a lookup); ``t``: ``(8 + 4f) h^2 + 4 s h`` (QKV and output
  projections, ``Q K^T`` and ``A V``, the MLP); ``L``: ``2 V h``.  Backward costs about twice forward.
* activation bytes per microbatch of ``b`` sequences -- ``t``: ``s b h (34 + 5 a s / h)`` for 16-bit
  training (Korthikanti et al. 2022, no recomputation), scaled by ``dtype_bytes / 2``; ``E``: its
  output, ``s b h`` elements; ``L``: the fp32 logits ``s b V`` x 4 bytes plus its input.

Those are the formulas of the kit's GPT (``f = 4``, full multi-head attention).  A model described as Megatron
describes Llama-like ones -- ``ffn_hidden`` (``--ffn-hidden-size``, any width, not only a multiple of ``h``),
``swiglu`` (a gated MLP: its first linear layer is twice as wide) and ``kv_heads`` (grouped-query attention,
``--num-query-groups``: K and V are ``kv_heads / heads`` as wide as Q) -- changes each term through
:func:`layer_shape`, and reduces to them for the kit's GPT.
* one boundary transfer -- ``s b h`` elements x ``dtype_bytes`` (M046), once forward (activation)
  and once backward (its gradient) per microbatch.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields

from ..arguments import Arguments
from ..inputs import Field, InputError, boolean, check_object, excerpt, integer, read_json
from ..limits import LimitError
from .spec import Layout, LayoutError, StageSpec

# Every whole-number field of a model: its least value and the limit it stays under (one table for
# ModelSpec(...) and for a --config file).  No decoder layer at all is a model too, the one of the layout "E|L"
# (a stage may hold only E or only L); a --config file, a model to train, has one at least.
MODEL_INTS = {"vocab": (1, "MAX_MODEL_DIM"), "seq_len": (1, "MAX_MODEL_DIM"), "hidden": (1, "MAX_MODEL_DIM"),
              "heads": (1, "MAX_MODEL_DIM"), "layers": (0, "MAX_LAYERS"), "ffn_mult": (1, "MAX_MODEL_DIM"),
              "micro_batch_size": (1, "MAX_MODEL_DIM"), "dtype_bytes": (1, "MAX_MODEL_DIM"), "seed": (0, "MAX_SEED"),
    "ffn_hidden": (0, "MAX_MODEL_DIM"), "kv_heads": (0, "MAX_MODEL_DIM")}


LLAMA_FIELDS = ("ffn_hidden", "kv_heads", "swiglu")  # the planner's; a repr shows them only when set


@dataclass(frozen=True)
class ModelSpec:
    """Model and batch shape: enough to count every stage's parameters, FLOPs and bytes.

    The one model description of the kit: the runtime builds its GPT from it too
    (:mod:`pipeline_kit.runtime.model`, where ``GPTConfig`` makes one with the runtime's defaults).
    ``seed`` only matters there: it fixes the initial weights and the synthetic data.

    The last three describe Llama-like models for the planner, with Megatron's meaning: ``ffn_hidden`` the MLP's
    width (0: ``ffn_mult x hidden``; give one or the other), ``kv_heads`` the key/value heads of grouped-query
    attention (0: as many as ``heads``), ``swiglu`` a gated MLP.  The runtime builds ``ffn_hidden``; it refuses the
    other two (its GPT has full attention and a GELU MLP).
    """

    vocab: int = 256
    seq_len: int = 32
    hidden: int = 64
    heads: int = 4
    layers: int = 8
    ffn_mult: int = 4
    tie_embeddings: bool = False
    micro_batch_size: int = 2
    dtype_bytes: int = 2
    seed: int = 1234
    ffn_hidden: int = 0
    kv_heads: int = 0
    swiglu: bool = False

    def __post_init__(self) -> None:
        arg = Arguments("ModelSpec", LayoutError)
        for name, (low, limit) in MODEL_INTS.items():
            arg.integer(name, getattr(self, name), low, limit=limit)
        arg.boolean("tie_embeddings", self.tie_embeddings)
        arg.boolean("swiglu", self.swiglu)
        if self.ffn_hidden and self.ffn_mult != ModelSpec.ffn_mult:
            arg.fail(f"give ffn_hidden ({self.ffn_hidden:,}) or ffn_mult ({self.ffn_mult}), not both: each sets the "
                     "MLP's width")
        if self.kv_heads and (self.heads % self.kv_heads or self.hidden % self.heads):
            arg.fail(f"argument kv_heads: {self.kv_heads:,} key/value heads need heads ({self.heads:,}) a multiple "
                     f"of them and hidden ({self.hidden:,}) a multiple of heads: each group of query heads shares "
                     "one whole key/value head")

    def __repr__(self) -> str:
        """The dataclass's, less the Llama-like fields where they keep their defaults (the kit's GPT)."""
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if f.name not in LLAMA_FIELDS or getattr(self, f.name) != f.default]
        return f"ModelSpec({', '.join(shown)})"

    @property
    def ffn(self) -> int:
        """The MLP's width: ``ffn_hidden``, or ``ffn_mult x hidden``."""
        return self.ffn_hidden or self.ffn_mult * self.hidden

    @property
    def query_groups(self) -> int:
        """Key/value heads: ``kv_heads``, or ``heads`` (multi-head attention)."""
        return self.kv_heads or self.heads

    def to_dict(self) -> dict:
        return asdict(self)


class _Presets(dict):
    """The presets by name.  An old name (:data:`PRESET_ALIASES`) finds the same entry -- ``PRESETS["seed-pp8"]``,
    ``"seed-pp8" in PRESETS``, ``--config seed-pp8`` still work -- but is not listed: iterating, ``keys()`` and
    ``items()`` give each preset once, under its name."""

    def __missing__(self, name):
        if isinstance(name, str) and name in PRESET_ALIASES:
            return self[PRESET_ALIASES[name]]
        raise KeyError(name)

    def __contains__(self, name) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and name in PRESET_ALIASES)

    def get(self, name, default=None):
        return self[name] if name in self else default


PRESETS: dict[str, tuple[ModelSpec, str]] = _Presets({
    "tiny": (ModelSpec(), "the runtime's default model (8 layers, hidden 64): what the laptop runs"),
    "bank-pp8": (ModelSpec(vocab=32000, seq_len=512, hidden=768, heads=12, layers=16, micro_batch_size=1),
                 ("16 layers, hidden 768, vocab 32000, seq 512, untied: its PP8 even split reproduces the interview "
                  "question bank's endpoint imbalance, 39.1M vs 14.2M parameters, max/min 2.76x")),
    "gpt2-medium-ish": (ModelSpec(vocab=50304, seq_len=1024, hidden=1024, heads=16, layers=24, micro_batch_size=1),
                        "24 layers, hidden 1024, vocab 50304, seq 1024"),
    "llama-70b-ish": (ModelSpec(vocab=32000, seq_len=4096, hidden=8192, heads=64, layers=80, micro_batch_size=1),
                      ("80 layers, hidden 8192, vocab 32000, seq 4096: Llama-2-70B's depth and width in the kit's GPT "
                       "(4h MLP, full attention; 65B parameters): the planning chapter's large model")),
    "llama2-70b": (ModelSpec(vocab=32000, seq_len=4096, hidden=8192, heads=64, layers=80, micro_batch_size=1,
                             ffn_hidden=28672, kv_heads=8, swiglu=True),
                   ("Llama-2-70B's shape: 80 layers, hidden 8192, SwiGLU MLP of 28672, 64 heads with 8 key/value "
                    "heads, vocab 32000, seq 4096 (69B parameters with the kit's biases and LayerNorms); for the "
                    "planner (the runtime cannot build SwiGLU or grouped-query attention)")),
})
PRESET_ALIASES = {"seed-pp8": "bank-pp8"}  # old name -> preset: accepted everywhere, listed nowhere


# A --config file, one line a field (ModelSpec's, in its order); a field left out keeps ModelSpec's default.
CONFIG_LOW = {"layers": 1}
MODEL_JSON = {f.name: Field(integer(CONFIG_LOW.get(f.name, MODEL_INTS[f.name][0]), MODEL_INTS[f.name][1])
                            if f.name in MODEL_INTS else boolean, default=f.default) for f in fields(ModelSpec)}


def load_model_spec(name_or_file: str) -> ModelSpec:
    """A preset name (see :data:`PRESETS`) or a JSON file checked against :data:`MODEL_JSON`."""
    Arguments("load_model_spec", LayoutError).text("name_or_file", name_or_file)
    if name_or_file in PRESETS:
        return PRESETS[name_or_file][0]
    if not os.path.exists(name_or_file):
        raise LayoutError(f"--config {excerpt(name_or_file)} is neither a preset ({', '.join(PRESETS)}) nor a file")
    try:
        return ModelSpec(**check_object(read_json(name_or_file, "--config"), MODEL_JSON, f"--config {name_or_file}"))
    except (InputError, LimitError) as exc:
        raise LayoutError(str(exc)) from None


def unbuildable(cfg: ModelSpec) -> str | None:
    """What of ``cfg`` the runtime's GPT cannot build (grouped-query attention, SwiGLU), in words; None if nothing."""
    parts = ([f"grouped-query attention (kv_heads {cfg.kv_heads} of {cfg.heads} heads)"]
             if cfg.kv_heads and cfg.kv_heads != cfg.heads else []) + (["a SwiGLU MLP"] if cfg.swiglu else [])
    if not parts:
        return None
    return (f"the runtime's GPT has full multi-head attention and a GELU MLP: it cannot build {' or '.join(parts)} "
            "(the planner and the layout tools count them; a run cannot)")


# -- per item ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerShape:
    """The widths of one decoder layer's linear layers: what every per-layer count is made of."""

    hidden: int
    qkv: int  # the QKV projection's output: Q (h) and K, V (kv_width each)
    kv_width: int  # one of K or V: h for multi-head attention, kv_heads x head size for grouped-query attention
    fc1: int  # the MLP's first linear layer's output: ffn, twice it with SwiGLU (gate and up)
    ffn: int

    @property
    def linear_weights(self) -> int:
        """Weights of QKV, the output projection and the MLP's two layers (no biases)."""
        h = self.hidden
        return h * self.qkv + h * h + h * self.fc1 + self.ffn * h


def layer_shape(m: ModelSpec) -> LayerShape:
    h = m.hidden
    kv = h if not m.kv_heads else h // m.heads * m.kv_heads
    return LayerShape(h, h + 2 * kv, kv, m.ffn * (2 if m.swiglu else 1), m.ffn)


def layer_params(m: ModelSpec) -> int:
    """Linear weights and biases (QKV, projection, fc1, fc2) and two LayerNorms: ``(4 + 2f) h^2 + (9 + f) h`` for
    the kit's GPT."""
    sh = layer_shape(m)
    return sh.linear_weights + sh.qkv + sh.hidden + sh.fc1 + sh.hidden + 4 * sh.hidden


def embedding_params(m: ModelSpec) -> int:
    return m.vocab * m.hidden + m.seq_len * m.hidden


def loss_params(m: ModelSpec) -> int:
    return m.vocab * m.hidden + 2 * m.hidden


def model_params(m: ModelSpec) -> int:
    """Every parameter of the model, summed over its stages (the output layer counted even when tied, as the
    last stage keeps its own copy)."""
    return embedding_params(m) + m.layers * layer_params(m) + loss_params(m)


def layer_flops_per_token(m: ModelSpec) -> int:
    """Two FLOPs per linear weight, and ``Q K^T`` and ``A V`` (``2 s h`` each): ``(8 + 4f) h^2 + 4 s h``."""
    return 2 * layer_shape(m).linear_weights + 4 * m.seq_len * m.hidden


def loss_flops_per_token(m: ModelSpec) -> int:
    return 2 * m.vocab * m.hidden


def layer_activation_units(m: ModelSpec) -> float:
    """What one decoder layer keeps for its backward, in ``s b h`` bytes at 16 bits, without the attention scores:
    Korthikanti et al.'s tensors with this layer's widths -- two LayerNorm inputs (4); QKV's input, Q, K, V, the
    projection's input and its dropout mask (``7 + 4 kv/h``: 11 for multi-head attention); the MLP's input, the
    activation's input (``fc1``), the second layer's input (``ffn``) and a dropout mask (``3 + 2 (fc1 + ffn) / h``:
    ``3 + 4f`` without gating).  ``18 + 4f`` for the kit's GPT, as Megatron-Core 0.19's
    ``theoretical_memory_usage.py`` counts; that estimator leaves out grouped-query attention and SwiGLU's wider
    ``fc1`` (its own TODO), which this counts."""
    sh = layer_shape(m)
    return 4 + 7 + 4 * sh.kv_width / sh.hidden + 3 + 2 * (sh.fc1 + sh.ffn) / sh.hidden


def layer_activation_bytes(m: ModelSpec) -> float:
    """Korthikanti et al.'s ``s b h (34 + 5 a s / h)`` (unfused attention, no recomputation) with this layer's
    widths (:func:`layer_activation_units`)."""
    s, b, h, a = m.seq_len, m.micro_batch_size, m.hidden, m.heads
    return s * b * h * (layer_activation_units(m) + 5 * a * s / h) * m.dtype_bytes / 2


def _model(func: str, m) -> ModelSpec:
    return Arguments(func, LayoutError).instance("m", m, ModelSpec, "a ModelSpec (or load_model_spec(...))")


def _layout(func: str, layout) -> Layout:
    return Arguments(func, LayoutError).instance("layout", layout, Layout, "a Layout (from parse_layout)")


def boundary_bytes(m: ModelSpec) -> int:
    """Bytes of one activation (or its gradient) crossing a stage boundary: ``s * b * h * dtype_bytes``."""
    _model("boundary_bytes", m)
    return m.seq_len * m.micro_batch_size * m.hidden * m.dtype_bytes


@dataclass(frozen=True)
class StageCost:
    stage: int
    rank: int
    chunk: int
    spec: StageSpec
    params: int
    fwd_flops: float  # per microbatch
    activation_bytes: float  # per microbatch kept for backward
    send_bytes: int  # one forward transfer to the next stage (0 on the last)

    @property
    def bwd_flops(self) -> float:
        return 2 * self.fwd_flops


def stage_costs(layout: Layout, m: ModelSpec, pp: int) -> list[StageCost]:
    """Parameters, forward FLOPs per microbatch, activation bytes and boundary bytes of every stage."""
    _layout("stage_costs", layout)
    _model("stage_costs", m)
    layout._check(Arguments("stage_costs", LayoutError), pp, m.layers)
    tokens = m.seq_len * m.micro_batch_size
    out = []
    for k, st in enumerate(layout.stages):
        n = len(st.layers)
        params = n * layer_params(m) + (embedding_params(m) if st.embedding else 0) + (loss_params(m) if st.loss else 0)
        flops = tokens * (n * layer_flops_per_token(m) + (loss_flops_per_token(m) if st.loss else 0))
        act = n * layer_activation_bytes(m)
        if st.embedding:
            act += tokens * m.hidden * m.dtype_bytes
        if st.loss:
            act += tokens * m.vocab * 4 + tokens * m.hidden * m.dtype_bytes
        rank, chunk = layout.owner(k, pp)
        send = boundary_bytes(m) if k < layout.num_stages - 1 else 0
        out.append(StageCost(k, rank, chunk, st, params, flops, act, send))
    return out


def p2p_volume(layout: Layout, m: ModelSpec, microbatches: int) -> dict:
    """Bytes crossing boundaries in one step: per transfer, per direction, and in total (M046)."""
    _layout("p2p_volume", layout)
    _model("p2p_volume", m)
    Arguments("p2p_volume", LayoutError).integer("microbatches", microbatches, limit="MAX_MICROBATCHES")
    boundaries = layout.num_stages - 1
    one = boundary_bytes(m)
    return {"per_transfer": one, "boundaries": boundaries, "per_direction_per_step": one * microbatches * boundaries,
            "total_per_step": 2 * one * microbatches * boundaries}


def format_table(costs: list[StageCost], m: ModelSpec, microbatches: int, layout: Layout) -> str:
    """The per-stage table the ``layout`` command prints."""
    header = (f"{'stage':>5} {'rank':>4} {'chunk':>5}  {'holds':<12} {'params':>12} {'fwd GFLOP/mb':>13} "
              f"{'act MiB/mb':>11} {'send KiB':>9}")
    lines = [header]
    for c in costs:
        lines.append(f"{c.stage:>5} {c.rank:>4} {c.chunk:>5}  {c.spec.text():<12} {c.params:>12,} "
                     f"{c.fwd_flops / 1e9:>13.3f} {c.activation_bytes / 2**20:>11.2f} {c.send_bytes / 2**10:>9.1f}")
    params = [c.params for c in costs]
    flops = [c.fwd_flops for c in costs]
    vol = p2p_volume(layout, m, microbatches)
    idle = next((c for c in costs if not c.fwd_flops), None)  # a stage of only E: a lookup, no FLOPs
    flop_ratio = (f"{max(flops) / min(flops):.2f}x" if idle is None else
                  f"n/a (stage {idle.stage} holds only {idle.spec.text()}, which does no FLOPs)")
    lines.append(f"params max/min = {max(params):,} / {min(params):,} = {max(params) / min(params):.2f}x; "
                 f"forward FLOPs max/min = {flop_ratio}")
    lines.append(f"P2P: {vol['per_transfer']:,} bytes per transfer (s*b*h*{m.dtype_bytes}); with {microbatches} "
                 f"microbatches and {vol['boundaries']} boundaries: {vol['per_direction_per_step'] / 2**20:.2f} MiB "
                 f"per direction per step, {vol['total_per_step'] / 2**20:.2f} MiB in total")
    return "\n".join(lines)
