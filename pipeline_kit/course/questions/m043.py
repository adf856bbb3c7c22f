"""M043: the non-interleaved 1F1B order from its three phases (lab 4, the main question) and the 1F1B
drawing read off (lab 2, the follow-up).

Why the checks look like this: the student's orders are judged by the kit itself -- the validator
(:func:`pipeline_kit.schedules.validate`) says whether they can run at all and, if not, which ranks
wait on each other; :func:`pipeline_kit.schedules.one_f_one_b` is the order they must match op for
op; the simulator gives the peak memory.  Each rubric point is a separate function or value, so one
mistake costs one point: the phase structure is checked against the student's *own* warmup length,
the warmup length on its own, and the whole order (which may be written independently) on its own.
Feedback names the rank, the op and the phase, in Megatron's terms.
"""

from __future__ import annotations

import functools
import itertools
import re

from ...limits import MAX_NOTEBOOK_BYTES, MAX_RANKS
from ...schedules import Op, OpParseError, Schedule, ScheduleError, ScheduleTextError, one_f_one_b, validate
from ...schedules import one_f_one_b_phases as kit_rank_order
from ...sim import simulate
from ...trace import Timeline
from ...grading import kitfree
from ...grading.parts import Parts
from ...grading.parts import plural
from .common import (
    book,
    call,
    check,
    describe,
    drawn,
    expect_number,
    expect_type,
    fail,
)
from .m042 import PP, M, _first_failure, _fmt, _grid_report, _per_rank, _slots

PHASES_BOOK = book("gpipe-1f1b", "The three phases, per rank")  # where the book teaches what these checks find
DEPENDENCIES_BOOK = book("gpipe-1f1b", "Dependencies, drawn")


def megatron_warmup(pp: int, microbatches: int, rank: int) -> int:
    """Megatron's ``num_warmup_microbatches`` for ``rank`` (the count the kit's ``one_f_one_b`` uses).

    The order alone cannot tell a warmup of ``M`` from one of ``M - 1`` (both run every forward
    before any backward), so the count is Megatron's definition, not something read off the order.
    """
    return min(pp - rank - 1, microbatches)


def shaped(warmup: int, microbatches: int) -> tuple[list[str], list[str], list[str]]:
    """The kit's 1F1B phases for a rank with ``warmup`` warmup forwards: the kit's one-rank 1F1B order
    (``schedules.one_f_one_b_phases``, the ranks of ``one_f_one_b``: tests/test_lab04.py), cut after the warmup and
    before the cooldown (as long as the warmup); one rank's ops, so a thousand-rank case costs what one rank does."""
    return tuple(list(part) for part in _shaped(warmup, microbatches))


def _shaped(warmup: int, microbatches: int) -> tuple[tuple[str, ...], ...]:
    ops = _rank_texts(warmup, microbatches)
    return ops[:warmup], ops[warmup:len(ops) - warmup], ops[len(ops) - warmup:]


@functools.lru_cache(maxsize=64)
def _rank_texts(warmup: int, microbatches: int) -> tuple[str, ...]:
    return tuple(map(_streams(microbatches)[2].__getitem__, kit_rank_order(*_streams(microbatches)[:2], warmup)))


@functools.lru_cache(maxsize=4)
def _streams(m: int) -> tuple[list[Op], list[Op], dict[Op, str]]:  # once per M (the kit's builder copies them)
    fwd, bwd = [Op("F", i) for i in range(m)], [Op("B", i) for i in range(m)]
    return fwd, bwd, {op: op.text() for op in fwd + bwd}


_parse = functools.lru_cache(maxsize=1 << 16)(Op.parse)  # (immutable ops: a case's ranks share their tokens)


def _ops(value, what: str) -> list[Op]:
    expect_type(value, (list, tuple), what)
    out = []
    for i, token in enumerate(value):
        if isinstance(token, Op):
            out.append(token)
            continue
        expect_type(token, str, f"{what}[{i}]")
        if re.match(r"^\s*[FB]-\d+\s*$", token):
            fail(f"{what}[{i}] is {token!r}: microbatches are numbered from 0 -- a warmup longer than the "
                 "microbatches there are leaves a negative count behind")
        try:
            out.append(_parse(token))
        except OpParseError as exc:
            fail(f"{what}[{i}]: {exc}")
    return out


