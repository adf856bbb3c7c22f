"""Is this schedule executable?  The validator answers, and says exactly why not.

A schedule is valid when every op appears exactly once and each rank, running its own list in
order with asynchronous sends, never waits forever.  The dependencies are the data flow of
backpropagation through a pipeline of virtual stages ``0 .. S-1``:

* ``F(m, s)`` needs ``F(m, s-1)`` (the activation from the previous stage);
* ``B(m, s)`` / ``I(m, s)`` need ``F(m, s)`` (saved activations) and the input gradient of
  ``(m, s+1)`` (from ``B`` or ``I`` there); the last stage computes the loss itself;
* ``W(m, s)`` needs ``I(m, s)``.

:func:`dataflow` walks the ranks in an order that respects all of these.  The simulator drives the
same walk to compute times, so "valid" and "simulatable" can never disagree.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

from ..arguments import shown
from .ops import Op, Schedule, need_schedule

_KIND_CODE = {"F": 0, "B": 1, "I": 2, "W": 3}
_DEP_KINDS = "FGI"


class Dep(NamedTuple):
    """One fact an op waits for, made by one op: what it is, where, and who made it.

    ``kind``: ``"F"`` the forward of (``microbatch``, ``stage``) is done (its output exists, its
    tensors are saved); ``"G"`` the gradient w.r.t. ``stage``'s input exists (made by ``B`` or
    ``I``); ``"I"`` the input-grad half is done (what ``W`` waits for).  It was made by ``op``,
    the ``index``-th op of ``rank`` (so ``finish[rank][index]`` is when it exists).
    """

    kind: str
    microbatch: int
    stage: int
    rank: int
    op: Op
    index: int

    @classmethod
    def _of_key(cls, key: int, schedule: Schedule) -> Dep:
        """The fact :func:`walk` numbers ``key``, made or not yet."""
        kind, m, s = _decode(key, schedule)
        r, c = schedule.rank_of(s), schedule.chunk_of(s)
        ops = schedule.ranks[r]
        maker = Op("F" if kind == "F" else "I" if kind == "I" or Op("I", m, c) in ops else "B", m, c)
        return cls(kind, m, s, r, maker, ops.index(maker))


_WHY = {
    "F": "a forward needs the activation of the previous stage",
    "G": "a backward needs the gradient from the next stage",
    "own": "a backward needs its own forward's saved activations",
    "I": "a weight-grad (W) needs its input-grad (I) first",
}


class ScheduleError(ValueError):
    """A schedule is not executable.  ``str(err)`` is a full sentence naming rank, op and dependency.

    Attributes let graders give targeted feedback: ``kind`` is one of ``"bad-op"``, ``"duplicate"``,
    ``"missing"``, ``"order"`` (a rank runs an op before one of its own ops it needs) or
    ``"deadlock"`` (ranks wait on each other in a circle); ``rank`` and ``op`` locate the first
    problem, ``waits_for`` is the op it cannot proceed without, and ``blocked`` maps every stuck
    rank to ``(op, op it waits for)``.
    """

    def __init__(self, message: str, *, kind: str, rank: int | None = None, op: Op | None = None,
                 waits_for: Op | None = None, blocked: dict[int, tuple[Op, Op]] | None = None):
        super().__init__(message)
        self.kind = kind
        self.rank = rank
        self.op = op
        self.waits_for = waits_for
        self.blocked = blocked or {}


def check_ops(schedule: Schedule) -> None:
    """Every op names a real microbatch and chunk, and every (kind, microbatch, stage) appears once."""
    need_schedule("check_ops", schedule)
    _check_ops(schedule)


def _check_ops(schedule: Schedule) -> None:
    mbs, chunks, stages = schedule.microbatches, schedule.chunks, schedule.stages
    sm = stages * mbs
    counts = bytearray(4 * sm)
    code = _KIND_CODE
    if not isinstance(schedule.ranks, list) or len(schedule.ranks) != schedule.pp:  # changed since it was made
        raise ScheduleError(f"the schedule has pp={schedule.pp} but {shown(schedule.ranks)} for its rank lists",
                            kind="bad-op")
    r = i = 0
    try:
        for r, ops in enumerate(schedule.ranks):
            stage_of_chunk = schedule.stages_of(r)
            i = 0
            for i, op in enumerate(ops):
                kind, m, c = op
                k = code.get(kind)
                if k is None or type(m) is not int or type(c) is not int or not (0 <= m < mbs and 0 <= c < chunks):
                    _bad_op(schedule, r, i, op)
                key = k * sm + stage_of_chunk[c] * mbs + m
                if counts[key]:
                    first = next(j for j, other in enumerate(ops) if other == op)
                    raise ScheduleError(f"rank {r}: {schedule.op_text(op)} appears twice (op {first + 1} and op "
                                        f"{i + 1}); each op must run exactly once", kind="duplicate", rank=r, op=op)
                counts[key] = 1
    except ScheduleError:
        raise
    except (TypeError, ValueError):  # a rank list changed since the Schedule was made: not an Op, an unhashable kind
        raise _bad_item(schedule, r, i) from None
    f, b, i_, w = (counts[k * sm:(k + 1) * sm] for k in range(4))
    if f.count(0) == 0:
        if b.count(1) == 0 and i_.count(1) == 0 and w.count(1) == 0:
            return  # forward-only: nothing else to find
        if b.count(0) == 0 and i_.count(1) == 0 and w.count(1) == 0:
            return  # every backward is a full B
        if b.count(1) == 0 and i_.count(0) == 0 and w.count(0) == 0:
            return  # every backward is split into I + W
    _first_missing(schedule, counts, sm)


def _bad_item(schedule: Schedule, r: int, i: int) -> ScheduleError:
    """What is wrong with item ``i`` of rank ``r`` (or with the rank's list itself), which is not a plain Op."""
    ops = schedule.ranks[r]
    if not isinstance(ops, list):
        return ScheduleError(f"rank {r}: expected a list of Op, got {shown(ops)}", kind="bad-op", rank=r)
    item = ops[i]
    what = (f"unknown kind {shown(item.kind)}; kinds are F, B, I, W" if isinstance(item, Op) else
            f"expected an Op (kind F, B, I or W, microbatch, chunk), got {shown(item)}")
    return ScheduleError(f"rank {r}, op {i + 1}: {what}", kind="bad-op", rank=r)


def bad_op_of(schedule: Schedule, rank: int) -> ScheduleError:
    """The first op of ``rank`` that names no chunk of the rank, or is no Op: for code that reads a schedule the
    validator has not seen (its message says what :func:`check_ops` would)."""
    ranks = schedule.ranks
    if not isinstance(ranks, list) or not 0 <= rank < len(ranks):
        return ScheduleError(f"the schedule has pp={schedule.pp} but {shown(ranks)} for its rank lists", kind="bad-op")
    ops = ranks[rank]
    for i, op in enumerate(ops if isinstance(ops, list) else [None]):
        if not isinstance(op, Op) or not isinstance(op.kind, str):
            return _bad_item(schedule, rank, i)
        if not (type(op.chunk) is int and 0 <= op.chunk < schedule.chunks):
            try:
                _bad_op(schedule, rank, i, op)
            except ScheduleError as exc:
                return exc
    return _bad_item(schedule, rank, 0)


def _bad_op(schedule: Schedule, r: int, i: int, op: Op):
    kind, m, c = op
    if kind not in _KIND_CODE:
        raise ScheduleError(f"rank {r}, op {i + 1}: unknown kind {shown(kind)}; kinds are F, B, I, W",
                            kind="bad-op", rank=r, op=op)
    plain = all(type(x) is int and 0 <= x < 10**9 for x in (m, c))  # else the op's text is no help
    if not (isinstance(m, int) and 0 <= m < schedule.microbatches):
        where = f" ({op.text(schedule.chunks > 1)})" if plain else ""
        raise ScheduleError(f"rank {r}, op {i + 1}{where}: microbatch {shown(m)} is out of range; this schedule has "
                            f"microbatches 0..{schedule.microbatches - 1}", kind="bad-op", rank=r, op=op)
    where = f" ({op.text(True)})" if plain else ""
    raise ScheduleError(f"rank {r}, op {i + 1}{where}: chunk {shown(c)} is out of range; this schedule has "
                        f"chunks 0..{schedule.chunks - 1}", kind="bad-op", rank=r, op=op)


def _first_missing(schedule: Schedule, counts: bytearray, sm: int) -> None:
    """Slow path for a broken schedule (or one mixing B with I + W): name the first missing or conflicting op."""
    mbs, text = schedule.microbatches, schedule.op_text
    forward_only = not any(counts[sm:])
    for s in range(schedule.stages):
        r, c = schedule.rank_of(s), schedule.chunk_of(s)
        for m in range(mbs):
            at = s * mbs + m
            has = {kind: counts[code * sm + at] for kind, code in _KIND_CODE.items()}
            need = ["F"]
            if not forward_only:
                if has["B"] and (has["I"] or has["W"]):
                    other = "I" if has["I"] else "W"
                    raise ScheduleError(
                        f"rank {r}: microbatch {m} on stage {s} has both a full backward {text(Op('B', m, c))} and "
                        f"{text(Op(other, m, c))}; use either B or the pair I + W", kind="duplicate", rank=r,
                        op=Op(other, m, c))
                need += ["I", "W"] if (has["I"] or has["W"]) else ["B"]
            for kind in need:
                if not has[kind]:
                    op = Op(kind, m, c)
                    raise ScheduleError(f"rank {r} never runs {text(op)} (microbatch {m}, stage {s}); every op must "
                                        f"run exactly once", kind="missing", rank=r, op=op)


def _decode(fact: int, schedule: Schedule) -> tuple[str, int, int]:
    """``(kind, microbatch, stage)`` of a fact numbered by :func:`walk`."""
    kind_stage, m = divmod(fact, schedule.microbatches)
    code, s = divmod(kind_stage, schedule.stages)
    return _DEP_KINDS[code], m, s


def dataflow(schedule: Schedule) -> Iterator[tuple[int, Op, int, tuple[Dep, ...]]]:
    """Yield ``(rank, op, stage, deps)`` in an order where every dependency came first.

    ``deps`` are the :class:`Dep` facts the op waited for.  Each rank runs its list in order; a
    rank blocked on a fact sleeps until that fact is made.  The rules (see the module docstring):
    F(m, s) waits for F(m, s-1); B/I(m, s) for F(m, s) and G(m, s+1); W(m, s) for I(m, s).  If
    ranks remain blocked when nothing can run, a :class:`ScheduleError` explains the wait.
    Callers must have run :func:`check_ops` first.
    """
    need_schedule("dataflow", schedule)
    return _dataflow(schedule)


def _dataflow(schedule: Schedule) -> Iterator[tuple[int, Op, int, tuple[Dep, ...]]]:
    made_by = fact_table(schedule)
    walked: list[tuple[int, Op, int]] = []  # (rank, op, index in its list), in walk order
    count = [0] * schedule.pp
    for r, op, s, facts in walk(schedule, made_by):
        yield r, op, s, tuple([Dep(*_decode(f, schedule), *walked[made_by[f]]) for f in facts])
        walked.append((r, op, count[r]))
        count[r] += 1


def fact_table(schedule: Schedule) -> list[int]:
    """A table for :func:`walk` to fill: for every fact, the position (in walk order) of the op that made it."""
    return [0] * (3 * schedule.stages * schedule.microbatches)


def walk(schedule: Schedule, made_by: list[int] | None = None) -> Iterator[tuple[int, Op, int, tuple[int, ...]]]:
    """:func:`dataflow` at full speed, for loops over 65,536 ops (the validator, the simulator).

    The facts an op needs come as numbers, ``(kind * stages + stage) * microbatches + microbatch``
    (kinds F, G, I as 0, 1, 2), that index flat lists; read them through ``made_by``
    (:func:`fact_table`), which the walk fills: ``made_by[fact]`` is the position in walk order of the
    op that made it.  Callers must have run :func:`check_ops` first.
    """
    pp, stages, mbs, ranks = schedule.pp, schedule.stages, schedule.microbatches, schedule.ranks
    stage_table = [schedule.stages_of(r) for r in range(pp)]
    sm = stages * mbs
    g_base, i_base = sm, 2 * sm
    last = stages - 1
    pos = [0] * pp
    done = bytearray(3 * sm)  # 1 once a fact is made
    seq = 0  # ops walked so far
    waiting: dict[int, list[int]] = {}
    blocked_on: dict[int, int] = {}
    ready = deque(range(pp))
    while ready:
        r = ready.popleft()
        ops = ranks[r]
        stage_of_chunk = stage_table[r]
        i = pos[r]
        n = len(ops)
        while i < n:
            op = ops[i]
            kind, m, c = op
            s = stage_of_chunk[c]
            here = s * mbs + m
            if kind == "F":  # the activation of the previous stage
                needs = (here - mbs,) if s else ()
                made = (here,)
            elif kind == "W":  # its own input-grad half
                needs = (i_base + here,)
                made = ()
            else:  # B or I: its own forward, and the gradient from the next stage (the last stage has the loss)
                needs = (here, g_base + here + mbs) if s < last else (here,)
                made = (g_base + here, i_base + here) if kind == "I" else (g_base + here,)
            missing = -1
            for key in needs:
                if not done[key]:
                    missing = key
                    break
            if missing >= 0:
                waiting.setdefault(missing, []).append(r)
                blocked_on[r] = missing
                break
            yield r, op, s, needs
            for key in made:
                done[key] = 1
                if made_by is not None:
                    made_by[key] = seq
                if waiting:
                    woken = waiting.pop(key, None)
                    if woken:
                        for waiter in woken:
                            del blocked_on[waiter]
                            ready.append(waiter)
            seq += 1
            i += 1
        pos[r] = i
    if blocked_on:
        raise _explain_stuck(schedule, pos, blocked_on)


def validate(schedule: Schedule) -> Schedule:
    """Raise :class:`ScheduleError` unless ``schedule`` is executable; return it for chaining."""
    need_schedule("validate", schedule)
    return _validate(schedule)


def _validate(schedule: Schedule) -> Schedule:
    _check_ops(schedule)
    for _ in walk(schedule):
        pass
    return schedule


def is_valid(schedule: Schedule) -> bool:
    """Whether ``schedule`` is executable (:func:`validate` without the explanation)."""
    need_schedule("is_valid", schedule)
    try:
        _validate(schedule)
    except ScheduleError:
        return False
    return True


def _producer(schedule: Schedule, key: int) -> tuple[int, Op, str]:
    """The rank and op that produce ``key``, and the fact's kind letter."""
    dep = Dep._of_key(key, schedule)
    return dep.rank, dep.op, dep.kind


def _why(op: Op, key_kind: str) -> str:
    return _WHY["own" if key_kind == "F" and op.kind != "F" else key_kind]


def _explain_stuck(schedule: Schedule, pos: list[int], blocked_on: dict[int, int]) -> ScheduleError:
    text = schedule.op_text
    producer = {r: _producer(schedule, key) for r, key in blocked_on.items()}
    blocked = {r: (schedule.ranks[r][pos[r]], producer[r][1]) for r in sorted(blocked_on)}

    def describe(r: int) -> str:
        op, dep = blocked[r]
        src = producer[r][0]
        where = "itself, later in its list" if src == r else f"rank {src}"
        return f"rank {r} is blocked at {text(op)} (op {pos[r] + 1}) waiting for {text(dep)} from {where}"

    # Follow the chain of waits from the lowest blocked rank until it repeats: that is the cycle.
    chain, r = [], min(blocked)
    while r not in chain:
        chain.append(r)
        r = producer[r][0]
    cycle = chain[chain.index(r):]
    if len(cycle) == 1:
        r = cycle[0]
        op, dep = blocked[r]
        later = schedule.ranks[r].index(dep) + 1
        return ScheduleError(
            f"rank {r} runs {text(op)} (op {pos[r] + 1}) before {text(dep)} (op {later}), but {text(op)} waits for "
            f"{text(dep)}: {_why(op, producer[r][2])}", kind="order", rank=r, op=op, waits_for=dep, blocked=blocked)
    ring = " -> ".join(f"rank {q}" for q in cycle + [cycle[0]])
    details = "; ".join(describe(q) for q in blocked)
    first = cycle[0]
    return ScheduleError(f"deadlock, circular wait {ring}: {details}", kind="deadlock", rank=first,
                         op=blocked[first][0], waits_for=blocked[first][1], blocked=blocked)
