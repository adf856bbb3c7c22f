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

import re

from ...schedules import Op, OpParseError, Schedule, ScheduleError, ScheduleTextError, one_f_one_b, validate
from ...sim import simulate
from ...trace import Timeline
from .. import kitfree
from .common import (
    call,
    check,
    describe,
    drawn,
    expect_keys,
    expect_number,
    expect_type,
    fail,
)
from .m042 import PP, M, _first_failure, _fmt, _grid_report, _per_rank, _slots



def megatron_warmup(pp: int, microbatches: int, rank: int) -> int:
    """Megatron's ``num_warmup_microbatches`` for ``rank`` (the count the kit's ``one_f_one_b`` uses).

    The order alone cannot tell a warmup of ``M`` from one of ``M - 1`` (both run every forward
    before any backward), so the count is Megatron's definition, not something read off the order.
    """
    return min(pp - rank - 1, microbatches)


def shaped(warmup: int, microbatches: int) -> tuple[list[str], list[str], list[str]]:
    """The kit's 1F1B phases for a rank with ``warmup`` warmup forwards.

    Rank 0 of a ``warmup + 1``-stage pipeline has exactly that warmup, so its kit order, cut after
    the warmup and before the cooldown (as long as the warmup), is the reference.
    """
    ops = [op.text() for op in one_f_one_b(warmup + 1, microbatches).ranks[0]]
    return ops[:warmup], ops[warmup:len(ops) - warmup], ops[len(ops) - warmup:]


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
            out.append(Op.parse(token))
        except OpParseError as exc:
            fail(f"{what}[{i}]: {exc}")
    return out


def _texts(ops) -> str:
    return " ".join(op.text() for op in ops) or "(nothing)"


def _phases(func, pp, m, r):
    label = f"one_f_one_b_phases({pp}, {m}, {r})"
    got = call(func, pp, m, r, name="one_f_one_b_phases")
    expect_type(got, (tuple, list), label)
    if len(got) != 3:
        fail(f"{label} must return (warmup, steady, cooldown), three lists of ops; got {len(got)} items")
    return [_ops(part, f"{label}[{i}] ({name})") for i, (part, name) in
            enumerate(zip(got, ("warmup", "steady", "cooldown")))], label


# -- the three phases (3 points) ---------------------------------------------------------------------

@check
def check_phases(func, cases) -> None:
    with kitfree.own(func, "one_f_one_b_phases") as mine:
        _check_phases(mine, cases)


def _check_phases(func, cases) -> None:
    for pp, m in cases:
        for r in range(pp):
            (warm, steady, cool), label = _phases(func, pp, m, r)
            w = len(warm)
            if any(op.kind != "F" for op in warm):
                fail(f"{label}: the warmup runs forwards only -- it fills the pipe below the rank before any gradient "
                     f"can come back; got {_texts(warm)}")
            if w > m:
                fail(f"{label}: {w} warmup forwards, but there are only M = {m} microbatches")
            want_warm, want_steady, want_cool = (list(map(Op.parse, part)) for part in shaped(w, m))
            if warm != want_warm:
                fail(f"{label}: the warmup runs the first {w} microbatches in order, {_texts(want_warm)}; "
                     f"got {_texts(warm)}")
            if steady != want_steady:
                _steady_problem(label, w, m, steady, want_steady)
            if any(op.kind != "B" for op in cool):
                fail(f"{label}: the cooldown runs no forwards (all {m} have run by then), only the backwards left; "
                     f"got {_texts(cool)}")
            if len(cool) != len(want_cool):
                fail(f"{label}: the cooldown drains the microbatches still in flight after the last forward -- as "
                     f"many as the warmup put in, {w}; got {len(cool)} backwards")
            if cool != want_cool:
                fail(f"{label}: the cooldown runs the backwards left in microbatch order, {_texts(want_cool)}; "
                     f"got {_texts(cool)}")


def _steady_problem(label, w, m, steady, want) -> None:
    pairs = m - w
    if len(steady) != len(want):
        fail(f"{label}: after {w} warmup forwards, M - warmup = {pairs} forward/backward pairs remain: the steady "
             f"state has {len(want)} ops, got {len(steady)} ({_texts(steady[:6])}{' ...' if len(steady) > 6 else ''})")
    kinds = "".join(op.kind for op in steady)
    if kinds != "FB" * pairs:
        fail(f"{label}: the steady state alternates one forward, then one backward, starting with a forward; got "
             f"{_texts(steady[:6])}{' ...' if len(steady) > 6 else ''}")
    for k in range(pairs):
        f_op, b_op = steady[2 * k], steady[2 * k + 1]
        if f_op != want[2 * k]:
            fail(f"{label}: steady pair {k + 1} must start with {want[2 * k].text()}, the next forward after the "
                 f"warmup; got {f_op.text()}")
        if b_op != want[2 * k + 1]:
            if b_op.microbatch == f_op.microbatch and w > 0:
                fail(f"{label}: after {f_op.text()} the steady state runs {want[2 * k + 1].text()}, the backward of "
                     f"the oldest microbatch in flight, not {b_op.text()}: the gradient of the microbatch just "
                     f"forwarded has to cross the later stages first")
            fail(f"{label}: steady pair {k + 1} is {f_op.text()} {b_op.text()}; its backward is "
                 f"{want[2 * k + 1].text()}, the oldest microbatch in flight")


