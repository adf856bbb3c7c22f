"""ZB-V and DualPipe-V (lab 9): stages in a V, ZB-V's bubble against 1F1B's, its memory, and what the V buys.

Why a question outside M041-M054: the interview question bank stops at the interleaved pipeline, while
interviews in 2026 go on to the zero-bubble V schedules (Qi et al., *Zero Bubble Pipeline Parallelism*, 2024;
DeepSeek-V3's DualPipe) that ``torch.distributed.pipelining`` ships as ``ScheduleZBVZeroBubble`` and
``ScheduleDualPipeV``.  The rubric keeps the bank's shape: 10 points for the main question, 5 for the follow-up.

Every expected value comes from the kit -- the placement rule (:func:`~pipeline_kit.schedules.virtual_stage`),
the message plan (:func:`~pipeline_kit.sim.compare.p2p_messages`), the simulator and ``build_schedule``'s
refusals -- never typed; the typical wrong answers are recognised by value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction

from ...layout import even_layout
from ...schedules import ScheduleConfigError, build_schedule, stage_owner, virtual_stage
from ...sim import simulate
from ...sim.compare import p2p_messages
from ...grading.parts import Parts, listing, plural
from .common import (
    LabCheckFailed,
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_choices,
    expect_int,
    expect_number,
    expect_type,
    fail,
    first_match,
)

# The lab's cost model: every chunk op (F, I, W) takes one unit, so a rank's whole share takes 2 forward and
# 4 backward (the simulator's costs are per rank share; the split backward's W is half of it by default).
UNIT_COSTS = {"fwd": Fraction(2), "bwd": Fraction(4)}
V_BUYS = book("zero-bubble", "What the V placement buys")  # where the book teaches what these checks find
BUBBLE_LEFT = book("zero-bubble", "How much bubble is left")
PEAK_MEMORY = book("zero-bubble", "Peak memory per rank")


@functools.lru_cache(maxsize=512)
def _sim(name: str, pp: int, m: int):
    """The simulated step on the lab's unit costs (cached: every seed's cases and both cells reuse them)."""
    return simulate(build_schedule(name, pp, m), **UNIT_COSTS)


@functools.lru_cache(maxsize=512)
def _peaks(name: str, pp: int, m: int) -> tuple[int, ...]:
    return tuple(simulate(build_schedule(name, pp, m)).peak_activations)


# -- main: stages in a V --------------------------------------------------------------------------------
def _own_stages(v_stage, pp: int) -> dict | None:
    """The student's own ``v_stage`` map ``{(rank, chunk): stage or None}`` for ``pp`` when it is a wrong one (None
    where it gives no legal stage), else None (right, not given, raising, or not ints).  Why: a ``v_owner`` or
    ``v_rank_layers`` built on a wrong ``v_stage`` is judged against it, so the one mistake costs one point, in
    ``v_stage``'s check; where it gives no legal stage the dependent answer is not judged (nothing is right there)."""
    if v_stage is None:
        return None
    try:
        own = {(r, c): call(v_stage, r, c, pp, name="v_stage") for r in range(pp) for c in (0, 1)}
    except LabCheckFailed:
        return None
    if not all(type(s) is int for s in own.values()):
        return None
    if all(s == virtual_stage(r, c, pp, "v") for (r, c), s in own.items()):
        return None
    return {rc: s if 0 <= s < 2 * pp else None for rc, s in own.items()}


def _judged(unjudged: bool, answer: Callable[[], None]) -> None:
    """Run the judgement ``answer`` of one call; where the student's own wrong ``v_stage`` leaves that call
    without a right answer (``unjudged``), a failure is ``v_stage``'s, not charged again."""
    try:
        answer()
    except LabCheckFailed:
        if not unjudged:
            raise


