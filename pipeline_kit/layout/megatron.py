"""Megatron-Core 0.19's own rules for ``--pipeline-model-parallel-layout``, checked without Megatron (M050).

Why a second checker beside :func:`~pipeline_kit.layout.parse_layout`: the kit's parser describes the kit's
model (``E``, ``t``, ``L``; no empty stage, no MTP) and is stricter than Megatron.  A layout the book quotes AS
Megatron's -- an empty stage, MTP layers -- must pass Megatron's rules instead, so they are restated here from
``PipelineParallelLayerLayout`` (``megatron/core/transformer/pipeline_parallel_layer_layout.py``, core_v0.19.0):

* the string (``parse_str_to_list``): commas are cosmetic; ``(...)*n`` groups, then ``x*n`` items, are unrolled
  by the same two patterns Megatron uses; ``|`` splits stages, and a stage may be empty; the symbols are ``E``
  (embedding), ``t`` (decoder layer), ``m`` (MTP layer), ``L`` (loss);
* the placement (``__init__``): ``pp`` divides the stage count; stage ``k`` is rank ``k % pp``'s virtual stage
  ``k // pp``;
* ``validate_layer_layout``: ``E`` first and once, ``L`` last and once, ``layers`` decoder layers, ``mtp_layers``
  MTP layers after every decoder layer, in the last virtual stage of a rank and all in one virtual stage.

Each refusal is a :class:`~pipeline_kit.layout.LayoutError` quoting the rule Megatron asserts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..arguments import Arguments
from ..inputs import InputError, check_text_size
from ..limits import MAX_LAYOUT_SYMBOLS, LimitError
from .spec import LayoutError

MEGATRON_SYMBOLS = {"E": "embedding", "t": "decoder layer", "m": "MTP layer", "L": "loss"}
_UNROLL = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))  # Megatron's two patterns, in order


@dataclass(frozen=True)
class MegatronLayout:
    """A layout Megatron accepts: ``stages[k]`` the symbols of stage ``k`` (``""`` for an empty one), on ``pp``
    ranks; ``mtp_standalone`` as Megatron reports it (MTP on a rank other than the last)."""

    stages: tuple[str, ...]
    pp: int
    mtp_standalone: bool

    @property
    def vpp(self) -> int:
        return len(self.stages) // self.pp

    def rank_stages(self, rank: int) -> list[str]:
        """What ``rank`` holds in each of its virtual stages, first to last."""
        Arguments("MegatronLayout.rank_stages", LayoutError).integer("rank", rank, 0, self.pp - 1,
                                                                      why=f"a rank below pp={self.pp}")
        return [self.stages[v * self.pp + rank] for v in range(self.vpp)]


def _times(digits: str) -> int:
    """A repeat count; one too long to be below the limit is counted as just over it (no huge int is built)."""
    return int(digits) if len(digits) <= len(str(MAX_LAYOUT_SYMBOLS)) else MAX_LAYOUT_SYMBOLS + 1


def _unroll(text: str) -> str:
    """Megatron's unrolling, with the size checked before each pass builds its result."""
    for pattern in _UNROLL:
        grown = len(text) + sum(len(m.group(1)) * _times(m.group(2)) - len(m.group(0)) for m in pattern.finditer(text))
        if grown > MAX_LAYOUT_SYMBOLS:
            raise LayoutError(f"the layout unrolls to more than the limit of {MAX_LAYOUT_SYMBOLS:,} symbols "
                              "(MAX_LAYOUT_SYMBOLS)")
        text = pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)
    return text


def megatron_layout(text: str, pp: int, layers: int, mtp_layers: int = 0) -> MegatronLayout:
    """Check ``text`` as Megatron-Core 0.19 checks ``--pipeline-model-parallel-layout`` for ``pp`` ranks, a model
    of ``layers`` decoder layers and ``mtp_layers`` MTP layers; raise :class:`~pipeline_kit.layout.LayoutError`
    with Megatron's rule, or return the stages."""
    arg = Arguments("megatron_layout", LayoutError)
    arg.text("text", text)
    try:
        check_text_size(text, "megatron_layout: argument text")
    except (InputError, LimitError) as exc:
        raise LayoutError(str(exc)) from None
    pp = arg.integer("pp", pp, limit="MAX_RANKS")
    layers = arg.integer("layers", layers, 0, limit="MAX_LAYERS")
    mtp_layers = arg.integer("mtp_layers", mtp_layers, 0, limit="MAX_LAYERS")
    stages = tuple(_unroll(text.replace(",", "")).split("|"))
    for k, stage in enumerate(stages):
        bad = next((ch for ch in stage if ch not in MEGATRON_SYMBOLS), None)
        if bad is not None:
            raise LayoutError(f"stage {k}: invalid layer character {bad!r}; Megatron knows "
                              f"{', '.join(f'{s} ({n})' for s, n in MEGATRON_SYMBOLS.items())}")
    if len(stages) % pp:
        raise LayoutError(f"{len(stages)} stages: the layout must be divisible by pipeline_model_parallel_size "
                          f"(pp={pp}); stage k goes to rank k % pp")
    flat = "".join(stages)
    if not flat.startswith("E"):
        raise LayoutError("the first layer must be embedding (E)")
    if not flat.endswith("L"):
        raise LayoutError("the last layer must be loss (L)")
    for symbol, want, what in (("E", 1, "embedding must be specified exactly once"),
                               ("L", 1, "loss must be specified exactly once"),
                               ("t", layers, f"the number of decoder layers must match num_layers (layers={layers})"),
                               ("m", mtp_layers, "the number of MTP layers must match mtp_num_layers "
                                                 f"(mtp_layers={mtp_layers})")):
        if flat.count(symbol) != want:
            raise LayoutError(f"the layout has {flat.count(symbol)} {symbol}: {what}")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise LayoutError("decoder layers must be placed before MTP layers")
    return _check_mtp_placement(MegatronLayout(stages, pp, False))


def _check_mtp_placement(layout: MegatronLayout) -> MegatronLayout:
    standalone = False
    for rank in range(layout.pp):
        own = layout.rank_stages(rank)
        early = next((v for v, stage in enumerate(own[:-1]) if "m" in stage), None)
        if early is not None:
            raise LayoutError(f"rank {rank}, virtual stage {early}: the MTP layers must be in the last virtual "
                              "pipeline stage of their rank")
        count = own[-1].count("m")
        if count and count != "".join(layout.stages).count("m"):
            raise LayoutError(f"rank {rank}'s last virtual stage holds {count} of the MTP layers: all of the MTP "
                              "layers must be in the same one virtual pipeline stage")
        standalone |= bool(count) and rank != layout.pp - 1
    return MegatronLayout(layout.stages, layout.pp, standalone)
