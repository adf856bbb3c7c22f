"""Megatron-Core 0.19's own rules for ``--pipeline-model-parallel-layout``, MTP layers and empty stages included.

Why a second reader: :func:`~pipeline_kit.layout.parse_layout` reads the layouts the kit builds and runs -- no
``m`` (multi-token prediction) layer, which the kit's GPT does not have, and no empty stage -- while Megatron
accepts both.  What the book says about a Megatron layout (that one validates, where its MTP layers land, that
the flag's own help example does not) is computed here, by Megatron's rules as Megatron-Core 0.19 writes them
in ``megatron/core/transformer/pipeline_parallel_layer_layout.py``:

* ``parse_str_to_list``: commas are dropped, ``(...)*n`` is unrolled (one level, no nesting), then ``x*n``;
  ``|`` splits the stages, which may be empty; the symbols are ``E``, ``t``, ``m`` and ``L``;
* ``__init__``: ``pp`` divides the number of stages, and stage ``k`` goes to rank ``k % pp`` as virtual stage
  ``k // pp``;
* ``validate_layer_layout``: ``E`` first and ``L`` last (of the flattened layout), each exactly once; as many
  ``t`` as the model's layers and ``m`` as its MTP layers; no ``t`` after an ``m``; every ``m`` in the last
  virtual stage of its rank, and one rank's last virtual stage holding all of them.  (Its last check, no ``m``
  in a virtual stage of the first rank but the last, follows from the one before: rank 0 may hold the MTP
  layers in its last virtual stage.)  ``mtp_standalone`` is true when the MTP layers are on another rank than
  the last.

Each refusal quotes Megatron's message after saying which rule it is.  Imports no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..arguments import Arguments
from ..inputs import excerpt
from ..limits import MAX_LAYOUT_SYMBOLS, MAX_REPEAT
from .spec import LayoutError, layout_text

NAMES = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}  # Megatron's LayerType for each symbol
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")  # Megatron's two patterns, applied in this order
_ITEM = re.compile(r"(.)\*(\d+)")


@dataclass(frozen=True)
class MegatronLayout:
    """A layout Megatron-Core 0.19 accepts: its stages in order (each a string of ``E t m L``, ``""`` when empty)
    and the pipeline size that places them."""

    text: str
    pp: int
    stages: tuple[str, ...]

    @property
    def vpp(self) -> int:
        """Virtual stages per rank: the layout's stage count over ``pp``."""
        return len(self.stages) // self.pp

    def rank_stages(self, rank: int) -> list[str]:
        """The stages rank ``rank`` holds, its virtual stage 0 first."""
        Arguments("MegatronLayout.rank_stages", LayoutError).integer("rank", rank, 0, self.pp - 1,
                                                                      why=f"a rank below pp={self.pp}")
        return [self.stages[v * self.pp + rank] for v in range(self.vpp)]

    @property
    def mtp_rank(self) -> int | None:
        """The rank whose last virtual stage holds the MTP layers (None without any)."""
        return next((r for r in range(self.pp) if "m" in self.rank_stages(r)[-1]), None)

    @property
    def mtp_standalone(self) -> bool:
        """Megatron's ``mtp_standalone``: the MTP layers sit on another rank than the last."""
        return self.mtp_rank not in (None, self.pp - 1)


def _unroll(text: str, pattern: re.Pattern, what: str) -> str:
    """One of Megatron's ``re.sub`` unrollings, its size checked before it is built."""
    size = len(text)
    for match in pattern.finditer(text):
        digits = match.group(2)
        if len(digits) > len(str(MAX_REPEAT)) or int(digits) > MAX_REPEAT:
            raise LayoutError(f"{what}: repeat count {excerpt(digits, limit=20)} is more than the limit of "
                              f"{MAX_REPEAT:,} (MAX_REPEAT)")
        size += len(match.group(1)) * int(digits) - len(match.group(0))
        if size > MAX_LAYOUT_SYMBOLS:
            raise LayoutError(f"{what}: the layout expands to more than the limit of {MAX_LAYOUT_SYMBOLS:,} symbols "
                              f"(MAX_LAYOUT_SYMBOLS)")
    return pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)