@check
def check_v_stage(v_stage, pps) -> None:
    for pp in pps:
        for rank in range(pp):
            for chunk in (0, 1):
                got = expect_int(call(v_stage, rank, chunk, pp, name="v_stage"), f"v_stage({rank}, {chunk}, {pp})")
                want = virtual_stage(rank, chunk, pp, "v")
                if got == want:
                    continue
                why = first_match(got, [
                    (virtual_stage(rank, chunk, pp), ("that is the looped placement of the interleaved schedule "
                                                      "(chunk c is stage c*pp + r): in a V the second chunk runs back "
                                                      "up the ranks")),
                    (virtual_stage(rank, 1 - chunk, pp, "v"), ("the chunks are swapped: c is the local chunk index in "
                                                               "increasing stage order, so c0 is the smaller stage")),
                    (2 * pp - rank, "one too far: the 2pp stages are numbered from 0"),
                ])
                fail(f"v_stage(rank={rank}, chunk={chunk}, pp={pp}) = {describe(got)}: "
                     f"{why or 'rank r holds the stage r on the way down and one stage on the way back up'} {V_BUYS}")


@check
def check_v_owner(v_owner, pps, v_stage=None) -> None:
    """``v_stage``: the student's, when given; a ``v_owner`` that inverts a wrong ``v_stage`` passes here."""
    for pp in pps:
        own = _own_stages(v_stage, pp)
        inverse = {}
        if own is not None:
            legal = [(rc, s) for rc, s in own.items() if s is not None]
            inverse = {s: rc for rc, s in legal if [t for _, t in legal].count(s) == 1}
        for stage in range(2 * pp):
            unjudged = own is not None and stage not in inverse  # the own v_stage gives it no owner
            _judged(unjudged, lambda: _owner_case(v_owner, stage, pp, inverse.get(stage)))


def _owner_case(v_owner, stage: int, pp: int, own) -> None:
    got = call(v_owner, stage, pp, name="v_owner")
    if isinstance(got, dict):
        fail(f"v_owner({stage}, {pp}) is a dict; return a tuple (rank, chunk) of two ints")
    expect_type(got, (tuple, list), f"v_owner({stage}, {pp})")
    if len(got) != 2:
        fail(f"v_owner({stage}, {pp}) = {describe(got)}: return a tuple (rank, chunk) of two ints")
    got = tuple(expect_int(x, f"v_owner({stage}, {pp}) entry") for x in got)
    want = stage_owner(stage, pp, "v")
    if got == want or got == own:
        return  # right, or right for the student's own v_stage (its mistake is charged there)
    if got == stage_owner(stage, pp):
        why = "that is the looped placement (stage % pp, stage // pp); in a V the later stages run back up the ranks"
    elif got == want[::-1]:
        why = "return (rank, chunk), in that order"
    elif got[0] == want[0]:
        why = "the rank is right; the chunk is the stage's position among the rank's two stages"
    else:
        why = "the stages go down the ranks 0 .. pp-1, then back up from rank pp-1 to rank 0"
    fail(f"v_owner(stage={stage}, pp={pp}) = {describe(got)} is not stage {stage}'s (rank, chunk): {why} {V_BUYS}")


def expected_rank_layers(rank: int, pp: int, layers: int, placement: str = "v") -> list[int]:
    """The layers ``rank`` holds when ``layers`` are split evenly over 2pp stages placed by ``placement``."""
    stages = even_layout(layers, 2 * pp).stages
    return sorted(i for chunk in (0, 1) for i in stages[virtual_stage(rank, chunk, pp, placement)].layers)


@check
def check_v_rank_layers(v_rank_layers, cases, v_stage=None) -> None:
    """``v_stage``: the student's, when given; layers that follow a wrong ``v_stage`` pass here."""
    for pp, layers in cases:
        own = _own_stages(v_stage, pp)
        stages = even_layout(layers, 2 * pp).stages
        for rank in range(pp):
            mine = None
            if own is not None and None not in (own[rank, 0], own[rank, 1]):
                mine = sorted(i for c in (0, 1) for i in stages[own[rank, c]].layers)
            unjudged = own is not None and mine is None  # the own v_stage gives this rank no legal stage
            _judged(unjudged, lambda: _layers_case(v_rank_layers, rank, pp, layers, mine))