# -- the warmup length per rank (2 points) ---------------------------------------------------------------

@check
def check_warmup(func, cases) -> None:
    with kitfree.own(func, "one_f_one_b_phases") as mine:
        _check_warmup(mine, cases)


def _check_warmup(func, cases) -> None:
    for pp, m in cases:
        got = [len(_phases(func, pp, m, r)[0][0]) for r in range(pp)]
        want = [megatron_warmup(pp, m, r) for r in range(pp)]
        if got == want:
            continue
        r = next(i for i in range(pp) if got[i] != want[i])
        w, label = got[r], f"one_f_one_b_phases({pp}, {m}, {r})"
        if pp > 2 and len(set(got)) == 1:
            fail(f"{label}: every rank runs {w} warmup forwards, but the warmup differs by rank: a later rank has "
                 f"fewer stages below it to fill, so its first gradient comes back sooner (rank {r} runs {want[r]})")
        if w == want[r] + 1 and want[r] == pp - r - 1:
            fail(f"{label}: {w} warmup forwards is one too many -- rank {r} runs pp - rank - 1 = {want[r]}; the "
                 "next forward is already the first of the steady state (that is why the last rank runs none)")
        if w == pp - r - 1 and w > m:
            fail(f"{label}: {w} warmup forwards, but there are only M = {m} microbatches -- the warmup is "
                 f"min(pp - rank - 1, M) = {want[r]}")
        if got == want[::-1]:
            fail(f"{label}: {w} warmup forwards -- the warmups are reversed; rank 0 has the most stages below it to "
                 "fill, the last rank none")
        fail(f"{label}: {w} warmup forwards, 1F1B runs {want[r]} on rank {r} (pp = {pp}, M = {m})")


# -- the whole order: dependencies and exact equality (3 points) ------------------------------------------

@check
def check_order(func, cases) -> None:
    """The whole order, run where the kit cannot be imported (:mod:`..kitfree`): the kit's generator, reached by any
    route, is not the student's answer."""
    with kitfree.own(func, "one_f_one_b_order", needs=("one_f_one_b_phases",)) as mine:
        _check_order(mine, cases)


def _check_order(func, cases) -> None:
    for pp, m in cases:
        ranks = [_ops(call(func, pp, m, r, name="one_f_one_b_order"), f"one_f_one_b_order({pp}, {m}, {r})")
                 for r in range(pp)]
        schedule = Schedule("one_f_one_b_order", pp, m, 1, ranks)
        try:
            validate(schedule)
        except ScheduleError as exc:
            why = {"deadlock": "these orders deadlock, the validator says",
                   "order": "a rank needs one of its own later ops, the validator says"}.get(exc.kind, "not a "
                                                                                              "complete step")
            fail(f"pp={pp}, M={m}: {why}: {exc}")
        want = one_f_one_b(pp, m)
        if schedule.forward_only:
            fail(f"pp={pp}, M={m}: your orders run no backward at all -- that is an inference (forward-only) step; "
                 f"a training step runs B0 .. B{m - 1} on every rank")
        for r in range(pp):
            mine, theirs = ranks[r], want.ranks[r]
            i = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
            if i is None:
                continue
            fail(f"pp={pp}, M={m}, rank {r}, op {i + 1}: got {mine[i].text()}, 1F1B runs {theirs[i].text()} there -- "
                 + _explain(pp, m, r, i, mine, theirs))


def _leading_forwards(ops) -> int:
    return next((i for i, op in enumerate(ops) if op.kind != "F"), len(ops))


def _explain(pp, m, r, i, mine, theirs) -> str:
    w = megatron_warmup(pp, m, r)
    lead, want_lead = _leading_forwards(mine), _leading_forwards(theirs)
    if lead != want_lead:
        if m > w:
            return (f"rank {r} runs {lead} forwards before its first backward; 1F1B runs pp - rank - 1 = {w} warmup "
                    f"forwards, then the first steady-state forward, so {want_lead}")
        return (f"rank {r} runs {lead} forwards before its first backward; with M = {m} <= pp - rank - 1 = "
                f"{pp - r - 1} the warmup is capped at M, so all {m} forwards run first")
    if i < w + 2 * (m - w):
        k = (i - w) // 2
        return (f"in the steady state each forward F{w + k} is followed by the backward of the oldest microbatch in "
                f"flight, B{k}")
    return f"the cooldown drains the {w} backwards left, in microbatch order"


