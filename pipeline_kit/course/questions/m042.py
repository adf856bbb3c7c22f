"""M042 (lab 2): GPipe and 1F1B drawn by hand, then read off and measured.

Why the checks look like this: the two drawings are graded by the kit's own timeline grader
(:func:`pipeline_kit.grading.timeline.check_timeline`), so a student sees the same feedback the
``check-timeline`` command gives, and each rubric point takes only the grader checks it is about
(the orders for M042, the dependencies and the tight packing of the 1F1B drawing for M043).  Every
number a student reads off a drawing or measures is compared with the simulator's, and the typical
wrong numbers -- also computed with the simulator -- get their own explanation.
"""

from __future__ import annotations

from ...schedules import build_schedule
from ...sim import simulate
from ...trace import Timeline
from ...grading.parts import Parts
from ...grading.timeline import GridError, check_timeline, parse_grid
from .common import (
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_number,
    expect_type,
    fail,
)

PP, M = 4, 8
SCHEDULES = ("gpipe", "1f1b")
F_COST, B_COST = 1, 2  # the costs of the measured questions (the drawings take one slot per op)
SLOW_FWD = [2 * F_COST if r == 2 else F_COST for r in range(PP)]  # stage 2 twice as slow
SLOW_BWD = [2 * f for f in SLOW_FWD]
LATENCY = 0.1
BUBBLE_BOOK = book("gpipe-1f1b", "Where the bubble comes from — and what imbalance and P2P do to it")


def _sim(schedule: str, pp: int = PP, microbatches: int = M, **costs):
    costs = {"fwd": F_COST, "bwd": B_COST, **costs}
    return simulate(build_schedule(schedule, pp, microbatches), **costs)


def _slots():  # one slot per op, as the drawings are
    return {name: _sim(name, fwd=1, bwd=1) for name in SCHEDULES}


# -- the drawings -----------------------------------------------------------------------------------

def _grid_report(text, what: str, schedule: str):
    expect_type(text, str, what)
    try:
        empty = not any(parse_grid(text).values())
    except GridError:
        empty = False  # check_timeline explains what cannot be read
    if empty:
        fail(f"{what} has no ops yet: draw one row per rank, r0 to r{PP - 1}, one op or '.' per slot")
    return {c.name: c for c in check_timeline(text, PP, M, schedule=schedule, name=what).checks}


def _first_failure(checks: dict, names, what: str) -> None:
    for name in names:
        c = checks[name]
        if c.points < c.max_points:
            fail(f"{what} ({name}): {c.feedback}")


@check
def check_gpipe_order(gpipe_grid) -> None:
    """M042 'GPipe order': the GPipe drawing is right in every respect."""
    gp = _grid_report(gpipe_grid, "gpipe_grid", "gpipe")
    if gp["schedule order"].points == 0 and _grid_report(gpipe_grid, "gpipe_grid", "1f1b")["schedule order"].points:
        fail("gpipe_grid runs the 1F1B order (backwards start after a short warmup); GPipe runs every forward before "
             "any backward -- are the two drawings swapped?")
    _first_failure(gp, ("every op exactly once", "schedule order"), "gpipe_grid")
    if gp["dependencies respected"].points == 0:
        fail(f"gpipe_grid (dependencies respected): {gp['dependencies respected'].feedback}")
    if gp["shortest makespan"].points == 0:
        fail(f"gpipe_grid (shortest makespan): {gp['shortest makespan'].feedback}")


@check
def check_1f1b_order(one_f_one_b_grid) -> None:
    """M042 '1F1B order': the 1F1B drawing runs 1F1B's order (its dependencies are the M043 follow-up's)."""
    ob = _grid_report(one_f_one_b_grid, "one_f_one_b_grid", "1f1b")
    _first_failure(ob, ("every op exactly once",), "one_f_one_b_grid")
    if ob["schedule order"].points == 0:
        if _grid_report(one_f_one_b_grid, "one_f_one_b_grid", "gpipe")["schedule order"].points:
            fail("one_f_one_b_grid runs the GPipe order (every forward before any backward); in 1F1B a rank "
                 "starts its backwards after a short warmup of forwards, shorter on later ranks")
        fail(f"one_f_one_b_grid (schedule order): {ob['schedule order'].feedback}")