def _layers_case(v_rank_layers, rank: int, pp: int, layers: int, mine) -> None:
    got = call(v_rank_layers, rank, pp, layers, name="v_rank_layers")
    expect_type(got, (list, tuple, range), f"v_rank_layers({rank}, {pp}, {layers})")
    got = list(got)
    want = expected_rank_layers(rank, pp, layers)
    if got == want or got == mine:
        return  # right, or right for the student's own v_stage (its mistake is charged there)
    if not all(type(i) is int for i in got):
        why = "give the layer indices as a list of ints"
    elif sorted(got) == want:
        why = "the right layers, but return them as a list sorted ascending"
    elif got == expected_rank_layers(rank, pp, layers, "looped"):
        why = "those are the looped placement's layers (stages r and r + pp); a V holds stages r and 2pp-1-r"
    elif got == list(even_layout(layers, pp).stages[rank].layers):
        why = "a contiguous block is plain 1F1B's split; in a V each rank holds two separate stages"
    else:
        why = f"split the {layers} layers evenly over 2pp = {2 * pp} stages; rank {rank} holds two of them"
    fail(f"v_rank_layers(rank={rank}, pp={pp}, layers={layers}) = {describe(got)}: {why} {V_BUYS}")


def hidden_pp_cases(rng) -> list[int]:
    """pp = 1 (the V's turn is inside the only rank), 2 and 3 first: every known wrong placement fails on them."""
    return drawn(rng, 2, lambda r: r.randint(2, 12), fixed=[1, 2, 3])


def hidden_layer_cases(rng) -> list[tuple[int, int]]:
    def make(r):
        pp = r.randint(2, 6)
        return pp, 2 * pp * r.randint(1, 4)
    # several layers per stage, one layer per stage, and pp = 1, before the draws
    return drawn(rng, 2, make, fixed=[(2, 12), (3, 6), (1, 4)])


# -- main: messages ---------------------------------------------------------------------------------------
@check
def check_v_messages(v_messages, cases) -> None:
    for pp, m in cases:
        got = expect_int(call(v_messages, pp, m, name="v_messages"), f"v_messages({pp}, {m})")
        want = p2p_messages(build_schedule("zbv", pp, m))
        if got == want:
            continue
        why = first_match(got, [
            (2 * m * (2 * pp - 1), ("every stage boundary counted: the boundary between stages pp-1 and pp is inside "
                                    "rank pp-1, so it needs no message")),
            (m * (2 * pp - 2), ("that is the forward activations only (and 1F1B's whole count): every backward sends a "
                                "gradient back across each rank boundary the forward crossed")),
            (2 * (2 * pp - 2), "that is one microbatch's messages; a step runs M microbatches"),
            (m * (2 * pp - 1), ("that is the forward activations only, with the turn between stages pp-1 and pp "
                                "counted too: it is inside rank pp-1, and every backward sends a gradient back")),
        ]) or "count the tensors that cross between two ranks in one step, forward activations and backward gradients"
        fail(f"v_messages(pp={pp}, M={m}) = {got} is not the step's P2P messages: {why} {V_BUYS}")


def hidden_message_cases(rng) -> list[tuple[int, int]]:
    """(3, 5) first: every known wrong count differs there from the right one; then pp = 1 (no message at all)."""
    return drawn(rng, 3, lambda r: (r.randint(2, 8), r.randint(1, 32)), fixed=[(3, 5), (1, 4)])


# -- main: the bubble, and against 1F1B -------------------------------------------------------------------
def _in_domain(pp: int, m: int) -> None:
    if m < 2 * pp:
        raise ValueError(f"the lab's formulas hold for M >= 2pp; got pp={pp}, M={m}")


@check
def check_zbv_bubble(zbv_bubble, cases) -> None:
    for pp, m in cases:
        _in_domain(pp, m)
        got = expect_number(call(zbv_bubble, pp, m, name="zbv_bubble"), f"zbv_bubble({pp}, {m})")
        want = _sim("zbv", pp, m).bubble_fraction
        if close(got, float(want)):
            continue
        why = first_match(got, [
            (0, ("zero bubble is not zero idle: the first microbatch still has to travel down the ranks before the "
                 "last one starts, and that fill is not covered")),
            (_sim("1f1b", pp, m).bubble_fraction, "that is 1F1B's bubble, (pp-1)/(M+pp-1)"),
            (Fraction(pp - 1, 2 * m + pp - 1), ("that is the interleaved schedule's with v = 2; ZB-V also splits the "
                                                "backward, and the W ops fill the drain")),
            (Fraction(pp - 1, 6 * m), ("that is the idle time over the ideal time; the bubble here is idle / (pp x "
                                       "makespan), over the whole step")),
            (Fraction(pp - 1, 3 * m + pp - 1), ("count the units a rank works in a step: both chunks' F, I and W for "
                                                "every microbatch")),
            (100 * want, "that is a percentage; give the fraction itself, between 0 and 1"),
        ]) or "simulate(build_schedule('zbv', pp, M), fwd=2, bwd=4) and look at the idle time of each rank"
        fail(f"zbv_bubble(pp={pp}, M={m}) = {got:.6g} is not the idle share of the simulated step: {why} "
             f"{BUBBLE_LEFT}")