def _texts(ops, most: int = 8) -> str:  # (a long list: its first six, "...", its last two and its length)
    if len(ops) > most:
        return f"{_texts(ops[:6])} ... {_texts(ops[-2:])} ({len(ops):,} ops)"
    return " ".join(op.text() for op in ops) or "(nothing)"


def _cases(cases) -> list:
    """Each case as (pp, M, ranks): a drawn case names the few ranks it checks, a fixed one (pp, M) checks all."""
    return [(c[0], c[1], tuple(c[2]) if len(c) > 2 else tuple(range(c[0]))) for c in cases]


PHASES_FORM = "a tuple (warmup, steady, cooldown) of three lists of op strings such as 'F3', 'B0'"


def _phases(func, pp, m, r, only_warmup: bool = False):
    """The student's three phases as ops; only the warmup with ``only_warmup``; None for a warmup of more forwards
    than there are microbatches (its length is the warmup check's: it would cost the phases' points again)."""
    label = f"one_f_one_b_phases({pp}, {m}, {r})"
    got = call(func, pp, m, r, name="one_f_one_b_phases")
    expect_type(got, (tuple, list), f"{label} ({PHASES_FORM})")
    if len(got) != 3:
        fail(f"{label} must return {PHASES_FORM}; got {plural(len(got), 'item')}")
    warm = _ops(got[0], f"{label}[0] (warmup)")
    if only_warmup:
        return warm
    if len(warm) > m and all(op.kind == "F" for op in warm):
        return None
    if len(warm) <= m and all(isinstance(p, (list, tuple)) for p in got) and tuple(map(tuple, got)) == _shaped(
            len(warm), m):
        return None  # the kit's three phases for the student's own warmup: nothing for the parts to find
    return [warm] + [_ops(part, f"{label}[{i}] ({name})") for i, (part, name) in
                     enumerate(zip(got, ("warmup", "steady", "cooldown"))) if i > 0], label


# -- the three phases (3 points) ---------------------------------------------------------------------

@check
def check_phases(func, cases) -> None:
    with kitfree.own(func, "one_f_one_b_phases") as mine:
        _check_phases(mine, cases)


def _check_phases(func, cases) -> None:
    """Three parts, one per phase, each judged for the student's own warmup length (the length is the next check's):
    a form error (not three lists of ops) fails all three."""
    got = [(found, m) for pp, m, ranks in _cases(cases) for r in ranks
           if (found := _phases(func, pp, m, r)) is not None]
    parts = Parts()
    with parts.part():
        for ((warm, _, _), label), m in got:
            w = len(warm)
            if any(op.kind != "F" for op in warm):
                fail(f"{label}: the warmup runs forwards only -- it fills the pipe below the rank before any gradient "
                     f"can come back; got {_texts(warm)}")
            if warm != [Op("F", i) for i in range(w)]:
                fail(f"{label}: the warmup runs the first microbatches in order, from F0; got {_texts(warm)}")
    with parts.part():
        for ((warm, steady, _), label), m in got:
            w = len(warm)
            if w <= m and steady != [_parse(t) for t in _shaped(w, m)[1]]:
                _steady_problem(label, w, m, steady, [_parse(t) for t in _shaped(w, m)[1]])
    with parts.part():
        for ((warm, _, cool), label), m in got:
            w = len(warm)
            if w > m:
                continue
            want_cool = [_parse(t) for t in _shaped(w, m)[2]]
            if any(op.kind != "B" for op in cool):
                fail(f"{label}: the cooldown runs no forwards (all {m} have run by then), only the backwards left; "
                     f"got {_texts(cool)}")
            if len(cool) != len(want_cool):
                fail(f"{label}: the cooldown drains the microbatches still in flight after the last forward -- as "
                     f"many as the warmup put in; got {plural(len(cool), 'backward')}")
            if cool != want_cool:
                fail(f"{label}: the cooldown runs the backwards left in microbatch order; got {_texts(cool)}")
    parts.done()


