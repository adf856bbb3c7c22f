"""Event simulator: from a schedule and costs to a timeline, a makespan and a bubble.

Every rank runs its ops in order; an op starts when its rank is free and every input has
arrived (a cross-rank input arrives ``p2p`` time after its producer ends; a rank that is free
before then *waits*, and the wait is recorded as a measured run's trace records it).  Because the order on
each rank is fixed, this is a longest-path computation over the schedule's dependency graph, done
in one pass over :func:`~pipeline_kit.schedules.validate.walk` -- the very walk the validator
makes, so a schedule simulates exactly when it validates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..arguments import Arguments, is_number
from ..inputs import excerpt
from ..limits import MAX_NUMBER
from ..schedules.messages import _receives
from ..schedules.ops import Op, Schedule, need_schedule
from ..schedules.validate import check_ops, fact_table, walk
from ..trace import _op_record
from .costs import COST_FIELDS, Costs, StageCosts


class Event(NamedTuple):
    """One op on the timeline (the runtime's traces use the same fields)."""

    rank: int
    op: Op
    stage: int
    start: float
    end: float


class Transfer(NamedTuple):
    """One P2P message (:mod:`~pipeline_kit.schedules.messages`) on the timeline: an activation
    (``forward``) or an input gradient (``backward``) between two ranks."""

    src: int
    dst: int
    microbatch: int
    direction: str
    boundary: int  # between virtual stages boundary and boundary + 1
    start: float
    end: float
    nbytes: float


class Wait(NamedTuple):
    """``rank`` was free at ``start`` but its op's input from ``peer`` arrived only at ``end``."""

    rank: int
    peer: int
    direction: str
    microbatch: int
    stage: int  # the receiving op's stage
    start: float
    end: float


@dataclass
class SimResult:
    """The simulated step: events per op, transfers, and the metrics the book and graders quote."""

    schedule: Schedule
    costs: StageCosts
    events: list[Event]
    transfers: list[Transfer]
    busy: list[float]
    peak_activations: list[int]
    peak_activation_bytes: list[float]
    waits: list[Wait] = field(default_factory=list)
    makespan: float = field(init=False)

    def __post_init__(self) -> None:
        self.makespan = max((e.end for e in self.events), default=0)

    @property
    def idle(self) -> list[float]:
        return [self.makespan - b for b in self.busy]

    @property
    def bubble_fraction(self) -> float:
        """Idle time over all ranks' time, ``idle / (pp * makespan)`` -- the interview question bank's definition."""
        if not self.makespan:
            return 0.0
        return sum(self.idle) / (self.schedule.pp * self.makespan)

    @property
    def ideal_time(self) -> float:
        """The step time without any bubble: the busiest rank working non-stop."""
        return max(self.busy, default=0)

    @property
    def bubble_over_ideal(self) -> float:
        """``(makespan - ideal) / ideal`` -- the Megatron paper's bubble ratio, ``(p-1)/m`` for 1F1B."""
        return (self.makespan - self.ideal_time) / self.ideal_time if self.ideal_time else 0.0

    def rank_events(self, rank: int) -> list[Event]:
        Arguments("SimResult.rank_events").integer("rank", rank, 0, self.schedule.pp - 1)
        return [e for e in self.events if e.rank == rank]

    def to_dict(self, timeline: bool = True) -> dict:
        Arguments("SimResult.to_dict").boolean("timeline", timeline)
        s = self.schedule
        out = {
            "schedule": s.name,
            "pp": s.pp,
            "microbatches": s.microbatches,
            "chunks": s.chunks,
            "makespan": self.makespan,
            "bubble_fraction": self.bubble_fraction,
            "bubble_over_ideal": self.bubble_over_ideal,
            "ideal_time": self.ideal_time,
            "ranks": [
                {"rank": r, "busy": self.busy[r], "idle": self.idle[r], "peak_activations": self.peak_activations[r],
                 "peak_activation_bytes": self.peak_activation_bytes[r]}
                for r in range(s.pp)
            ],
        }
        if s.placement != "looped":  # as in Schedule.to_dict: present only for a V placement
            out["placement"] = s.placement
        if timeline:
            out["timeline"] = [_op_record(s, e.rank, e.op, e.stage, e.start, e.end) for e in self.events]
            out["transfers"] = [t._asdict() for t in self.transfers]
        return out


def simulate(schedule: Schedule, costs: Costs | None = None,
             durations: Callable[[int, Op, int], float] | None = None, **cost_kwargs) -> SimResult:
    """Simulate one training (or inference) step of ``schedule``.

    ``costs`` is a :class:`Costs`; keyword arguments build one (``simulate(s, fwd=1, bwd=2)``).
    ``durations(rank, op, stage)``, when given, is each op's compute time instead of the costs'
    (which still give the P2P times); it is called once per op, in dependency order -- always the
    same order, so a seeded random draw inside it is reproducible.
    Raises :class:`~pipeline_kit.schedules.ScheduleError` for an invalid schedule.

    Live activations count the microbatch-chunks a rank has forwarded and not yet finished
    backwarding (the backward ends with ``B``, or with ``W`` when it is split); a forward-only
    schedule keeps nothing for backward and reports 0.
    """
    need_schedule("simulate", schedule)
    arg = Arguments("simulate")
    if costs is not None and not callable(getattr(costs, "resolve", None)):  # a Costs, or what resolves like one
        arg.refuse("costs", "a Costs or None", costs, wrong=True)
    arg.function("durations", durations, none=True)
    unknown = [name for name in cost_kwargs if name not in COST_FIELDS]
    if unknown:
        arg.fail(f"unknown argument {excerpt(unknown[0])}; the cost keyword arguments are {', '.join(COST_FIELDS)}",
                 wrong=True)
    if costs is None:
        costs = Costs(**cost_kwargs)
    elif cost_kwargs:
        arg.fail("argument costs: pass either a Costs object or cost keyword arguments, not both", wrong=True)
    pp = schedule.pp
    sc = costs.resolve(pp, schedule.chunks, schedule.placement)
    check_ops(schedule)

    stages = schedule.stages
    last = stages - 1
    comm, nbytes, act = sc.comm, sc.nbytes, sc.activation_bytes
    duration = {"F": sc.fwd, "B": sc.bwd, "I": [b - w for b, w in zip(sc.bwd, sc.wgrad)], "W": sc.wgrad}
    keep = not schedule.forward_only
    made_by = fact_table(schedule)  # the walk fills it: which op (in walk order) made each fact
    ended: list = []  # in walk order: when each op ended ...
    rank_at: list[int] = []  # ... and on which rank
    free = [0] * pp
    busy = [0] * pp
    live = [0] * pp
    live_bytes = [0] * pp
    peak = [0] * pp
    peak_bytes = [0] * pp
    events: list[Event] = []
    transfers: list[Transfer] = []
    waits: list[Wait] = []
    # what an op of each kind on each stage receives (the message rule): its direction and boundary
    incoming = {kind: [msg and (msg.direction, msg.boundary) for msg in (_receives(kind, 0, s, last)
                                                                         for s in range(stages))]
                for kind in "FBI"}
    new = tuple.__new__  # Event(...) / Transfer(...) without the NamedTuple constructor's extra call
    for r, op, s, facts in walk(schedule, made_by):
        kind, m, _ = op
        start = free[r]
        for fact in facts:
            j = made_by[fact]
            t, src = ended[j], rank_at[j]
            if src != r:  # made on another rank: it is the message this op receives
                direction, boundary = incoming[kind][s]
                arrive = t + comm[boundary]
                transfers.append(new(Transfer, (src, r, m, direction, boundary, t, arrive, nbytes[boundary])))
                t = arrive
                if arrive > free[r]:  # the rank is ready before its input is: it waits
                    waits.append(new(Wait, (r, src, direction, m, s, free[r], arrive)))
            if t > start:
                start = t
        if durations is None:
            dur = duration[kind][s]
        else:
            dur = durations(r, op, s)
            if not (type(dur) is float and 0 <= dur <= MAX_NUMBER) and not is_number(dur):  # the fast test first
                arg.refuse("durations", f"a function returning a non-negative number (here for {op.text()} on rank "
                                        f"{r})", dur)
        finish = start + dur
        free[r] = finish
        busy[r] += dur
        events.append(new(Event, (r, op, s, start, finish)))
        ended.append(finish)
        rank_at.append(r)
        if kind == "F":
            if keep:
                live[r] += 1
                live_bytes[r] += act[s]
                peak[r] = max(peak[r], live[r])
                peak_bytes[r] = max(peak_bytes[r], live_bytes[r])
        elif kind != "I":  # B or W ends the backward of (m, s): its activations are freed
            live[r] -= 1
            live_bytes[r] -= act[s]
    return SimResult(schedule, sc, events, transfers, busy, peak, peak_bytes, waits)
