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

from fractions import Fraction

from ...layout import even_layout
from ...schedules import ScheduleConfigError, build_schedule, stage_owner, virtual_stage
from ...sim import simulate
from ...sim.compare import p2p_messages
from .common import (
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


def _sim(name: str, pp: int, m: int):
    return simulate(build_schedule(name, pp, m), **UNIT_COSTS)


# -- main: stages in a V --------------------------------------------------------------------------------
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
                    (2 * pp - rank, "one too far: the 2pp stages are numbered 0 .. 2pp-1, and rank 0 holds the last"),
                ])
                fail(f"v_stage(rank={rank}, chunk={chunk}, pp={pp}) = {describe(got)}, expected {want}: "
                     f"{why or 'rank r holds the stage r on the way down and one stage on the way back up'}")


@check
def check_v_owner(v_owner, pps) -> None:
    for pp in pps:
        for stage in range(2 * pp):
            got = call(v_owner, stage, pp, name="v_owner")
            expect_type(got, (tuple, list), f"v_owner({stage}, {pp})")
            if len(got) != 2:
                fail(f"v_owner({stage}, {pp}) = {describe(got)}: return a pair (rank, chunk)")
            got = tuple(expect_int(x, f"v_owner({stage}, {pp}) entry") for x in got)
            want = stage_owner(stage, pp, "v")
            if got == want:
                continue
            if got == stage_owner(stage, pp):
                why = (f"that is the looped placement (stage % pp, stage // pp); in a V stage {stage} is on rank "
                       f"{want[0]}")
            elif got == want[::-1]:
                why = "return (rank, chunk), in that order"
            elif got[0] == want[0]:
                why = "the rank is right; the chunk is the stage's position among the rank's two stages"
            else:
                why = "the stages go down the ranks 0 .. pp-1, then back up from rank pp-1 to rank 0"
            fail(f"v_owner(stage={stage}, pp={pp}) = {describe(got)}, expected {want}: {why}")


def expected_rank_layers(rank: int, pp: int, layers: int, placement: str = "v") -> list[int]:
    """The layers ``rank`` holds when ``layers`` are split evenly over 2pp stages placed by ``placement``."""
    stages = even_layout(layers, 2 * pp).stages
    return sorted(i for chunk in (0, 1) for i in stages[virtual_stage(rank, chunk, pp, placement)].layers)


@check
def check_v_rank_layers(v_rank_layers, cases) -> None:
    for pp, layers in cases:
        for rank in range(pp):
            got = call(v_rank_layers, rank, pp, layers, name="v_rank_layers")
            expect_type(got, (list, tuple, range), f"v_rank_layers({rank}, {pp}, {layers})")
            got = list(got)
            want = expected_rank_layers(rank, pp, layers)
            if got == want:
                continue
            if sorted(got) == want:
                why = "the right layers, but return them sorted"
            elif got == expected_rank_layers(rank, pp, layers, "looped"):
                why = "those are the looped placement's layers (stages r and r + pp); a V holds stages r and 2pp-1-r"
            elif got == list(even_layout(layers, pp).stages[rank].layers):
                why = "a contiguous block is plain 1F1B's split; in a V each rank holds two separate stages"
            else:
                why = f"split the {layers} layers evenly over 2pp = {2 * pp} stages; rank {rank} holds two of them"
            fail(f"v_rank_layers(rank={rank}, pp={pp}, layers={layers}) = {describe(got)}, expected {want}: {why}")


def hidden_pp_cases(rng) -> list[int]:
    return drawn(rng, 2, lambda r: r.randint(2, 12), fixed=[1])


def hidden_layer_cases(rng) -> list[tuple[int, int]]:
    def make(r):
        pp = r.randint(2, 6)
        return pp, 2 * pp * r.randint(1, 4)
    return drawn(rng, 2, make, fixed=[(1, 4)])


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
        ]) or "count the tensors that cross between two ranks in one step, forward activations and backward gradients"
        fail(f"v_messages(pp={pp}, M={m}) = {got}, the kit's message plan gives {want}: {why}")


def hidden_message_cases(rng) -> list[tuple[int, int]]:
    return drawn(rng, 3, lambda r: (r.randint(2, 8), r.randint(1, 32)), fixed=[(1, 4)])


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
            (Fraction(pp - 1, 3 * m + pp - 1), ("a rank works 2M x (F + I + W) = 6M units (both chunks) and idles "
                                                "pp-1 of them")),
        ]) or "simulate(build_schedule('zbv', pp, M), fwd=2, bwd=4) and look at the idle time of each rank"
        fail(f"zbv_bubble(pp={pp}, M={m}) = {got:.6g}, the simulator gives {want} = {float(want):.6g}: {why}")


@check
def check_zbv_speedup(zbv_speedup, cases) -> None:
    for pp, m in cases:
        _in_domain(pp, m)
        got = expect_number(call(zbv_speedup, pp, m, name="zbv_speedup"), f"zbv_speedup({pp}, {m})")
        one, v = _sim("1f1b", pp, m), _sim("zbv", pp, m)
        want = one.makespan / v.makespan
        if close(got, float(want)):
            continue
        why = first_match(got, [
            (1 / want, "upside down: 1F1B's step time over ZB-V's (above 1 when ZB-V is faster)"),
            (one.bubble_fraction / v.bubble_fraction, "that is the ratio of the bubbles; compare the step times"),
            (Fraction(m + pp - 1, m), ("that compares 1F1B with no bubble at all; ZB-V still idles pp-1 units per "
                                       "rank")),
            (one.makespan - v.makespan, "that is the difference of the step times; give their ratio"),
        ]) or f"1F1B's step takes {one.makespan} units and ZB-V's {v.makespan} here"
        fail(f"zbv_speedup(pp={pp}, M={m}) = {got:.6g}, expected {float(want):.6g}: {why}")