def _steady_problem(label, w, m, steady, want) -> None:
    pairs = m - w
    if len(steady) != len(want):
        more = " ..." if len(steady) > 6 else ""
        fail(f"{label}: after {plural(w, 'warmup forward')} the steady state pairs each forward left with a "
             f"backward; got {plural(len(steady), 'op')} ({_texts(steady[:6])}{more}) {PHASES_BOOK}")
    kinds = "".join(op.kind for op in steady)
    if kinds != "FB" * pairs:
        fail(f"{label}: the steady state alternates one forward, then one backward, starting with a forward; got "
             f"{_texts(steady[:6])}{' ...' if len(steady) > 6 else ''}")
    for k in range(pairs):
        f_op, b_op = steady[2 * k], steady[2 * k + 1]
        if f_op != want[2 * k]:
            fail(f"{label}: steady pair {k + 1} starts with {f_op.text()}; each pair starts with the next forward "
                 "not yet run")
        if b_op != want[2 * k + 1]:
            if b_op.microbatch == f_op.microbatch and w > 0:
                fail(f"{label}: after {f_op.text()} the steady state runs the backward of the oldest microbatch in "
                     f"flight, not {b_op.text()}: the gradient of the microbatch just forwarded has to cross the "
                     "later stages first")
            fail(f"{label}: steady pair {k + 1} is {f_op.text()} {b_op.text()}; its backward is the oldest "
                 f"microbatch in flight's {PHASES_BOOK}")


# -- the warmup length per rank (2 points) ---------------------------------------------------------------

@check
def check_warmup(func, cases) -> None:
    with kitfree.own(func, "one_f_one_b_phases") as mine:
        _check_warmup(mine, cases)


def _check_warmup(func, cases) -> None:
    for pp, m, ranks in _cases(cases):
        got = [len(_phases(func, pp, m, r, only_warmup=True)) for r in ranks]
        want = [megatron_warmup(pp, m, r) for r in ranks]
        if got == want:
            continue
        i = next(i for i in range(len(ranks)) if got[i] != want[i])
        r, w = ranks[i], got[i]
        label, runs = f"one_f_one_b_phases({pp}, {m}, {r})", plural(w, "warmup forward")
        if pp > 2 and len(set(got)) == 1:
            every = "every rank runs" if len(ranks) == pp else f"ranks {', '.join(map(str, ranks))} all run"
            fail(f"{label}: {every} {runs}, but the warmup differs by rank: a later rank has "
                 f"fewer stages below it to fill, so its first gradient comes back sooner {PHASES_BOOK}")
        if w == want[i] + 1 and want[i] == pp - r - 1:
            fail(f"{label}: {runs} is one too many -- the next forward is already the first of the steady state "
                 f"(that is why the last rank runs none) {PHASES_BOOK}")
        if w == pp - r - 1 and w > m:
            fail(f"{label}: {runs}, but there are only M = {plural(m, 'microbatch', 'microbatches')}: a rank cannot "
                 f"run more warmup forwards than there are microbatches {PHASES_BOOK}")
        if got == [megatron_warmup(pp, m, pp - 1 - q) for q in ranks]:
            fail(f"{label}: {runs} -- the warmups are reversed; rank 0 has the most stages below it to "
                 "fill, the last rank none")
        fail(f"{label}: {runs} is {'more' if w > want[i] else 'fewer'} than 1F1B's warmup on rank {r}: count the "
             f"stages below the rank that its warmup fills {PHASES_BOOK}")


# -- the whole order: dependencies and exact equality (3 points) ------------------------------------------

@check
def check_order(func, cases, phases=None) -> None:
    """The whole order, run where the kit cannot be imported (:mod:`..kitfree`): the kit's generator, reached by any
    route, is not the student's answer.  An order that is the student's own ``phases`` joined (reused or written
    the same way) is judged by the validator only: where it differs from 1F1B, the phases' and the warmup's checks
    already charge that mistake, once."""
    with kitfree.own(func, "one_f_one_b_order", needs=("one_f_one_b_phases",)) as mine:
        if phases is None:
            _check_order(mine, cases)
            return
        with kitfree.own(phases, "one_f_one_b_phases") as own_phases:
            _check_order(mine, cases, own_phases)


