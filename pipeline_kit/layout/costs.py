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
* one boundary transfer -- ``s b h`` elements x ``dtype_bytes`` (M046), once forward (activation)
  and once backward (its gradient) per microbatch.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..inputs import Field, InputError, boolean, check_object, integer, read_json
from ..limits import LimitError
from .spec import Layout, LayoutError, StageSpec


@dataclass(frozen=True)
class ModelSpec:
    """Model and batch shape: enough to count every stage's parameters, FLOPs and bytes.

    The one model description of the kit: the runtime builds its GPT from it too
    (:mod:`pipeline_kit.runtime.model`, where ``GPTConfig`` makes one with the runtime's defaults).
    ``seed`` only matters there: it fixes the initial weights and the synthetic data.
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

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, tuple[ModelSpec, str]] = {
    "tiny": (ModelSpec(), "the runtime's default model (8 layers, hidden 64): what the laptop runs"),
    "seed-pp8": (ModelSpec(vocab=32000, seq_len=512, hidden=768, heads=12, layers=16, micro_batch_size=1),
                 ("16 layers, hidden 768, vocab 32000, seq 512, untied: its PP8 even split reproduces the seeds' "
                  "endpoint imbalance, 39.1M vs 14.2M parameters, max/min 2.76x")),
    "gpt2-medium-ish": (ModelSpec(vocab=50304, seq_len=1024, hidden=1024, heads=16, layers=24, micro_batch_size=1),
                        "24 layers, hidden 1024, vocab 50304, seq 1024"),
}


# A --config file, one line a field; a field left out keeps ModelSpec's default.
MODEL_JSON = {
    "vocab": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.vocab),
    "seq_len": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.seq_len),
    "hidden": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.hidden),
    "heads": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.heads),
    "layers": Field(integer(1, "MAX_LAYERS"), default=ModelSpec.layers),
    "ffn_mult": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.ffn_mult),
    "tie_embeddings": Field(boolean, default=ModelSpec.tie_embeddings),
    "micro_batch_size": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.micro_batch_size),
    "dtype_bytes": Field(integer(1, "MAX_MODEL_DIM"), default=ModelSpec.dtype_bytes),
    "seed": Field(integer(0, "MAX_SEED"), default=ModelSpec.seed),
}


def load_model_spec(name_or_file: str) -> ModelSpec:
    """A preset name (see :data:`PRESETS`) or a JSON file checked against :data:`MODEL_JSON`."""
    if name_or_file in PRESETS:
        return PRESETS[name_or_file][0]
    if not os.path.exists(name_or_file):
        raise LayoutError(f"--config {name_or_file!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    try:
        return ModelSpec(**check_object(read_json(name_or_file, "--config"), MODEL_JSON, f"--config {name_or_file}"))
    except (InputError, LimitError) as exc:
        raise LayoutError(str(exc)) from None


# -- per item ---------------------------------------------------------------------------------
def layer_params(m: ModelSpec) -> int:
    h, f = m.hidden, m.ffn_mult
    return (4 + 2 * f) * h * h + (9 + f) * h


def embedding_params(m: ModelSpec) -> int:
    return m.vocab * m.hidden + m.seq_len * m.hidden


def loss_params(m: ModelSpec) -> int:
    return m.vocab * m.hidden + 2 * m.hidden


def layer_flops_per_token(m: ModelSpec) -> int:
    h = m.hidden
    return (8 + 4 * m.ffn_mult) * h * h + 4 * m.seq_len * h


def loss_flops_per_token(m: ModelSpec) -> int:
    return 2 * m.vocab * m.hidden


def layer_activation_bytes(m: ModelSpec) -> float:
    s, b, h, a = m.seq_len, m.micro_batch_size, m.hidden, m.heads
    return s * b * h * (34 + 5 * a * s / h) * m.dtype_bytes / 2


def boundary_bytes(m: ModelSpec) -> int:
    """Bytes of one activation (or its gradient) crossing a stage boundary: ``s * b * h * dtype_bytes``."""
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
    layout.check(pp, m.layers)
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
    lines.append(f"params max/min = {max(params):,} / {min(params):,} = {max(params) / min(params):.2f}x; "
                 f"forward FLOPs max/min = {max(flops) / min(flops):.2f}x")
    lines.append(f"P2P: {vol['per_transfer']:,} bytes per transfer (s*b*h*{m.dtype_bytes}); with {microbatches} "
                 f"microbatches and {vol['boundaries']} boundaries: {vol['per_direction_per_step'] / 2**20:.2f} MiB "
                 f"per direction per step, {vol['total_per_step'] / 2**20:.2f} MiB in total")
    return "\n".join(lines)