# -- P2P order and memory (2 points) -----------------------------------------------------------------------

@check
def check_p2p_memory(max_in_flight, deadlock_example, cases) -> None:
    for pp, m in cases:
        peaks = simulate(one_f_one_b(pp, m)).peak_activations
        for r in range(pp):
            label = f"max_in_flight({pp}, {m}, {r})"
            got = call(max_in_flight, pp, m, r, name="max_in_flight")
            expect_type(got, int, label)
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
                fail(f"{label} = {got}: only rank 0 holds pp microbatches; a later rank gets its first gradient "
                     "sooner, so it holds fewer")
            fail(f"{label} = {got}; the simulator's peak_activations for rank {r} is {want}")
    _check_deadlock(deadlock_example)


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
    _first_failure(ob, ("dependencies respected", "shortest makespan"), "one_f_one_b_grid")


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
    fail(f"f0_slots = {_fmt(got)}: read the slot of F0 on each row (F0 moves one rank down per slot)")


@check
def check_earliest_backward(earliest_backward) -> None:
    expect_keys(earliest_backward, ("op", "rank", "slot"), "earliest_backward")
    res = _slots()["1f1b"]
    first = Timeline.from_sim(res).first_backward()
    want = {"op": first["op"], "rank": first["rank"], "slot": int(first["start"]) + 1}
    got = earliest_backward
    if got["op"] != want["op"]:
        fail(f"earliest_backward['op'] is {describe(got['op'])}; the first backward of the step is for the first "
             "microbatch whose loss exists")
    if got["rank"] != want["rank"]:
        fail(f"earliest_backward['rank'] is {describe(got['rank'])}: backward starts from the loss, which only the "
             f"last stage (rank {PP - 1}) computes; every other rank waits for a gradient from below")
    slot = expect_number(got["slot"], "earliest_backward['slot']")
    if slot == want["slot"]:
        return
    f0_end = next(e.end for e in res.events if e.rank == want["rank"] and e.op == Op("F", 0))
    if slot == f0_end:
        fail(f"earliest_backward['slot'] = {slot:g} is the slot of F0 on rank {want['rank']}; B0 needs that forward "
             "(and the loss) finished, so it takes the next slot")
    if slot == want["slot"] - 1:
        fail(f"earliest_backward['slot'] = {slot:g}: count slots from 1")
    b0_rank0 = next(e.start for e in res.events if e.rank == 0 and e.op == Op("B", 0)) + 1
    if slot == b0_rank0:
        fail(f"earliest_backward['slot'] = {slot:g} is when rank 0's B0 runs, the last of the B0s")
    fail(f"earliest_backward['slot'] = {slot:g} is not the slot of {want['op']} on rank {want['rank']}")


@check
def check_rank0(rank0_warmup, rank0_b0_slot) -> None:
    res = _slots()["1f1b"]
    tl = Timeline.from_sim(res)
    end = tl.phases(0)["warmup"][1]
    warm = sum(1 for o in tl.rank_ops(0) if o["kind"] == "F" and o["end"] <= end)
    got = expect_number(rank0_warmup, "rank0_warmup")
    if got != warm:
        if got == warm + 1:
            fail(f"rank0_warmup = {got:g} also counts the forward right before B0, which is the first of the "
                 "steady state (one forward, then one backward); the warmup is the forwards before it")
        if got == M:
            fail(f"rank0_warmup = {got:g} is GPipe's: in 1F1B rank 0 only runs forwards until the pipe below it is "
                 "full")
        fail(f"rank0_warmup = {got:g}; count the forwards rank 0 runs before the pair F, B0 of its steady state")
    b0 = next(e.start for e in res.events if e.rank == 0 and e.op == Op("B", 0)) + 1
    slot = expect_number(rank0_b0_slot, "rank0_b0_slot")
    if slot != b0:
        first = tl.first_backward()["start"] + 1
        if slot == first:
            fail(f"rank0_b0_slot = {slot:g} is when the last rank starts B0; the gradient must come back through "
                 "every rank in between, one slot each, before rank 0 can start its B0")
        if slot == b0 - 1:
            fail(f"rank0_b0_slot = {slot:g}: count slots from 1")
        fail(f"rank0_b0_slot = {slot:g}; read the slot of B0 on row r0 of your drawing")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_order_cases(rng) -> list:
    """(pp, M) for the 1F1B generator: one rank, one microbatch and M < pp always, four more drawn."""
    return drawn(rng, 4, lambda r: (r.randint(2, 8), r.randint(1, 16)), fixed=[(4, 2), (2, 1), (1, 3)])