# -- read off the drawings: memory and idle ------------------------------------------------------------

def _per_rank(value, what: str) -> list[float]:
    expect_type(value, (list, tuple), f"{what} (a list of {PP} numbers, rank 0 first)")
    if len(value) != PP:
        fail(f"{what} needs one number per rank, a list of {PP} numbers in rank order (rank 0 first); got "
             f"{len(value)}: {describe(value)}")
    return [expect_number(v, f"{what}[{r}]") for r, v in enumerate(value)]


def _per_schedule(mapping, what: str, each: str) -> None:
    """``mapping`` is the dict the lab asks for, {'gpipe': ..., '1f1b': ...}; the feedback names that form."""
    form = f"a dict {{'gpipe': {each}, '1f1b': {each}}}"
    expect_type(mapping, dict, f"{what} ({form})")
    missing = [k for k in SCHEDULES if k not in mapping]
    if missing:
        fail(f"{what} is missing {', '.join(map(repr, missing))} (it has {', '.join(map(repr, mapping)) or 'no keys'})"
             f": it must be {form}")


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


@check
def check_peaks(peak_live) -> None:
    """Two parts: GPipe's peaks and 1F1B's (swapped schedules fail both)."""
    _per_schedule(peak_live, "peak_live", "[4 numbers, rank 0 first]")
    sims = _slots()
    want = {name: sims[name].peak_activations for name in SCHEDULES}
    got = {name: _per_rank(peak_live[name], f"peak_live[{name!r}]") for name in SCHEDULES}
    if got["gpipe"] == want["1f1b"] and got["1f1b"] == want["gpipe"]:
        fail("peak_live['gpipe'] and peak_live['1f1b'] are swapped")
    parts = Parts()
    with parts.part():
        if got["gpipe"] != want["gpipe"]:
            fail(f"peak_live['gpipe'] is {_fmt(got['gpipe'])}: in GPipe every rank runs all its forwards before its "
                 f"first backward -- count what each holds at that turn {book('gpipe-1f1b', 'Activation lifetime')}")
    with parts.part():
        _peaks_1f1b(got["1f1b"], want["1f1b"])
    parts.done()


def _peaks_1f1b(g, w) -> None:
    if g == w:
        return
    if all(v == 1 for v in g):
        fail("peak_live['1f1b'] is 1 on every rank: 1F1B does not keep only the current microbatch -- a rank "
             "holds every microbatch it has forwarded and not yet backwarded; count them in your drawing")
    if g == [v - 1 for v in w]:
        fail(f"peak_live['1f1b'] = {_fmt(g)} counts only the warmup forwards; the first steady-state forward also "
             "runs before the first backward frees anything, so each rank holds one more")
    if g == w[::-1]:
        fail(f"peak_live['1f1b'] = {_fmt(g)} is reversed: rank 0 waits longest for its first gradient, so it "
             "holds the most")
    if len(set(g)) == 1:
        fail(f"peak_live['1f1b'] is {g[0]:g} on every rank, but the ranks differ: a later rank gets its first "
             "gradient sooner, so it has fewer microbatches in flight")
    bad = next(r for r in range(PP) if g[r] != w[r])
    fail(f"peak_live['1f1b'][{bad}] is {g[bad]:g}, not rank {bad}'s peak: on row r{bad}, count the microbatches whose "
         "F has run and whose B has not, at the moment there are most of them")