def _own_speedup(zbv_bubble, pp: int, m: int, one) -> float | None:
    """The speedup the student's own ``zbv_bubble`` implies (the same work, so the step times are in the ratio of
    the busy shares), when that bubble is a wrong number; else None."""
    if zbv_bubble is None:
        return None
    try:
        own = expect_number(call(zbv_bubble, pp, m, name="zbv_bubble"), "zbv_bubble")
    except LabCheckFailed:
        return None
    if close(own, float(_sim("zbv", pp, m).bubble_fraction)) or not 0 <= own < 1:
        return None
    return (1 - own) / (1 - float(one.bubble_fraction))


@check
def check_zbv_speedup(zbv_speedup, cases, zbv_bubble=None) -> None:
    """``zbv_bubble``: the student's, when given; a speedup that follows a wrong bubble passes here (the bubble's
    check charges that mistake)."""
    for pp, m in cases:
        _in_domain(pp, m)
        got = expect_number(call(zbv_speedup, pp, m, name="zbv_speedup"), f"zbv_speedup({pp}, {m})")
        one, v = _sim("1f1b", pp, m), _sim("zbv", pp, m)
        want = one.makespan / v.makespan
        if close(got, float(want)):
            continue
        own = _own_speedup(zbv_bubble, pp, m, one)
        if own is not None and close(got, own):
            continue
        why = first_match(got, [
            (1 / want, "upside down: 1F1B's step time over ZB-V's (above 1 when ZB-V is faster)"),
            (one.bubble_fraction / v.bubble_fraction, "that is the ratio of the bubbles; compare the step times"),
            (Fraction(m + pp - 1, m), ("that compares 1F1B with a schedule that never idles; ZB-V's step still has a "
                                       "bubble, a smaller one")),
            (one.makespan - v.makespan, "that is the difference of the step times in units; give their ratio"),
            (1, "ZB-V and 1F1B would take the same time only if ZB-V kept 1F1B's bubble; its W ops fill the drain"),
            (Fraction(3 * (m + pp - 1), 1) / v.makespan, ("1F1B's step counted with F = 1 and B = 2: in the "
                                                          "simulator's units 1F1B's F takes 2 and its B 4 (a rank's "
                                                          "whole share)")),
            (Fraction(2 * (m + pp - 1), 2 * m + pp - 1), ("that is the interleaved schedule's gain (two looped chunks, "
                                                         "unsplit backward); ZB-V also splits the backward")),
            (100 * want, "that is a percentage; give the ratio itself"),
            (100 * (want - 1), "that is the gain in percent; give the ratio of the step times itself"),
        ]) or (f"the ratio of the simulated step times is {'lower' if got > want else 'higher'}: simulate both with "
               "fwd=2, bwd=4 and divide 1F1B's makespan by ZB-V's")
        fail(f"zbv_speedup(pp={pp}, M={m}) = {got:.6g}: {why} {BUBBLE_LEFT}")


def hidden_bubble_cases(rng) -> list[tuple[int, int]]:
    def make(r):
        pp = r.randint(2, 8)
        return pp, r.randint(2 * pp, 5 * pp)
    # every known wrong bubble and speedup differs from the right one on each of these: they come first
    return drawn(rng, 3, make, fixed=[(8, 16), (2, 4), (3, 7)])