def megatron_stages(text: str) -> tuple[str, ...]:
    """The stages of ``text`` as Megatron's ``parse_str_to_list`` reads them (an empty stage is ``""``)."""
    what = f"Megatron layout {excerpt(text, limit=60)}"
    expanded = _unroll(_unroll(text.replace(",", ""), _GROUP, what), _ITEM, what)
    stages = tuple(expanded.split("|"))
    for stage in stages:
        bad = next((ch for ch in stage if ch not in NAMES), None)
        if bad is not None:
            raise LayoutError(f"{what}: Megatron refuses the character {bad!r} (its parse_str_to_list: \"Invalid layer "
                              f"character\"; known: E, L, t, m, and ',' between items)")
    return stages


def megatron_layout(text: str, pp: int, num_layers: int, mtp_num_layers: int | None = None) -> MegatronLayout:
    """``text`` as Megatron-Core 0.19 places it on ``pp`` ranks, or a :class:`LayoutError` with the rule it breaks
    (``num_layers`` and ``mtp_num_layers``: Megatron's ``--num-layers`` and ``--mtp-num-layers``, None when not
    given)."""
    arg = layout_text("megatron_layout", text)
    pp = arg.integer("pp", pp, limit="MAX_RANKS")
    num_layers = arg.integer("num_layers", num_layers, 0, limit="MAX_LAYERS")
    mtp_num_layers = arg.integer("mtp_num_layers", mtp_num_layers, 0, none=True, limit="MAX_LAYERS")
    stages = megatron_stages(text)
    where = f"Megatron-Core 0.19 refuses {excerpt(text, limit=60)} at pp={pp}"
    if len(stages) % pp:
        raise LayoutError(f"{where}: its {len(stages)} stages do not divide among {pp} ranks (\"must be divisible by "
                          f"pipeline_model_parallel_size\")")
    flat = "".join(stages)
    counts = {ch: flat.count(ch) for ch in NAMES}
    rules = [
        (flat[:1] == "E", "the first layer must be the embedding (\"The first layer must be embedding\")"),
        (flat[-1:] == "L", "the last layer must be the loss (\"The last layer must be loss\")"),
        (counts["E"] == 1, "\"Embedding must be specified exactly once\""),
        (counts["L"] == 1, "\"Loss must be specified exactly once\""),
        (counts["t"] == num_layers, f"it has {counts['t']} decoder layers, the model {num_layers} (\"Number of "
                                    "decoder layers ... must match num_layers\")"),
        (counts["m"] == (mtp_num_layers or 0),
         f"it has {counts['m']} MTP layers, --mtp-num-layers is {mtp_num_layers} (\"Number of mtp layers in layout "
         "must match mtp_num_layers\")"),
        ("t" not in flat[flat.find("m"):] if "m" in flat else True,
         "a decoder layer comes after an MTP layer (\"decoder layers must be placed before MTP layers\")"),
    ]
    for ok, why in rules:
        if not ok:
            raise LayoutError(f"{where}: {why}")
    placed = MegatronLayout(text, pp, stages)
    held = [placed.rank_stages(r) for r in range(pp)]
    for r in range(pp):  # two passes over the ranks, in Megatron's order, so the same rule is named first
        if any("m" in stage for stage in held[r][:-1]):
            raise LayoutError(f"{where}: rank {r} holds an MTP layer in a virtual stage other than its last (\"the MTP "
                              "should be always in the last virtual pipeline stage of that rank\")")
    for r in range(pp):
        if "m" in held[r][-1] and held[r][-1].count("m") != counts["m"]:
            raise LayoutError(f"{where}: rank {r}'s last virtual stage holds {held[r][-1].count('m')} of the "
                              f"{counts['m']} MTP layers (\"All of the MTP layers must be in the same one virtual "
                              "pipeline stage\")")
    return placed