@check
def check_bubble(idle_slots, bubble_fraction) -> None:
    """Four parts: each schedule's idle slots and each schedule's bubble fraction.  A fraction computed right from
    the student's own (wrong) idle slots costs nothing more: the idle slots' part already lost."""
    _per_schedule(idle_slots, "idle_slots", "[4 numbers, rank 0 first]")
    _per_schedule(bubble_fraction, "bubble_fraction", "a number")
    sims = _slots()
    parts, mine = Parts(), {}
    for name in SCHEDULES:
        with parts.part():
            mine[name] = _per_rank(idle_slots[name], f"idle_slots[{name!r}]")
            _idle_slots(name, mine[name], sims)
    for name in SCHEDULES:
        with parts.part():
            res = sims[name]
            got = expect_number(bubble_fraction[name], f"bubble_fraction[{name!r}]")
            if close(got, res.bubble_fraction, abs_=1e-3):
                continue
            own = mine.get(name)
            if own is not None and own != res.idle and close(got, sum(own) / (PP * res.makespan), abs_=1e-3):
                continue  # right from the student's own idle slots: that mistake is the idle slots' part
            if close(got, res.bubble_over_ideal, abs_=1e-3):
                fail(f"bubble_fraction[{name!r}] = {got:.3f} divides the idle time by the ideal (busy) time -- that "
                     "is the Megatron paper's bubble ratio (pp-1)/M; the bubble fraction is idle over all ranks' "
                     "total time, pp x makespan")
            if name == "1f1b" and got < sims["gpipe"].bubble_fraction - 1e-3:
                fail(f"bubble_fraction['1f1b'] = {got:.3f} is smaller than GPipe's: compare where the idle slots "
                     f"sit in your two drawings, at the fill and at the drain {BUBBLE_BOOK}")
            fail(f"bubble_fraction[{name!r}] = {got:.3f} is not the simulator's bubble fraction (to 3 decimals): "
                 "total idle slots over pp x makespan")
    parts.done()


def _idle_slots(name, got, sims) -> None:
    res = sims[name]
    if got == res.idle:
        return
    tl = Timeline.from_sim(res)
    inner = [sum(b - a for a, b in tl.idle_gaps(r) if a > 0 and b < res.makespan) for r in range(PP)]
    leading = [sum(b - a for a, b in tl.idle_gaps(r) if a == 0) for r in range(PP)]
    if got == inner:
        fail(f"idle_slots[{name!r}] = {_fmt(got)} counts only the gaps between a rank's first and last op; the "
             "'.' before the first op (fill) and after the last (drain) are idle too")
    if got == leading:
        fail(f"idle_slots[{name!r}] = {_fmt(got)} counts only the fill at the start; the drain at the end and "
             "the waits in between are idle too")
    if name == "1f1b" and sum(got) < sum(sims["gpipe"].idle):
        fail(f"idle_slots['1f1b'] = {_fmt(got)} is less idle than GPipe's: count the '.' on each row up to "
             "the step's last slot -- 1F1B moves the idle slots, it does not remove any")
    bad = next(r for r in range(PP) if got[r] != res.idle[r])
    fail(f"idle_slots[{name!r}] = {_fmt(got)} is wrong on rank {bad}: count the '.' on every row up to the step's "
         f"last slot (the {name} step is {res.makespan:g} slots long)")


# -- imbalance and P2P -----------------------------------------------------------------------------------

def _latency_hops(name: str) -> float:
    return (_sim(name, p2p_latency=LATENCY).makespan - _sim(name).makespan) / LATENCY


@check
def check_imbalance(slow_makespan, latency_hops) -> None:
    """Four parts: each schedule's slow-stage makespan and each schedule's latency count."""
    _per_schedule(slow_makespan, "slow_makespan", "a number (time units)")
    _per_schedule(latency_hops, "latency_hops", "a whole number")
    parts = Parts()
    for name in SCHEDULES:
        with parts.part():
            _slow_makespan(name, expect_number(slow_makespan[name], f"slow_makespan[{name!r}]"))
    for name in SCHEDULES:
        with parts.part():
            _hops(name, expect_number(latency_hops[name], f"latency_hops[{name!r}]"))
    parts.done()


def _slow_makespan(name, got) -> None:
    want = _sim(name, fwd=SLOW_FWD, bwd=SLOW_BWD).makespan
    if close(got, want):
        return
    equal = _sim(name).makespan
    if close(got, equal):
        fail(f"slow_makespan[{name!r}] = {got:g} is the equal-stage step; pass fwd={SLOW_FWD}, bwd={SLOW_BWD}")
    if close(got, _sim(name, fwd=SLOW_FWD).makespan):
        fail(f"slow_makespan[{name!r}] = {got:g} slows only stage 2's forward; a 2x slower stage takes twice "
             f"as long for its backward too (bwd={SLOW_BWD})")
    if close(got, 2 * equal):
        fail(f"slow_makespan[{name!r}] = {got:g} doubles the whole step; only stage 2 is slower -- simulate it")
    fail(f"slow_makespan[{name!r}] = {got:g} is not the makespan the simulator gives with fwd={SLOW_FWD}, "
         f"bwd={SLOW_BWD} -- it is {'longer' if got > want else 'shorter'}")