# -- follow-up: memory ------------------------------------------------------------------------------------
@check
def check_zbv_peaks(zbv_peaks, cases) -> None:
    for pp, m in cases:
        got = call(zbv_peaks, pp, m, name="zbv_peaks")
        if isinstance(got, dict):
            fail(f"zbv_peaks({pp}, {m}) is a dict; return a list of {plural(pp, 'count')}, one per rank, rank 0 first")
        expect_type(got, (list, tuple), f"zbv_peaks({pp}, {m})")
        got = [expect_int(n, f"zbv_peaks({pp}, {m}) entry") for n in got]
        want = list(_peaks("zbv", pp, m))
        if got == want:
            continue
        one = list(_peaks("1f1b", pp, m))
        if len(got) != pp:
            why = f"give one count per rank, rank 0 first ({plural(pp, 'count')}, not {len(got):,})"
        elif got == want[::-1]:
            why = "the right counts in reverse order: entry r is rank r's peak, rank 0 first"
        elif sorted(got) == sorted(want):
            why = "the right counts in the wrong order: entry r is rank r's peak, rank 0 first"
        elif got == one:
            why = "that is 1F1B's min(pp - r, M); count chunk-activations of the V"
        elif got == [2 * n for n in one]:
            why = ("the V is not two copies of 1F1B: rank r's second stage is 2pp-1-r, so the deepest rank is the "
                   "last one, where the V turns, not rank 0")
        elif got == [2 * pp] * pp:
            why = "with fewer microbatches there are fewer to keep: a step makes only 2M chunk-activations"
        else:
            rank = next(r for r in range(pp) if got[r] != want[r])
            why = f"rank {rank}'s peak is off, counted in chunk-activations (entry r is rank r's)"
        fail(f"zbv_peaks(pp={pp}, M={m}) = {describe(got)} are not the simulated peaks: {why} {PEAK_MEMORY}")


def hidden_peak_cases(rng) -> list[tuple[int, int]]:
    def make(r):
        pp = r.randint(2, 8)
        return pp, r.randint(1, 3 * pp)
    # small M (where the ranks differ) and large M first: the known wrong peaks all fail on them
    return drawn(rng, 3, make, fixed=[(4, 3), (8, 16), (3, 1), (5, 7)])


# -- follow-up: what the V buys ----------------------------------------------------------------------------
V_MENU = {
    "ends_together": "rank 0 holds both the first stage (the embedding) and the last stage (the loss)",
    "local_turn": "the hand-off from stage pp-1 to stage pp stays inside one rank: no P2P message for it",
    "even_memory": "with M >= 2pp every rank's peak of live activations is the same",
    "tied_local": ("tied input and output embeddings sit on one rank, so their gradients are summed without a "
                   "collective between ranks"),
    "fewer_messages": "ZB-V sends fewer P2P messages per step than 1F1B",
    "no_split": "ZB-V needs no split backward: B is not cut into I and W",
    "no_idle": "with F = I = W no rank ever idles",
    "any_chunks": "the V works with any number of chunks per rank",
    "less_memory": "ZB-V's fullest rank keeps fewer activation bytes than 1F1B's fullest rank",
}
V_TRUE = {"ends_together", "local_turn", "even_memory", "tied_local"}
_V_WHY_FALSE = {
    "fewer_messages": ("a microbatch crosses the rank boundaries on the way down and again on the way back up, and "
                       "its gradient does the same: the V sends more P2P messages than 1F1B, not fewer (section 2)"),
    "no_split": "the zero bubble comes from moving the W ops into the gaps; without the split there is nothing to move",
    "no_idle": "the first microbatch still has to travel down the ranks, and no W op can fill that wait (section 3)",
    "any_chunks": "a V has exactly two legs: 2 chunks per rank, stages r and 2pp-1-r (PyTorch refuses any other)",
    "less_memory": ("a chunk-activation is half a rank's share: count the fullest rank's bytes from zbv_peaks and "
                    "compare them with 1F1B's rank 0"),
}