def _joined(phases, pp, m, r):
    """The student's phases for ``r`` joined (as they came); None when they cannot be read (the phases' check says
    why)."""
    try:
        got = phases(pp, m, r)
        if not isinstance(got, (list, tuple)) or len(got) != 3 or not all(isinstance(p, (list, tuple)) for p in got):
            return None
        return [op for part in got for op in part]
    except Exception:  # noqa: BLE001 -- the phases' own check reports it; here it only means "not reused"
        return None


def _check_order(func, cases, phases=None) -> None:
    for pp, m, _ in _cases(cases):
        raw = [call(func, pp, m, r, name="one_f_one_b_order") for r in range(pp)]
        if all(isinstance(raw[r], (list, tuple)) and tuple(raw[r]) == _rank_texts(megatron_warmup(pp, m, r), m)
               for r in range(pp)):  # the kit's one-rank orders, which are one_f_one_b's ranks (tests/test_lab04.py)
            continue  # 1F1B's own orders, op for op (which the validator passes): nothing to find

        def reused() -> bool:  # asked only where the order is wrong: a right order never runs the student's phases
            return phases is not None and all(
                isinstance(raw[r], (list, tuple)) and list(raw[r]) == _joined(phases, pp, m, r) for r in range(pp))

        if not all(_readable(ops, m) for ops in raw) and reused():
            continue  # ops that do not exist come from the phases' warmup: the warmup check charges it, once
        ranks = [_ops(raw[r], f"one_f_one_b_order({pp}, {m}, {r})") for r in range(pp)]
        schedule = Schedule("one_f_one_b_order", pp, m, 1, ranks)
        try:
            validate(schedule)
        except ScheduleError as exc:
            why = {"deadlock": "these orders deadlock, the validator says",
                   "order": "a rank needs one of its own later ops, the validator says"}.get(exc.kind, "not a "
                                                                                              "complete step")
            said = str(exc) if len(str(exc)) <= 240 else str(exc)[:240].rsplit("; ", 1)[0] + "; ..."  # (many ranks)
            fail(f"pp={pp}, M={m}: {why}: {said}")
        want = one_f_one_b(pp, m)
        if schedule.forward_only:
            fail(f"pp={pp}, M={m}: your orders run no backward at all -- that is an inference (forward-only) step; "
                 f"a training step runs B0 .. B{m - 1} on every rank")
        for r in range(pp):
            mine, theirs = ranks[r], want.ranks[r]
            i = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
            if i is None:
                continue
            if reused():
                break  # the student's own phases, joined: where they differ from 1F1B, their checks charge it
            fail(f"pp={pp}, M={m}, rank {r}, op {i + 1}: got {mine[i].text()}, not 1F1B's op there -- "
                 f"{_explain(pp, m, r, i, mine, theirs)}")


def _readable(ops, m) -> bool:
    """Every op parses and names one of the ``m`` microbatches."""
    try:
        return all((op if isinstance(op, Op) else _parse(op)).microbatch in range(m) for op in ops)
    except (OpParseError, TypeError, AttributeError):
        return False


def _leading_forwards(ops) -> int:
    return next((i for i, op in enumerate(ops) if op.kind != "F"), len(ops))


def _explain(pp, m, r, i, mine, theirs) -> str:
    w = megatron_warmup(pp, m, r)
    lead, want_lead = _leading_forwards(mine), _leading_forwards(theirs)
    if lead != want_lead:
        if m > w:
            return (f"on rank {r} your order runs {plural(lead, 'forward')} before its first backward, "
                    f"{'more' if lead > want_lead else 'fewer'} than 1F1B: its warmup, then the first forward of the "
                    f"steady state {PHASES_BOOK}")
        return (f"on rank {r} your order runs {plural(lead, 'forward')} before its first backward; with only "
                f"M = {plural(m, 'microbatch', 'microbatches')}, 1F1B runs all {m} forwards first on this rank")
    if i < w + 2 * (m - w):
        return "in the steady state each forward is followed by the backward of the oldest microbatch in flight"
    return f"the cooldown drains the {plural(w, 'backward')} left, in microbatch order"