def _hops(name, got) -> None:
    want = _latency_hops(name)
    if close(got, want, abs_=1e-6):
        return
    res = _sim(name)
    if close(got, len(res.transfers)):
        fail(f"latency_hops[{name!r}] = {got:g} is every transfer of the step; most overlap with compute -- only "
             "the latencies on the critical path make the step longer: measure the makespan difference")
    if name == "1f1b" and close(got, _latency_hops("gpipe"), abs_=1e-6):
        fail(f"latency_hops['1f1b'] = {got:g} is GPipe's count (the fill and the drain); in 1F1B's steady state "
             "each backward waits for a gradient that waited for a forward, so the critical path crosses the "
             "boundaries many more times -- measure it")
    if close(got, want * LATENCY, abs_=1e-6):
        fail(f"latency_hops[{name!r}] = {got:g} is the extra time; divide it by the latency {LATENCY:g}")
    fail(f"latency_hops[{name!r}] = {got:g} is {'more' if got > want else 'fewer'} than the simulator measures: "
         f"(makespan with p2p_latency={LATENCY:g} - makespan without) / {LATENCY:g}")


# -- M042 follow-up: why 1F1B keeps the bubble ------------------------------------------------------------

def _gaps_1f1b():
    res = _sim("1f1b")
    tl = Timeline.from_sim(res)
    fill = [sum(b - a for a, b in tl.idle_gaps(r) if a == 0) for r in range(PP)]
    drain = [sum(b - a for a, b in tl.idle_gaps(r) if b == res.makespan and a > 0) for r in range(PP)]
    return res, fill, drain


@check
def check_fill(fill_idle) -> None:
    _, fill, drain = _gaps_1f1b()
    got = _per_rank(fill_idle, "fill_idle")
    if got == fill:
        return
    if got == fill[::-1]:
        fail(f"fill_idle = {_fmt(got)} is reversed: rank 0 starts at once, the last rank waits for F0 to cross "
             "every boundary before it")
    if got == [v * (F_COST + B_COST) / F_COST for v in fill]:
        fail(f"fill_idle = {_fmt(got)} charges f + b per rank: which ops does a rank wait for before its first "
             f"one? {BUBBLE_BOOK}")
    if got == drain:
        fail(f"fill_idle = {_fmt(got)} is the idle time at the end of the step (the drain)")
    if not any(got):
        fail("fill_idle is 0 everywhere: 1F1B still fills the pipe -- a later rank has no input until F0 reaches it")
    fail(f"fill_idle = {_fmt(got)}; the idle time before each rank's first op is not that (fwd=1, bwd=2)")


@check
def check_drain(drain_idle) -> None:
    _, fill, drain = _gaps_1f1b()
    got = _per_rank(drain_idle, "drain_idle")
    if got == drain:
        return
    if got == drain[::-1]:
        fail(f"drain_idle = {_fmt(got)} is reversed: the last backward of the step runs on rank 0, so rank 0 "
             "works to the end and the later ranks finish earlier")
    if got == fill:
        fail(f"drain_idle = {_fmt(got)} is too short: the drain is backwards travelling up the pipe, not "
             f"forwards {BUBBLE_BOOK}")
    if not any(got):
        fail("drain_idle is 0 everywhere: 1F1B still drains -- once the last backward has left a rank, that rank "
             "has nothing left to do")
    fail(f"drain_idle = {_fmt(got)}; the idle time after each rank's last op is not that (fwd=1, bwd=2)")


