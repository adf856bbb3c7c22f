"""The schedule families by command-line name, what each accepts, and ``build_schedule``.

One table says, for every family, which generator builds it, how many model chunks per rank it takes, its
placement and the PyTorch class that executes the same order -- the CLI, the runtime, the demo and the book
read it instead of keeping their own lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..arguments import Arguments, shown
from .generators import ScheduleConfigError, gpipe, interleaved, one_f_one_b, zb_h1
from .multi_stage import MULTI_STAGE, build_multi_stage
from .ops import Schedule, need_schedule


@dataclass(frozen=True)
class Family:
    """A schedule family: ``chunks`` is ``"one"``, ``"two"`` (V schedules) or ``"any"`` (``--chunks v``)."""

    name: str
    chunks: str
    placement: str
    torch_class: str | None
    needs: str  # what the family requires, in words (the book's cheat sheet)

    @property
    def default_chunks(self) -> int:
        return 1 if self.chunks == "one" else 2


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("gpipe", "one", "looped", "ScheduleGPipe", "nothing"),
    Family("1f1b", "one", "looped", "Schedule1F1B", "nothing"),
    Family("interleaved", "any", "looped", "ScheduleInterleaved1F1B",
           "v >= 2 chunks, pp >= 2; Megatron: M a multiple of pp with its default group size"),
    Family("zb-h1", "one", "looped", None, "split backward (I, W)"),
    Family("looped-bfs", "any", "looped", "ScheduleLoopedBFS", "v chunks; any M"),
    Family("interleaved-zb", "any", "looped", "ScheduleInterleavedZeroBubble",
           "v chunks; split backward; max(1, M // pp) divides M"),
    Family("zbv", "two", "v", "ScheduleZBVZeroBubble", "2 chunks in a V; split backward; any M"),
    Family("dualpipev", "two", "v", "ScheduleDualPipeV", "2 chunks in a V; split backward at the edges; M >= 2 pp"),
)}

SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "zb-h1": zb_h1,
    **MULTI_STAGE,
}

CHUNKED = [name for name, family in FAMILIES.items() if family.chunks != "one"]


def build_schedule(
    name: str, pp: int, microbatches: int, chunks: int | None = None, forward_only: bool = False,
    group: int | None = None,
) -> Schedule:
    """Build a schedule by its command-line name.

    ``chunks`` (default 2) applies to the families with several chunks per rank; ``group`` only to
    ``interleaved``.  A configuration the family refuses raises :class:`ScheduleConfigError` in one line.
    """
    arg = Arguments("build_schedule", ScheduleConfigError)
    arg.text("name", name)
    if name not in SCHEDULES:
        raise ScheduleConfigError(f"unknown schedule {shown(name)}; choose one of {', '.join(SCHEDULES)}")
    arg.integer("chunks", chunks, None, none=True)  # the type: the family's rules, below, say which values
    arg.integer("group", group, None, none=True)
    family = FAMILIES[name]
    if group is not None and name != "interleaved":
        raise ScheduleConfigError(f"a microbatch group size only applies to the interleaved schedule, not {name}")
    if family.chunks == "one":
        if chunks not in (None, 1):
            raise ScheduleConfigError(f"--chunks {shown(chunks)} only applies to {', '.join(CHUNKED)}; "
                                      f"{name} has one chunk per rank")
        return SCHEDULES[name](pp, microbatches, forward_only=forward_only)
    chunks = family.default_chunks if chunks is None else chunks
    if name == "interleaved":
        return interleaved(pp, microbatches, chunks, forward_only, group)
    return build_multi_stage(name, pp, microbatches, chunks, forward_only)


def describe(sched: Schedule) -> str:
    """``pp=4 microbatches=8 chunks=2``, and for a V ``placement=v (c0 = stage r, c1 = stage 7-r)``: how the CLI
    and the runtime name a schedule's size and placement in one line."""
    need_schedule("describe", sched, "sched")
    text = f"pp={sched.pp} microbatches={sched.microbatches} chunks={sched.chunks}"
    if sched.placement == "v":
        text += f" placement=v (c0 = stage r, c1 = stage {2 * sched.pp - 1}-r)"
    return text