# -- P2P order and memory (2 points) -----------------------------------------------------------------------

@check
def check_p2p_memory(max_in_flight, deadlock_example, cases) -> None:
    """Two parts: the memory (``max_in_flight``) and the P2P deadlock (``deadlock_example``)."""
    parts = Parts()
    with parts.part():
        _check_memory(max_in_flight, cases)
    with parts.part():
        _check_deadlock(deadlock_example)
    parts.done()


def _check_memory(max_in_flight, cases) -> None:
    for pp, m, ranks in _cases(cases):
        peaks = _peaks(pp, m, ranks)
        for r in ranks:
            label = f"max_in_flight({pp}, {m}, {r})"
            got = call(max_in_flight, pp, m, r, name="max_in_flight")
            expect_type(got, int, f"{label} (a count of microbatches, an int)")
            want = peaks[r]
            if got == want:
                continue
            if got == want - 1 and want == pp - r:
                fail(f"{label} = {got} counts only the warmup forwards; the first steady-state forward is also live "
                     "before the first backward frees one")
            if got == pp - r and want == m:
                fail(f"{label} = {got}, but there are only M = {m} microbatches: a rank cannot hold more")
            if got == m and m > want:
                fail(f"{label} = {got} is GPipe's peak (all M); in 1F1B a backward frees a microbatch for every new "
                     "forward once the warmup is over")
            if got == 1 and want > 1:
                fail(f"{label} = 1: 1F1B keeps every microbatch it has forwarded and not yet backwarded, not only the "
                     "current one")
            if got == pp and r > 0:
                fail(f"{label} = {got}: a later rank gets its first gradient sooner than rank 0, so it holds fewer")
            fail(f"{label} = {got} is {'more' if got > want else 'fewer'} than the microbatches 1F1B keeps on "
                 f"rank {r} at its peak: count the forwards run and not yet backwarded {PHASES_BOOK}")


def _peaks(pp, m, ranks) -> dict[int, int]:
    """1F1B's peak of microbatches in flight per rank: the simulator's ``peak_activations``, or for a few ranks of a
    drawn case the count it makes (forwards not yet backwarded) on each one's kit order (tests/test_lab04.py)."""
    if len(ranks) == pp and pp * m <= 4096:
        return dict(enumerate(simulate(one_f_one_b(pp, m)).peak_activations))
    return {r: max(itertools.accumulate(1 if op.kind == "F" else -1 for op in kit_rank_order(
        *_streams(m)[:2], megatron_warmup(pp, m, r))), default=0) for r in ranks}


def _check_deadlock(example) -> None:
    expect_type(example, dict, "deadlock_example")
    try:
        schedule = Schedule.from_dict(example)
    except (ScheduleTextError, OpParseError, ValueError, TypeError, KeyError) as exc:
        fail(f"deadlock_example cannot be read as a schedule ({type(exc).__name__}: {exc}); use keys pp, "
             "microbatches, ranks, e.g. {'pp': 2, 'microbatches': 2, 'ranks': [['F0', ...], [...]]}")
    try:
        validate(schedule)
    except ScheduleError as exc:
        if exc.kind == "deadlock":
            return
        if exc.kind == "order":
            fail(f"deadlock_example is stuck on one rank, not between ranks -- {exc}. A P2P deadlock is a circular "
                 "wait: each rank waits for a message its neighbour only sends after a message from it")
        fail(f"deadlock_example must be a complete step, every op exactly once -- {exc}")
    makespan = simulate(schedule).makespan
    fail(f"deadlock_example runs to the end (the simulated step takes {makespan:g} time units): every receive finds "
         "its send. Make two neighbours disagree on the order, e.g. give a rank a longer warmup than the rank before "
         "it")


