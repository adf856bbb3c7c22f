"""A small GPT and the pipeline stages cut from it (M047, M048).

Megatron builds each pipeline rank's model with two flags: ``pre_process`` (this stage owns the
embedding and takes token ids) and ``post_process`` (this stage owns the final norm, the output
layer and the loss).  Every other stage holds only its share of transformer blocks and takes the
activation received from the previous stage.  :func:`build_stage` does exactly that, so each
process allocates only its own parameters.

The model is described by :class:`~pipeline_kit.layout.ModelSpec`, the same description the cost
model and the balancer read (which stage holds which layers is a :class:`~pipeline_kit.layout.Layout`).
Every layer is initialised from its own seed (``seed``, layer index), so a stage built in any
process has bit-for-bit the parameters of the same layers in :class:`GPT`, the single-process
reference the runtime checks its gradients against.  Parameter names agree too
(``blocks.5.mlp.fc.weight`` is layer 5 wherever it lives).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layout.costs import ModelSpec, unbuildable
from ..layout.spec import Layout, StageSpec


def GPTConfig(**fields) -> ModelSpec:  # noqa: N802 - a constructor under its old class name (notebooks, book)
    """A :class:`~pipeline_kit.layout.ModelSpec` for the runtime, checked for what the runtime needs.

    Defaults are tiny on purpose (a 2-core laptop runs 4 ranks of it in seconds); the runtime trains
    in fp32, so ``dtype_bytes`` defaults to 4.
    """
    fields.setdefault("dtype_bytes", 4)
    return check_runnable(ModelSpec(**fields))


def check_runnable(cfg: ModelSpec) -> ModelSpec:
    """Raise ValueError unless the runtime can build ``cfg``: positive sizes, ``hidden`` divisible by ``heads``, and
    the GPT it has -- full multi-head attention and a GELU MLP (of any width)."""
    for name in ("vocab", "seq_len", "hidden", "heads", "layers", "ffn_mult"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"model {name} must be a positive integer, got {value!r}")
    if cfg.hidden % cfg.heads:
        raise ValueError(f"model hidden ({cfg.hidden}) must be divisible by heads ({cfg.heads})")
    unsupported = unbuildable(cfg)
    if unsupported:
        raise ValueError(unsupported)
    return cfg


class _Init:
    """``with _Init(seed):`` -- modules built inside get parameters that depend on ``seed`` only."""

    def __init__(self, seed: int):
        self.seed = seed
        self._fork = torch.random.fork_rng(devices=[])

    def __enter__(self):
        self._fork.__enter__()
        # the CPU generator only (modules are built on the CPU): torch.manual_seed would also re-seed every GPU's
        # generator, which fork_rng(devices=[]) does not restore, and it records a stack per device type on
        # every call (a third of the time a stage took to build)
        torch.default_generator.manual_seed(self.seed)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)


class Embedding(nn.Module):
    """Token + learned position embedding: the ``pre_process`` part of the first stage."""

    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.tok(tokens) + self.pos(positions)


class Attention(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden, cfg.ffn)
        self.out = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    """A pre-norm transformer decoder layer."""

    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    """Final norm + output layer: the ``post_process`` part of the last stage.

    With ``tie_embeddings`` the output weight starts as a copy of the token embedding; across a
    pipeline the two copies live on different ranks and :func:`sync_tied_grads` sums their
    gradients, as Megatron's embedding group does, so both take the same optimizer step.
    """

    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _seed(cfg: ModelSpec, part: str, layer: int = 0) -> int:
    offsets = {"embedding": 1, "block": 1000, "head": 2}
    return cfg.seed * 1_000_003 + offsets[part] + layer


def _make_embedding(cfg: ModelSpec) -> Embedding:
    with _Init(_seed(cfg, "embedding")):
        return Embedding(cfg)


def _make_block(cfg: ModelSpec, layer: int) -> Block:
    with _Init(_seed(cfg, "block", layer)):
        return Block(cfg)


def _make_head(cfg: ModelSpec) -> Head:
    with _Init(_seed(cfg, "head")):
        head = Head(cfg)
    if cfg.tie_embeddings:
        with torch.no_grad():
            head.out.weight.copy_(_make_embedding(cfg).tok.weight)
    return head


def default_layout(layers: int, stages: int) -> Layout:
    """The layout the runtime builds without ``--layout``: :func:`split_layers`, embedding first, loss last."""
    return Layout(tuple(StageSpec(s == 0, r, s == stages - 1) for s, r in enumerate(split_layers(layers, stages))))


def split_layers(layers: int, stages: int) -> list[range]:
    """Even split of ``layers`` decoder layers over ``stages`` stages (earlier stages take any extra)."""
    if layers < stages:
        raise ValueError(f"cannot split {layers} layers over {stages} pipeline stages: every stage needs at least "
                         f"one layer (use --layers {stages} or more)")
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


class StageModule(nn.Module):
    """One virtual pipeline stage: [embedding] + its blocks + [final norm, output layer].

    ``forward`` takes token ids on the first stage (``pre_process``) and the previous stage's
    activation elsewhere; it returns logits on the last stage (``post_process``) and the
    activation to send elsewhere.  The loss is applied by the caller on the last stage only.
    """

    def __init__(self, cfg: ModelSpec, stage: int, num_stages: int, layer_ids: range):
        super().__init__()
        self.stage, self.num_stages, self.layer_ids = stage, num_stages, layer_ids
        self.pre_process = stage == 0
        self.post_process = stage == num_stages - 1
        self.embedding = _make_embedding(cfg) if self.pre_process else None
        self.blocks = nn.ModuleDict({str(i): _make_block(cfg, i) for i in layer_ids})
        self.head = _make_head(cfg) if self.post_process else None
        if self.pre_process and self.post_process and cfg.tie_embeddings:
            self.head.out.weight = self.embedding.tok.weight  # one stage holds both ends: truly shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        for block in self.blocks.values():
            x = block(x)
        if self.head is not None:
            x = self.head(x)
        return x

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_stage(cfg: ModelSpec, stage: int, num_stages: int, layer_ids: range | None = None) -> StageModule:
    """Build only virtual stage ``stage`` of ``num_stages``: the part of the model this rank owns."""
    check_runnable(cfg)
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage must be in 0..{num_stages - 1}, got {stage}")
    if layer_ids is None:
        layer_ids = split_layers(cfg.layers, num_stages)[stage]
    return StageModule(cfg, stage, num_stages, layer_ids)


class GPT(nn.Module):
    """The whole model in one process: the reference the pipeline's gradients must equal."""

    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.cfg = cfg
        self.embedding = _make_embedding(cfg)
        self.blocks = nn.ModuleDict({str(i): _make_block(cfg, i) for i in range(cfg.layers)})
        self.head = _make_head(cfg)
        if cfg.tie_embeddings:
            self.head.out.weight = self.embedding.tok.weight  # one tensor, as in a single-process model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for block in self.blocks.values():
            x = block(x)
        return self.head(x)


def make_batch(cfg: ModelSpec, microbatches: int, micro_batch_size: int, step: int, device="cpu"):
    """A learnable synthetic batch, identical on every rank: ``x[t+1] = x[t] + stride (mod vocab)``.

    Returns ``(tokens, targets)``, each a list of ``microbatches`` tensors ``[micro_batch_size,
    seq_len]``.  Every rank makes the same batch from the same seed, so the first stage reads the
    tokens and the last stage the targets without shipping data between them.
    """
    gen = torch.Generator().manual_seed(cfg.seed + 7919 * step)
    n = microbatches * micro_batch_size
    start = torch.randint(0, cfg.vocab, (n, 1), generator=gen)
    stride = torch.randint(1, 4, (n, 1), generator=gen)
    seq = (start + stride * torch.arange(cfg.seq_len + 1)) % cfg.vocab
    tokens = seq[:, :-1].to(device).split(micro_batch_size)
    targets = seq[:, 1:].to(device).split(micro_batch_size)
    return list(tokens), list(targets)
