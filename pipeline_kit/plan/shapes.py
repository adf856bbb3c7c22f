"""Which shapes -- (family, pp, v) -- a planning search visits, which it refuses before building anything, and
how many ops their schedules hold (what ``MAX_PLAN_OPS`` bounds, checked before the search starts).

Why apart from :mod:`.search`: the enumeration is the one place the search's size is decided, and the benchmark
and the limits' figures count it without searching.
"""

from __future__ import annotations

from ..layout.costs import ModelSpec
from ..limits import MAX_CHUNKS, MAX_RANKS, ops_per_microbatch_stage
from ..schedules import FAMILIES


def chunk_choices(name: str, layers: int, pp: int) -> list[int]:
    """The chunks per rank ``v`` the search tries for family ``name`` at ``pp``: 1 for the one-chunk families, 2 for
    the V schedules, and for the families that take any number every ``v >= 2`` with ``layers % (pp v) == 0`` --
    Megatron's rule for ``--num-layers-per-virtual-pipeline-stage`` (each virtual stage holds ``layers / (pp v)``
    whole layers), so NeMo's VP5 on 80 layers at pp = 4 is tried, and v = 3 there is not.  Empty when no ``v``
    divides the layers (the shape is refused, saying so)."""
    kind = FAMILIES[name].chunks
    if kind != "any":
        return [1 if kind == "one" else 2]
    return [v for v in range(2, min(layers // pp, MAX_CHUNKS) + 1) if layers % (pp * v) == 0]


def shapes(m: ModelSpec, ranks: int, families: list[str]):
    """Every (family, pp, v) the search visits, pp dividing the ``ranks`` (GPUs / tp), v from
    :func:`chunk_choices`.  Where a family has no ``v`` at a ``pp`` (no v divides the layers, or even v = 2 makes
    more stages than the model has items), its smallest one stays, to be refused with the reason."""
    items = m.layers + 2
    divisors = [d for d in range(1, min(ranks, MAX_RANKS) + 1) if ranks % d == 0]  # pp > MAX_RANKS: never built
    for name in families:
        for pp in divisors:
            fitting = [v for v in chunk_choices(name, m.layers, pp) if pp * v <= items]
            for v in fitting or [FAMILIES[name].default_chunks]:
                yield name, pp, v


def shape_refusal(m: ModelSpec, name: str, pp: int, v: int) -> str | None:
    """Why the shape (``name``, ``pp``, ``v``) is refused before any schedule is built, or None."""
    if pp * v > m.layers + 2:
        return f"{pp * v} stages but only {m.layers + 2} items (E, {m.layers} layers, L) to fill them"
    if FAMILIES[name].chunks == "any" and m.layers % (pp * v):
        return (f"no v >= 2 splits the {m.layers} layers into pp x v = {pp} x v stages of whole, equal layers "
                "(Megatron's rule for --num-layers-per-virtual-pipeline-stage: layers % (pp x v) == 0)")
    return None


def count_ops(m: ModelSpec, ranks: int, global_batch: int, families: list[str]) -> int:
    """Ops of every schedule the search builds (each shape's once): what ``MAX_PLAN_OPS`` bounds."""
    total = 0
    for name, pp, v in shapes(m, ranks, families):
        dp = ranks // pp
        if global_batch % (dp * m.micro_batch_size) == 0 and shape_refusal(m, name, pp, v) is None:
            total += 2 * pp * v * (global_batch // (dp * m.micro_batch_size)) * ops_per_microbatch_stage(name)
    return total