def order_grid(func, pp, m) -> str:
    """The student's orders as the kit's grid, for the notebook to print; a problem is shown, not raised."""
    try:
        ranks = [[op.text() for op in _ops(func(pp, m, r), "order")] for r in range(pp)]
        return Schedule.from_dict({"pp": pp, "microbatches": m, "ranks": ranks}).to_grid()
    except Exception as exc:  # noqa: BLE001 -- shown to the student, never raised
        return f"cannot show the order: {type(exc).__name__}: {describe(str(exc), 200)}\n"


# == M043 follow-up (lab 2): the 1F1B drawing, its dependencies and what it shows =========================

@check
def check_dependencies(one_f_one_b_grid) -> None:
    """M043 follow-up 'dependencies correct': no op before its inputs, and none later than they allow."""
    ob = _grid_report(one_f_one_b_grid, "one_f_one_b_grid", "1f1b")
    if ob["every op exactly once"].points == 0:
        fail(f"one_f_one_b_grid: the dependencies are assessed once every op is drawn exactly once -- "
             f"{ob['every op exactly once'].feedback}")
    _first_failure(ob, ("dependencies respected",), "one_f_one_b_grid")
    if ob["shortest makespan"].points < ob["shortest makespan"].max_points and not (
            ob["schedule order"].points < ob["schedule order"].max_points and _tight_for_own_order(one_f_one_b_grid)):
        _first_failure(ob, ("shortest makespan",), "one_f_one_b_grid")


def _tight_for_own_order(text) -> bool:
    """The drawing is as short as the student's own (wrong) order allows: the order's mistake is the 1F1B-order
    check's, so the timing is judged against that order, not against 1F1B's makespan."""
    from ...grading.timeline import parse_grid

    try:
        rows = parse_grid(text)
        ranks = [[op for _, op in sorted(rows.get(r, []))] for r in range(PP)]
        schedule = Schedule("drawn", PP, M, 1, ranks)
        validate(schedule)
    except Exception:  # noqa: BLE001 -- an unreadable or invalid drawing: the grader's own checks say why
        return False
    end = max(start + 1 for row in rows.values() for start, _ in row)
    return end == simulate(schedule, fwd=1, bwd=1).makespan


# -- reading the 1F1B drawing ------------------------------------------------------------------------------

@check
def check_f0(f0_slots) -> None:
    res = _slots()["1f1b"]
    want = [int(e.start) + 1 for r in range(PP) for e in res.events if e.rank == r and e.op == Op("F", 0)]
    got = _per_rank(f0_slots, "f0_slots")
    if got == want:
        return
    if got == [v - 1 for v in want]:
        fail(f"f0_slots = {_fmt(got)} counts slots from 0; count from 1, as check-timeline's feedback does")
    if len(set(got)) == 1:
        fail(f"f0_slots puts F0 in slot {got[0]:g} on every rank; rank r + 1 can only start F0 once rank r's "
             "activation has arrived")
    bad = next(r for r in range(PP) if got[r] != want[r])
    fail(f"f0_slots = {_fmt(got)} is wrong on rank {bad}: read the slot of F0 on each row, counting from 1 "
         f"{DEPENDENCIES_BOOK}")


@check
def check_earliest_backward(earliest_backward) -> None:
    """Three parts: the op, the rank and the slot.  A slot that is right for the student's own (wrong) op and
    rank costs nothing more: that mistake is the op's or the rank's part."""
    form = "a dict {'op': an op string such as 'B3', 'rank': an int, 'slot': an int counted from 1}"
    expect_type(earliest_backward, dict, f"earliest_backward ({form})")
    missing = [k for k in ("op", "rank", "slot") if k not in earliest_backward]
    if missing:
        fail(f"earliest_backward is missing {', '.join(map(repr, missing))}: it must be {form}")
    res = _slots()["1f1b"]
    first = Timeline.from_sim(res).first_backward()
    want = {"op": first["op"], "rank": first["rank"], "slot": int(first["start"]) + 1}
    got = earliest_backward
    parts = Parts()
    with parts.part():
        if got["op"] != want["op"]:
            fail(f"earliest_backward['op'] is {describe(got['op'])}; the first backward of the step is for the first "
                 "microbatch whose loss exists (an op string, e.g. 'B3')")
    with parts.part():
        if got["rank"] != want["rank"]:
            fail(f"earliest_backward['rank'] is {describe(got['rank'])}: backward starts from the loss -- which "
                 f"stage computes it? every other rank waits for a gradient {DEPENDENCIES_BOOK}")
    with parts.part():
        slot = expect_number(got["slot"], "earliest_backward['slot']")
        if slot != want["slot"] and slot != _own_slot(res, got["op"], got["rank"], want):
            _slot_problem(res, slot, want)
    parts.done()