@check
def check_rank_idle(rank_idle, cases) -> None:
    for pp, m, f, b in cases:
        got = expect_number(call(rank_idle, pp, m, f, b, name="rank_idle"), f"rank_idle({pp}, {m}, {f}, {b})")
        for name in SCHEDULES:
            idle = _sim(name, pp, m, fwd=f, bwd=b).idle
            if all(close(got, v) for v in idle):
                continue
            want = idle[0]
            if close(got, (pp - 1) * f) or close(got, (pp - 1) * b):
                fail(f"rank_idle({pp}, {m}, {f}, {b}) = {got:g} counts the stage offsets for only one direction: "
                     f"look at both ends of a rank's row {BUBBLE_BOOK}")
            if close(got, want * pp / (pp - 1)):
                fail(f"rank_idle({pp}, {m}, {f}, {b}) = {got:g} counts pp offsets; the "
                     "boundaries between the stages are one fewer, pp - 1")
            more = expect_number(call(rank_idle, pp, m + 4, f, b, name="rank_idle"),
                                 f"rank_idle({pp}, {m + 4}, {f}, {b})")
            if not close(got, more) and close(want, _sim(name, pp, m + 4, fwd=f, bwd=b).idle[0]):
                fail(f"rank_idle({pp}, {m}, {f}, {b}) = {got:g} changes with M (M = {m + 4} gives {more:g}), but a "
                     "rank's idle time does not (simulate both) -- more microbatches only shrink its share of the "
                     "step")
            fail(f"rank_idle({pp}, {m}, {f}, {b}) = {got:g} is not the idle time of a rank of {name} with these f "
                 f"and b: the formula must hold for any f and b {BUBBLE_BOOK}")


def _b_starts(res, rank: int) -> list[float]:
    return sorted(e.start for e in res.events if e.rank == rank and e.op.kind == "B")


@check
def check_slow_stage(slow_beat, slow_idle) -> None:
    """Two parts: the beat and the idle time per rank."""
    slow = _sim("1f1b", fwd=SLOW_FWD, bwd=SLOW_BWD)
    equal = _sim("1f1b")
    parts = Parts()
    with parts.part():
        beat = expect_number(slow_beat, "slow_beat (a number, time units)")
        b0, b1 = _b_starts(slow, 0)[:2]
        e0, e1 = _b_starts(equal, 0)[:2]
        if not close(beat, b1 - b0):
            if close(beat, e1 - e0):
                fail(f"slow_beat = {beat:g} is the beat with equal stages; with stage 2 twice as slow, rank 0 gets "
                     "each gradient only as fast as stage 2 releases them -- measure it")
            fail(f"slow_beat = {beat:g} is {'longer' if beat > b1 - b0 else 'shorter'} than the beat: it is the time "
                 "from the start of rank 0's B0 to the start of its B1 in the slow simulation")
    with parts.part():
        got = _per_rank(slow_idle, "slow_idle")
        want = slow.idle
        if got != want:
            if got == equal.idle:
                fail(f"slow_idle = {_fmt(got)} is the equal-stage idle; simulate fwd={SLOW_FWD}, bwd={SLOW_BWD}")
            fast = [r for r in range(PP) if SLOW_FWD[r] == min(SLOW_FWD)]
            if all(close(got[r], equal.idle[r]) for r in fast):
                fail(f"slow_idle = {_fmt(got)} leaves the other ranks' idle time unchanged, but the slowness "
                     "propagates: every other rank waits for stage 2 on every beat, before and after it in the pipe")
            bad = next(r for r in range(PP) if not close(got[r], want[r]))
            fail(f"slow_idle[{bad}] = {got[bad]:g} is {'more' if got[bad] > want[bad] else 'less'} than rank {bad}'s "
                 f"idle time in the slow simulation (fwd={SLOW_FWD}, bwd={SLOW_BWD})")
    parts.done()


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_rank_idle_cases(rng) -> list:
    def make(r):
        f = r.choice([0.5, 1, 1.5, 2])
        return r.randint(2, 8), r.randint(1, 16), f, f * r.choice([1, 1.5, 2, 3])
    # fixed first, so a known wrong formula fails on the same case under every seed: f != 1 and b != 2f
    # (a formula that assumes them), M < pp and M = 1 (one that caps the offsets at M), a long pipe, M = pp - 1
    return drawn(rng, 2, make, fixed=[(3, 2, 2, 3), (5, 1, 0.5, 1.5), (8, 3, 1.5, 1.5), (6, 5, 2, 3)])