@check
def check_v_buys(v_buys) -> None:
    """Each statement judged on its own: every false one picked and every true one missed costs a quarter of the
    points (a quarter: there are four true ones, so picking nothing, or everything, earns nothing)."""
    if isinstance(v_buys, str):
        fail(f"v_buys is the string {describe(v_buys)}; give a set of V_MENU's keys (strings), even for one")
    if isinstance(v_buys, dict):
        fail("v_buys is a dict; give a set of V_MENU's keys (strings), not the statements")
    got = expect_choices(v_buys, V_MENU, "v_buys")
    wrong = sorted(got - V_TRUE)
    missing = V_TRUE - got
    failed = [f"v_buys includes {key!r} ({V_MENU[key]}), which is false: {_V_WHY_FALSE[key]}" for key in wrong]
    if missing:  # not named: the feedback would hand over the answer one statement per grade
        failed.append(f"v_buys misses {plural(len(missing), 'true statement')}: what does having stage 0 and "
                      "stage 2pp-1 on one rank, and the turn on one rank, change?")
    if failed:
        raise LabCheckFailed(listing(failed, limit=len(failed)),
                             lost=min(1.0, (len(wrong) + len(missing)) / len(V_TRUE)))


# -- follow-up: what PyTorch (and the kit) refuse ------------------------------------------------------------
def kit_refusal(name: str, pp: int, m: int, chunks: int) -> str | None:
    """``build_schedule``'s reason for refusing, or None when it accepts."""
    try:
        build_schedule(name, pp, m, chunks)
    except ScheduleConfigError as exc:
        return str(exc)
    return None


_ACCEPT_RULES = {  # the three rules v_accepted is made of: each is a part of its point
    "chunks": "chunks per rank",
    "zbv": "ZB-V's microbatches",
    "dualpipev": "DualPipe-V's microbatches",
}


def _rule(name: str, chunks: int) -> str:
    return "chunks" if chunks != 2 else ("zbv" if name == "zbv" else "dualpipev")


@check
def check_v_accepted(v_accepted, cases) -> None:
    """Three independent rules (the chunk count, ZB-V's M, DualPipe-V's M), each a part: a case tests the rule
    that decides it, and each rule fails on its first failing case."""
    if cases:
        name, pp, m, chunks = cases[0]
        first = call(v_accepted, name, pp, m, chunks, name="v_accepted")
        if not isinstance(first, bool):
            right = " (its truth value is right)" if bool(first) == (kit_refusal(name, pp, m, chunks) is None) else ""
            fail(f"v_accepted({name!r}, {pp}, {m}, {chunks}) = {describe(first)}: return a bool, True or False{right}")
    parts = Parts()
    for rule in _ACCEPT_RULES:
        ruled = [case for case in cases if _rule(case[0], case[3]) == rule]
        if not ruled:
            continue
        with parts.part():
            for name, pp, m, chunks in ruled:
                _accepted_case(v_accepted, name, pp, m, chunks)
    parts.done()


def _accepted_case(v_accepted, name: str, pp: int, m: int, chunks: int) -> None:
    got = call(v_accepted, name, pp, m, chunks, name="v_accepted")
    expect_type(got, bool, f"v_accepted({name!r}, {pp}, {m}, {chunks})")
    reason = kit_refusal(name, pp, m, chunks)
    if got == (reason is None):
        return
    label = f"v_accepted({name!r}, pp={pp}, M={m}, chunks={chunks}) = {got}"
    if reason is not None:
        fail(f"{label}, but the kit (like PyTorch) refuses it: {reason}")
    why = ("ZB-V and DualPipe-V do not need the same number of microbatches: check ZB-V's own rule"
           if name == "zbv" and m < 2 * pp else "it has 2 chunks per rank and enough microbatches")
    fail(f"{label}, but the kit accepts it: {why} {book('zero-bubble', 'Eight families side by side')}")


def hidden_accepted_cases(rng) -> list[tuple[str, int, int, int]]:
    def make(r):
        pp = r.randint(1, 6)
        return r.choice(["zbv", "dualpipev"]), pp, r.randint(1, 3 * pp), r.choice([1, 2, 2, 3])
    # each rule's boundaries first (DualPipe-V's with M >= 2: PyTorch's message for M = 1 says "1 microbatches")
    return drawn(rng, 4, make, fixed=[("zbv", 4, 8, 1), ("zbv", 4, 3, 2), ("zbv", 1, 1, 2), ("dualpipev", 4, 7, 2),
                                      ("dualpipev", 4, 8, 2), ("dualpipev", 4, 9, 2), ("dualpipev", 4, 4, 2)])
