"""M051 (lab 8): the interleaved (virtual) pipeline -- the mapping, the bubble, what it costs, and when
Megatron refuses it.

Expected values come from the kit: the virtual-stage mapping and layouts (``stage_owner``,
``even_layout``), Megatron's warmup count and refusals (``interleaved_warmup``, the
``ScheduleConfigError`` the generator raises), the simulator's bubbles and transfers.  The checks name the
usual mistakes: a contiguous chunk mapping, the interview question bank's ``(1/v)`` bubble, ``v(pp-1)`` boundaries.
"""

from __future__ import annotations

from fractions import Fraction

from ...layout import even_layout
from ...schedules import ScheduleConfigError, build_schedule, interleaved_warmup, stage_owner
from ...sim import simulate
from .common import (
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_keys,
    expect_number,
    expect_type,
    fail,
    first_match,
)

VIRTUAL = book("interleaved", "Virtual stages")  # where the book teaches what these checks find
EXACTLY = book("interleaved", "The bubble, exactly")
COSTS = book("interleaved", "What it costs")
VS = (1, 2, 4)
PEAK_CASE = (4, 8)  # pp, M of the peak_share question
LATENCY_CASE = (4, 8)  # pp, M of the break-even question



def _schedule(pp: int, m: int, v: int = 1, name: str | None = None):
    if name is None:
        name = "1f1b" if v == 1 else "interleaved"
    return build_schedule(name, pp, m, v if name == "interleaved" else None)



