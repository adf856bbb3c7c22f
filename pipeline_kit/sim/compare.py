"""Every schedule family on the same model: the numbers of the book's cheat sheet, computed, never typed.

Costs follow the simulator's convention with F = I = W: a forward of one microbatch through a rank's whole
share takes 1, its backward 2 (split: I = W = 1); each of v chunks takes 1/v of that; P2P is free.  Memory is
counted in microbatches of one rank's share (a chunk-activation is 1/v of one), so families with different
chunk counts compare: 1F1B's worst rank holds pp.  No torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules import FAMILIES, Schedule, build_schedule, message_plan
from .simulator import simulate


def p2p_messages(schedule: Schedule) -> int:
    """Tensors that cross between ranks in one step (messages between two stages of one rank stay local)."""
    return sum(len(msgs) for (src, dst), msgs in message_plan(schedule).items() if src != dst)


@dataclass(frozen=True)
class FamilyFigures:
    """One cheat-sheet row: a family at its default chunks (2 where it takes ``--chunks``)."""

    name: str
    chunks: int
    placement: str
    torch_class: str | None
    needs: str
    bubble: dict[tuple[int, int], float]  # (pp, M) -> idle / (pp x makespan)
    peak_activations: dict[tuple[int, int], float]  # (pp, M) -> worst rank, in microbatches of a rank's share
    p2p_messages: dict[tuple[int, int], int]  # (pp, M) -> messages between ranks per step


def family_figures(name: str, sizes=((4, 8), (8, 16))) -> FamilyFigures:
    """Simulate ``name`` at each ``(pp, M)`` of ``sizes``."""
    bubble, peak, messages = {}, {}, {}
    chunks = 1
    for pp, m in sizes:
        sched = build_schedule(name, pp, m)
        chunks = sched.chunks
        res = simulate(sched, fwd=2, bwd=4)  # whole numbers per chunk op for v <= 2: exact sums
        bubble[pp, m] = res.bubble_fraction
        peak[pp, m] = max(res.peak_activations) / chunks
        messages[pp, m] = p2p_messages(sched)
    family = FAMILIES[name]
    return FamilyFigures(name, chunks, family.placement, family.torch_class, family.needs, bubble, peak, messages)


def cheat_sheet(sizes=((4, 8), (8, 16))) -> list[FamilyFigures]:
    """:func:`family_figures` for every family, in the order of :data:`~pipeline_kit.schedules.FAMILIES`."""
    return [family_figures(name, sizes) for name in FAMILIES]