def _own_slot(res, op, rank, want):
    """The slot (from 1) of the student's own op on the student's own rank, if that is not the right pair."""
    if (op, rank) == (want["op"], want["rank"]) or not isinstance(op, str) or type(rank) is not int:
        return None
    try:
        mine = Op.parse(op)
    except OpParseError:
        return None
    return next((e.start + 1 for e in res.events if e.rank == rank and e.op == mine), None)


def _slot_problem(res, slot, want) -> None:
    f0_end = next(e.end for e in res.events if e.rank == want["rank"] and e.op == Op("F", 0))
    if slot == f0_end:
        fail(f"earliest_backward['slot'] = {slot:g} is one slot early: the first backward needs its own forward "
             "(and the loss) finished, so it takes the slot after that forward")
    if slot == want["slot"] - 1:
        fail(f"earliest_backward['slot'] = {slot:g}: count slots from 1")
    fail(f"earliest_backward['slot'] = {slot:g} is {'later' if slot > want['slot'] else 'earlier'} than the first "
         "backward of your drawing's step: find the earliest B on any row")


@check
def check_rank0(rank0_warmup, rank0_b0_slot) -> None:
    """Two parts: rank 0's warmup count and the slot of its B0."""
    res = _slots()["1f1b"]
    tl = Timeline.from_sim(res)
    parts = Parts()
    with parts.part():
        end = tl.phases(0)["warmup"][1]
        warm = sum(1 for o in tl.rank_ops(0) if o["kind"] == "F" and o["end"] <= end)
        got = expect_number(rank0_warmup, "rank0_warmup (an int, a count of forwards)")
        if got != warm:
            if got == warm + 1:
                fail(f"rank0_warmup = {got:g} also counts the forward right before B0, which is the first of the "
                     "steady state (one forward, then one backward); the warmup is the forwards before it")
            if got == M:
                fail(f"rank0_warmup = {got:g} is GPipe's: in 1F1B rank 0 only runs forwards until the pipe below it "
                     "is full")
            fail(f"rank0_warmup = {got:g} is {'more' if got > warm else 'fewer'} than rank 0's warmup: count the "
                 "forwards rank 0 runs before the pair F, B0 of its steady state")
    with parts.part():
        b0 = next(e.start for e in res.events if e.rank == 0 and e.op == Op("B", 0)) + 1
        slot = expect_number(rank0_b0_slot, "rank0_b0_slot (an int, a slot counted from 1)")
        if slot != b0:
            first = tl.first_backward()["start"] + 1
            if slot == first:
                fail(f"rank0_b0_slot = {slot:g} is too early for rank 0: its B0 needs the gradient from rank 1's B0, "
                     "which needs rank 2's, and so on down the pipe, one slot each")
            if slot == b0 - 1:
                fail(f"rank0_b0_slot = {slot:g}: count slots from 1")
            fail(f"rank0_b0_slot = {slot:g} is {'later' if slot > b0 else 'earlier'} than rank 0's B0: read the slot "
                 "of B0 on row r0 of your drawing")
    parts.done()


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
# From spaces no notebook can tabulate (hidden_space counts it), each case checked fast enough for a grade:
RANK_PP, RANK_M = (2, MAX_RANKS), (1, 8192)   # per rank: only ranks 0, pp - 1 and two drawn in between
ORDER_PP, ORDER_M, ORDER_OPS = (2, 256), (1, 4096), 65_536   # every rank: each (pp, M) with 2 * pp * M <= ORDER_OPS
DRAWN = 4
# fixed first, so a known wrong generator fails on the same case under every seed: M < pp - 1 (a warmup or a
# peak not capped at M), M = 1, pp = 2 and pp = 1, M = pp - 1 and M = pp (a cap off by one), a long pipe
FIXED = [(4, 2), (2, 1), (1, 3), (3, 1), (5, 4), (4, 4), (8, 16), (6, 3)]