# -- M051 main: definition --------------------------------------------------------------------------
@check
def check_owner(owner, cases) -> None:
    for pp, v in cases:
        stages = range(pp * v)
        got = [call(owner, k, pp, name="owner") for k in stages]
        got = [tuple(g) if isinstance(g, list) else g for g in got]
        want = [stage_owner(k, pp) for k in stages]
        if got == want:
            continue
        k = next(k for k in stages if got[k] != want[k])
        if got == [(c, r) for r, c in want]:
            why = "rank and chunk are swapped: the pair is (rank, chunk)"
        elif got == [(k_ // v, k_ % v) for k_ in stages]:
            why = ("that keeps consecutive stages on one rank (contiguous chunks); Megatron deals the stages "
                   "round-robin over the ranks")
        else:
            why = "Megatron deals the virtual stages round-robin over the ranks"
        fail(f"owner({k}, pp={pp}) = {describe(got[k])} (with {v} chunks per rank) is not virtual stage {k}'s "
             f"(rank, chunk): {why} {VIRTUAL}")


@check
def check_rank_layers(rank_layers, cases) -> None:
    for pp, v, layers in cases:
        layout = even_layout(layers, pp * v)
        for r in range(pp):
            got = call(rank_layers, r, pp, v, layers, name="rank_layers")
            expect_type(got, (list, tuple, range), f"rank_layers({r}, {pp}, {v}, {layers}) (a list of layer indices, "
                        "ascending)")
            want = [i for k, st in enumerate(layout.stages) if layout.owner(k, pp)[0] == r for i in st.layers]
            if list(got) == want:
                continue
            if sorted(got) == want:
                fail(f"rank_layers({r}, pp={pp}, v={v}, layers={layers}) holds the right layers but not in ascending "
                     "order: return them sorted")
            per_rank = layers // pp
            if sorted(got) == list(range(r * per_rank, (r + 1) * per_rank)):
                why = (f"that is the non-interleaved split (one contiguous block); with v={v} a rank holds one block "
                       f"per chunk, pp stages apart {VIRTUAL}")
            elif len(got) != len(want):
                why = "every rank holds as many layers with interleaving as without"
            else:
                why = f"these are not the layers of rank {r}'s chunks {VIRTUAL}"
            fail(f"rank_layers({r}, pp={pp}, v={v}, layers={layers}) = {describe(list(got))}: {why}")


# -- M051 main: mechanism -----------------------------------------------------------------------------
@check
def check_bubble(interleaved_bubble, cases) -> None:
    for pp, m, v in cases:
        r = simulate(_schedule(pp, m, v), fwd=Fraction(1), bwd=Fraction(2))
        got = expect_number(call(interleaved_bubble, pp, m, v, name="interleaved_bubble"),
                            f"interleaved_bubble({pp}, {m}, {v})")
        want = r.bubble_fraction
        if close(got, float(want)):
            continue
        why = first_match(got, [
            (Fraction(1, v) * Fraction(pp - 1, m + pp - 1),
             ("that is the interview question bank's model answer (1/v)(pp-1)/(M+pp-1): only the idle part "
              "shrinks, not the work")),
            (Fraction(pp - 1, v * m), ("(pp-1)/(vM) is bubble over the ideal time (Megatron's ratio), not the idle "
                                       "share of the step")),
            (Fraction(pp - 1, m + pp - 1), "that is the non-interleaved bubble: v did not enter"),
            (Fraction(pp * v - 1, v * m + pp * v - 1),
             "fill and drain cross pp-1 *ranks*, each hop one chunk long, not pp*v-1 chunks"),
        ]) or "idle time over pp x makespan; fill and drain take chunk-sized steps"
        fail(f"interleaved_bubble({pp}, {m}, {v}) = {got:.4g} is not the idle share of the simulated step: {why} "
             f"{EXACTLY}")


# -- M051 main: costs -----------------------------------------------------------------------------------
@check
def check_warmup(warmup, cases) -> None:
    for pp, m, v in cases:
        for r in range(pp):
            got = call(warmup, pp, r, m, v, name="warmup")
            want = interleaved_warmup(pp, r, m, v, pp)
            if got == want:
                continue
            raw = 2 * (pp - r - 1) + (v - 1) * pp
            if got == raw and raw > m * v:
                why = (f"{raw} is more than the forwards there are (one per microbatch and chunk): a rank cannot warm "
                       "up with more (then it runs everything as warmup and cooldown)")
            elif want == m * v and got == m * v - 1:
                why = (f"when rank {r} runs all its chunk forwards before its first backward, every one of them is "
                       "warmup (there is no steady state) -- counting the ops before the first forward that is "
                       "followed by a backward gives one less here")
            elif got == min(2 * (pp - r) + (v - 1) * pp, m * v):
                why = "one hop too many on each side: count the hops from rank r to the last rank"
            elif got == min((pp - r - 1) + (v - 1) * pp, m * v):
                why = ("rank r needs its first chunk's forward to travel down to the last rank and the gradient to "
                       "come back before it can run a backward")
            elif got == min(2 * (pp - r - 1), m * v):
                why = "the forwards of the first group's other chunks are missing"
            elif got == min(pp - r - 1, m):
                why = "that is non-interleaved 1F1B's warmup; interleaved counts chunk forwards"
            else:
                why = f"count the chunk forwards rank {r} runs before its first backward (the microbatch group is pp)"
            fail(f"warmup(pp={pp}, rank={r}, M={m}, v={v}) = {describe(got)}: {why} {COSTS}")


@check
def check_p2p_messages(p2p_messages, cases) -> None:
    for pp, m, v in cases:
        want = len(simulate(_schedule(pp, m, v)).transfers)
        got = call(p2p_messages, pp, m, v, name="p2p_messages")
        if got == want:
            continue
        if got == 2 * m * v * (pp - 1):
            why = "v(pp-1) undercounts the boundaries: it misses the wrap-arounds from the last rank back to rank 0"
        elif got == m * (pp * v - 1):
            why = "count both directions: an activation forward and its gradient backward at every boundary"
        elif got == 2 * m * (pp - 1):
            why = "that is the non-interleaved count; every extra chunk adds pp more boundaries"
        else:
            why = "count one message per microbatch, direction and boundary between virtual stages"
        fail(f"p2p_messages(pp={pp}, M={m}, v={v}) = {describe(got)} is not the simulated step's transfers: {why} "
             f"{COSTS}")


def expected_peak_share() -> dict[int, float]:
    pp, m = PEAK_CASE
    return {v: simulate(_schedule(pp, m, v)).peak_activations[0] / v for v in VS}


@check
def check_peak_share(peak_share) -> None:
    expect_keys(peak_share, VS, "peak_share")
    want = expected_peak_share()
    pp, m = PEAK_CASE
    for v in VS:
        got = expect_number(peak_share[v], f"peak_share[{v}]")
        if close(got, want[v]):
            continue
        chunks = simulate(_schedule(pp, m, v)).peak_activations[0]
        why = first_match(got, [
            (chunks, "that counts chunk activations; one chunk holds 1/v of a rank's layers, so divide by v"),
            (m, "that is GPipe's peak, all M microbatches"),
            (pp / v, "interleaving does not divide 1F1B's memory by v: more chunks are in flight"),
        ]) or "rank 0's peak live microbatch-chunks, in units of a whole microbatch's activations"
        fail(f"peak_share[{v}] = {got:g} is not rank 0's peak share: {why} {COSTS}")


# -- M051 main: applicability -------------------------------------------------------------------------
def kit_refusal(pp: int, m: int, v: int) -> str | None:
    try:
        build_schedule("interleaved", pp, m, v)
    except ScheduleConfigError as exc:
        return str(exc)
    return None


@check
def check_accepted(accepted, cases) -> None:
    for pp, m, v in cases:
        got = call(accepted, pp, m, v, name="accepted")
        expect_type(got, bool, f"accepted({pp}, {m}, {v})")
        refusal = kit_refusal(pp, m, v)
        if got == (refusal is None):
            continue
        if refusal is None:
            fail(f"accepted(pp={pp}, M={m}, v={v}) is False, but Megatron (and the kit) run it: revisit its "
                 f"conditions on pp, v and M {book('interleaved', 'The group size: depth-first or breadth-first')}")
        fail(f"accepted(pp={pp}, M={m}, v={v}) is True, but the kit refuses it: {refusal}")


# -- M051 follow-up -------------------------------------------------------------------------------------
def expected_facts(pp: int, v: int, layers: int) -> dict[str, int]:
    sched = _schedule(pp, pp, v)
    layout = even_layout(layers, sched.stages)
    mine = [st for k, st in enumerate(layout.stages) if layout.owner(k, pp)[0] == 0]
    return {"gpus": sched.pp, "virtual_stages": sched.stages, "layers_per_rank": sum(len(st.layers) for st in mine),
            "layers_per_chunk": len(mine[0].layers)}


@check
def check_facts(vpp_facts, cases) -> None:
    for pp, v, layers in cases:
        got = call(vpp_facts, pp, v, layers, name="vpp_facts")
        label = f"vpp_facts(pp={pp}, v={v}, layers={layers})"
        want = expected_facts(pp, v, layers)
        expect_keys(got, want, label)
        for key, exp in want.items():
            value = got[key]
            if value == exp:
                continue
            why = {
                "gpus": "a virtual pipeline adds no GPUs: the same pp ranks each hold v chunks" if value == pp * v
                else "one GPU per pipeline rank",
                "virtual_stages": "pp ranks x v chunks each",
                "layers_per_rank": "each rank still holds layers / pp layers, in v pieces",
                "layers_per_chunk": "layers / (pp x v): a chunk is 1/v of a rank's share",
            }[key]
            fail(f"{label}[{key!r}] = {describe(value)}: {why} {VIRTUAL}")


def expected_fill(pp: int, v: int, f) -> float:
    r = simulate(_schedule(pp, pp, v), fwd=f, bwd=2 * f)
    return min(e.start for e in r.events if e.rank == pp - 1 and e.op.kind == "F")


@check
def check_fill(fill_time, cases) -> None:
    for pp, v, f in cases:
        got = expect_number(call(fill_time, pp, v, f, name="fill_time"), f"fill_time({pp}, {v}, {f})")
        want = expected_fill(pp, v, Fraction(f))
        if close(got, float(want)):
            continue
        why = first_match(got, [
            ((pp - 1) * f, "v did not enter: each hop is one chunk, f/v, not a whole stage"),
            (Fraction(pp * v - 1) * f / v, ("that is when the last *virtual* stage starts; the last rank first gets "
                                            "work at virtual stage pp-1")),
            (pp * Fraction(f) / v, "pp hops instead of pp-1"),
        ]) or "count the hops to the last rank and what each one costs"
        fail(f"fill_time(pp={pp}, v={v}, f={f}) = {got:g} is not when the last rank starts in the simulation: {why} "
             f"{EXACTLY}")


def _makespan(pp: int, m: int, v: int, latency: float) -> float:
    return simulate(_schedule(pp, m, v), fwd=1, bwd=2, p2p_latency=latency).makespan


def expected_breakeven(tol: float = 1e-6) -> float:
    pp, m = LATENCY_CASE
    lo, hi = 0.0, 2.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if _makespan(pp, m, 4, mid) < _makespan(pp, m, 1, mid):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@check
def check_breakeven(breakeven_latency) -> None:
    got = expect_number(breakeven_latency, "breakeven_latency")
    want = expected_breakeven()
    if abs(got - want) <= 0.01:
        return
    pp, m = LATENCY_CASE
    spans = {v: _makespan(pp, m, v, got) for v in VS}
    state = "still faster" if spans[4] < spans[1] else "already slower"
    fail(f"breakeven_latency = {got:g}: at that latency v=4 takes {spans[4]:.2f} against {spans[1]:.2f} for v=1, "
         f"{state}. Simulate both over a range of p2p_latency (or bisect) to find where they cross, to 0.01")


def expected_choice(pp: int, m: int, latency: float) -> int:
    spans = {v: _makespan(pp, m, v, latency) for v in VS if v == 1 or kit_refusal(pp, m, v) is None}
    return min(spans, key=lambda v: (spans[v], v))


@check
def check_choose_v(choose_v, cases) -> None:
    for pp, m, latency in cases:
        got = call(choose_v, pp, m, latency, name="choose_v")
        want = expected_choice(pp, m, latency)
        if got == want:
            continue
        if got in VS and got != 1 and kit_refusal(pp, m, got):
            fail(f"choose_v(pp={pp}, M={m}, latency={latency}) = {got}, but Megatron refuses v={got} here: "
                 f"{kit_refusal(pp, m, got)}")
        fail(f"choose_v(pp={pp}, M={m}, latency={latency}) = {describe(got)} is not the fastest option Megatron "
             f"accepts here: simulate each {COSTS}")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def _interleaved_case(r, v=None):
    """(pp, M, v) that Megatron runs: pp >= 2, M a multiple of pp (v = 1 is plain 1F1B)."""
    pp = r.randint(2, 8)
    return pp, pp * r.randint(1, 4), r.randint(1, 4) if v is None else v


def hidden_owner_cases(rng) -> list:
    return drawn(rng, 3, lambda r: (r.randint(2, 8), r.randint(2, 4)), fixed=[(3, 3)])


def hidden_rank_layers_cases(rng) -> list:
    def make(r):
        pp, v = r.randint(2, 8), r.randint(2, 4)
        return pp, v, pp * v * r.randint(1, 3)
    return drawn(rng, 3, make, fixed=[(3, 2, 12)])


def hidden_bubble_cases(rng) -> list:
    return drawn(rng, 3, _interleaved_case, fixed=[(4, 8, 1), (2, 2, 4)])


def hidden_warmup_cases(rng) -> list:
    """Interleaved cases; (4, 4, 2) and (3, 3, 2) reach the M x v cap on the first ranks."""
    return drawn(rng, 3, lambda r: _interleaved_case(r, r.randint(2, 4)), fixed=[(4, 4, 2), (3, 3, 2)])


def hidden_accepted_cases(rng) -> list:
    return drawn(rng, 4, lambda r: (r.randint(1, 8), r.randint(1, 24), r.randint(1, 4)),
                 fixed=[(1, 4, 2), (4, 8, 1), (4, 2, 2), (4, 6, 2)])


def hidden_facts_cases(rng) -> list:
    def make(r):
        pp, v = r.randint(2, 8), r.randint(1, 4)
        return pp, v, pp * v * r.randint(1, 4)
    return drawn(rng, 2, make, fixed=[(4, 1, 16)])


def hidden_fill_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (r.randint(2, 8), r.randint(1, 4), r.randint(1, 3)), fixed=[(4, 1, 2)])


def hidden_choose_v_cases(rng) -> list:
    def make(r):
        pp = r.randint(2, 8)
        return pp, pp * r.randint(1, 4), r.choice([0.0, 0.05, 0.1, 0.2, 0.5, 1.0])
    return drawn(rng, 3, make, fixed=[(4, 6, 0.0)])