def hidden_bubble_cases(rng) -> list[tuple[int, int]]:
    def make(r):
        pp = r.randint(2, 8)
        return pp, r.randint(2 * pp, 5 * pp)
    return drawn(rng, 3, make, fixed=[(8, 16)])


# -- follow-up: memory ------------------------------------------------------------------------------------
@check
def check_zbv_peaks(zbv_peaks, cases) -> None:
    for pp, m in cases:
        got = call(zbv_peaks, pp, m, name="zbv_peaks")
        expect_type(got, (list, tuple), f"zbv_peaks({pp}, {m})")
        got = list(got)
        want = simulate(build_schedule("zbv", pp, m)).peak_activations
        if got == want:
            continue
        one = simulate(build_schedule("1f1b", pp, m)).peak_activations
        if len(got) != pp:
            why = f"give one count per rank ({pp})"
        elif got == one:
            why = "that is 1F1B's min(pp - r, M); count chunk-activations of the V"
        elif got == [2 * n for n in one]:
            why = ("the V is not two copies of 1F1B: rank r's second stage is 2pp-1-r, so the deepest rank is the "
                   "last one, where the V turns, not rank 0")
        elif got == [2 * pp] * pp:
            why = "that holds for M >= 2pp; with fewer microbatches there are fewer to keep"
        else:
            rank = next(r for r in range(pp) if got[r] != want[r])
            why = f"rank {rank} keeps at most {want[rank]} chunk-activations at once"
        fail(f"zbv_peaks(pp={pp}, M={m}) = {describe(got)}, the simulator gives {want}: {why}")


def hidden_peak_cases(rng) -> list[tuple[int, int]]:
    def make(r):
        pp = r.randint(2, 8)
        return pp, r.randint(1, 3 * pp)
    return drawn(rng, 3, make, fixed=[(4, 3), (8, 16)])


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
    "fewer_messages": ("the V crosses every rank boundary twice per direction: 4M(pp-1) messages against 1F1B's "
                       "2M(pp-1)"),
    "no_split": "the zero bubble comes from moving the W ops into the gaps; without the split there is nothing to move",
    "no_idle": "pp-1 units of fill remain on every rank (section 3)",
    "any_chunks": "a V has exactly two legs: 2 chunks per rank, stages r and 2pp-1-r (PyTorch refuses any other)",
    "less_memory": ("2pp chunk-activations of half a rank's share each: the same bytes as 1F1B's rank 0, only "
                    "now on every rank"),
}


@check
def check_v_buys(v_buys) -> None:
    got = expect_choices(v_buys, V_MENU, "v_buys")
    wrong = sorted(got - V_TRUE)
    if wrong:
        fail(f"v_buys includes {wrong[0]!r} ({V_MENU[wrong[0]]}), which is false: {_V_WHY_FALSE[wrong[0]]}")
    missing = V_TRUE - got
    if missing:  # not named: the feedback would hand over the answer one statement per grade
        fail(f"v_buys misses {len(missing)} of the true statement{'s' if len(missing) > 1 else ''}: what does "
             "having stage 0 and stage 2pp-1 on one rank, and the turn on one rank, change?")


# -- follow-up: what PyTorch (and the kit) refuse ------------------------------------------------------------
def kit_refusal(name: str, pp: int, m: int, chunks: int) -> str | None:
    """``build_schedule``'s reason for refusing, or None when it accepts."""
    try:
        build_schedule(name, pp, m, chunks)
    except ScheduleConfigError as exc:
        return str(exc)
    return None


@check
def check_v_accepted(v_accepted, cases) -> None:
    for name, pp, m, chunks in cases:
        got = call(v_accepted, name, pp, m, chunks, name="v_accepted")
        expect_type(got, bool, f"v_accepted({name!r}, {pp}, {m}, {chunks})")
        reason = kit_refusal(name, pp, m, chunks)
        if got == (reason is None):
            continue
        label = f"v_accepted({name!r}, pp={pp}, M={m}, chunks={chunks}) = {got}"
        if reason is not None:
            fail(f"{label}, but the kit (like PyTorch) refuses it: {reason}")
        why = ("ZB-V takes any M >= 1; it is DualPipe-V that needs M >= 2pp" if name == "zbv" and m < 2 * pp
               else "it has 2 chunks per rank and enough microbatches")
        fail(f"{label}, but the kit accepts it: {why}")


def hidden_accepted_cases(rng) -> list[tuple[str, int, int, int]]:
    def make(r):
        pp = r.randint(1, 6)
        return r.choice(["zbv", "dualpipev"]), pp, r.randint(1, 3 * pp), r.choice([1, 2, 2, 3])
    return drawn(rng, 4, make, fixed=[("zbv", 4, 3, 2), ("dualpipev", 4, 7, 2), ("dualpipev", 4, 8, 2)])