def hidden_order_cases(rng, per_rank: bool = False) -> list:
    """The fixed edge cases (every rank), then four drawn: ``(pp, M)`` for the whole order (every rank), or with
    ``per_rank`` ``(pp, M, ranks)`` for the per-rank checks (rank 0, the last rank and two drawn in between)."""
    return drawn(rng, DRAWN, _rank_case if per_rank else _order_case, fixed=FIXED)


def _rank_case(r) -> tuple:
    pp, m = r.randint(*RANK_PP), r.randint(*RANK_M)
    return pp, m, tuple(sorted({0, pp - 1, *r.sample(range(1, pp - 1), min(2, pp - 2))}))


def _order_case(r) -> tuple:
    while 2 * (pp := r.randint(*ORDER_PP)) * (m := r.randint(*ORDER_M)) > ORDER_OPS:
        pass  # uniform over the (pp, M) within ORDER_OPS (about one draw in eight is)
    return pp, m


def hidden_space(budget: int = MAX_NOTEBOOK_BYTES) -> dict:
    """The bytes a table of the kit's answers over the hidden draws takes (at their fewest, favouring the table: one
    per per-rank answer, a warmup length or a peak; one per op token of a whole order), and the chance a table of
    ``budget`` bytes holds one drawn case (``*_chance``) and all ``DRAWN`` of a check (``*_all``).  Per rank: a case
    passes only if the table holds its drawn middle rank, so the best table holds the (pp - 2) * M_max middle keys
    of the smallest pp first, each pp winning 1 / (pp values) of the cases.  Whole orders: each (pp, M) is drawn
    alike and costs 2 * pp * M tokens, so the best table holds the cheapest."""
    pps, m_max = range(RANK_PP[0], RANK_PP[1] + 1), RANK_M[1]
    left, covered = budget, 0.0
    for pp in pps:
        cost = max(pp - 2, 1) * m_max
        covered, left = covered + min(1.0, max(left, 0) / cost), left - cost
    costs = sorted(2 * pp * m for pp in range(ORDER_PP[0], ORDER_PP[1] + 1)
                   for m in range(ORDER_M[0], min(ORDER_M[1], ORDER_OPS // (2 * pp)) + 1))
    held = next((k for k, total in enumerate(itertools.accumulate(costs)) if total > budget), len(costs))
    out = {"budget": budget, "rank_keys": sum(pps) * m_max, "phases_tokens": sum(pps) * m_max * (m_max + 1),
           "rank_chance": covered / len(pps), "order_cases": len(costs), "order_tokens": sum(costs),
           "order_chance": held / len(costs)}
    return {**out, "rank_all": out["rank_chance"] ** DRAWN, "order_all": out["order_chance"] ** DRAWN}


def hidden_space_text(budget: int = MAX_NOTEBOOK_BYTES) -> str:
    s = hidden_space(budget)
    return "\n".join(f"{what} (pp {pp[0]}..{pp[1]}, M {m[0]}..{m[1]}): a table of {n:,} bytes, {n / budget:,.0f}x "
                     f"MAX_NOTEBOOK_BYTES ({budget:,}); one that fits holds a drawn case with chance at most {p:.3f}, "
                     f"all {DRAWN} at most {p ** DRAWN:.1e}" for what, pp, m, n, p in (
                         ("per-rank checks", RANK_PP, RANK_M, s["rank_keys"], s["rank_chance"]),
                         ("whole orders", ORDER_PP, ORDER_M, s["order_tokens"], s["order_chance"])))
