"""M041 (lab 1): which schedule Megatron's entry point picks, how the three control flows differ, the callback
contract, and the phases of a rank.

Expected values come from the kit's own ``select_schedule`` and simulator, so a check can never disagree
with the book.
"""

from __future__ import annotations

from ...schedules import select_schedule
from ...schedules.select import MEGATRON_FUNCTIONS as MEGATRON
from ...sim import simulate
from ...grading.parts import Parts, plural
from .live import check_callback  # noqa: F401 -- a live-object check: it probes the kernel (live.py)
from .common import (
    LabCheckFailed,
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
)

FAMILIES = ("no-pipelining", "1f1b", "interleaved")


@check
def check_selection(choose, cases) -> None:
    for pp, vpp in cases:
        got = call(choose, pp, vpp, name="choose_schedule")
        want = select_schedule(pp, vpp).name
        if got == want:
            continue
        if isinstance(got, str) and got.rsplit(".", 1)[-1] in MEGATRON.values():
            fail(f"choose_schedule({pp}, {vpp}) returned a Megatron function name; return the kit's family name, a "
                 f"str: one of {', '.join(FAMILIES)}")
        if got not in FAMILIES:
            fail(f"choose_schedule({pp}, {vpp}) returned {describe(got)}; the answer is one of {', '.join(FAMILIES)}")
        if pp == 1:
            fail(f"choose_schedule(1, {vpp}) returned {got!r}: with one stage there is nothing to pipeline -- "
                 "Megatron ignores the virtual size and does not pipeline at all")
        if vpp == 1:
            fail(f"choose_schedule({pp}, 1) returned {got!r}: a virtual size of 1 is one chunk per rank -- revisit "
                 f"which virtual sizes make Megatron interleave {book('entry-point', 'The selection conditions')}")
        fail(f"choose_schedule({pp}, {vpp}) returned {got!r}: revisit which pp pipelines and which virtual size "
             f"interleaves {book('entry-point', 'The selection conditions')}")


def expected_differences() -> dict:
    out = {}
    for name, pp, vpp in (("no-pipelining", 1, None), ("1f1b", 4, None), ("interleaved", 4, 2)):
        result = simulate(select_schedule(pp, vpp)(8), fwd=1, bwd=2)
        out[name] = {"p2p_messages": len(result.transfers), "peak_rank0": result.peak_activations[0],
                     "bubble": round(result.bubble_fraction, 3)}
    return out


METRICS = ("p2p_messages", "peak_rank0", "bubble")


@check
def check_differences(differences) -> None:
    """Three independent measurements (one part each): the P2P count, rank 0's peak and the bubble, per family."""
    expect_keys(differences, FAMILIES, "differences")
    for name in FAMILIES:
        expect_keys(differences[name], METRICS, f"differences[{name!r}]")
    want = expected_differences()
    parts = Parts()
    for key in METRICS:
        with parts.part():
            for name in FAMILIES:
                got = expect_number(differences[name][key], f"differences[{name!r}][{key!r}]")
                exp = want[name][key]
                if close(got, exp, abs_=1e-3 if key == "bubble" else 1e-9):
                    continue
                hint = {"p2p_messages": " -- count len(result.transfers) of its simulation",
                        "peak_rank0": " -- read result.peak_activations[0] of its simulation",
                        "bubble": " -- read result.bubble_fraction of its simulation, rounded to 3 decimals"}[key]
                if key == "p2p_messages" and name != "no-pipelining" and got == exp / 2:
                    hint = " -- count both directions: activations forward and gradients backward"
                elif key == "peak_rank0" and name == "1f1b" and got == 8:
                    hint = (" -- that is GPipe's peak (all M); in 1F1B a backward frees a microbatch before rank 0 "
                            f"has forwarded them all {book('gpipe-1f1b', 'Activation lifetime')}")
                elif key == "peak_rank0" and name == "interleaved" and got == want["1f1b"][key]:
                    hint = (" -- that is 1F1B's peak; count chunk activations: with 2 chunks a rank holds more, "
                            "smaller ones")
                elif key == "bubble" and name == "no-pipelining":
                    hint = " -- one rank never waits for another"
                elif key == "bubble" and close(got, 100 * exp, abs_=0.1):
                    hint = " -- give a fraction between 0 and 1, not a percentage"
                # (the simulation's value is not printed: the student measures it)
                fail(f"differences[{name!r}][{key!r}] is {got:g}, not what its simulation gives{hint}")
    parts.done()


@check
def check_megatron_names(names) -> None:
    """One part per family: each name is looked up on its own."""
    if not isinstance(names, dict):
        fail(f"megatron_function must be a dict keyed by family ({', '.join(map(repr, FAMILIES))}) with the "
             f"function names as str values, got {type(names).__name__} {describe(names)}")
    expect_keys(names, FAMILIES, "megatron_function")
    parts = Parts()
    for family in FAMILIES:
        with parts.part():
            got = names[family]
            if not isinstance(got, str):
                fail(f"megatron_function[{family!r}] must be the function's name as a str, got "
                     f"{type(got).__name__} {describe(got)}")
            if got.strip().rsplit(".", 1)[-1] != MEGATRON[family]:  # the bare name, or the dotted one
                fail(f"megatron_function[{family!r}] is {describe(got)}; look for the function that "
                     f"get_forward_backward_func returns when the family is {family!r}")
    parts.done()


@check
def check_no_p2p(count) -> None:
    got = expect_number(count, "p2p_messages_pp1")
    if got != 0:
        fail(f"p2p_messages_pp1 is {got:g}: with pp = 1 the whole model is on one rank, so there is no "
             "neighbour to send to")


@check
def check_phases(phases, cases) -> None:
    for pp, m in cases:
        for rank in range(pp):
            got = call(phases, pp, m, rank, name="phases")
            expect_type(got, (tuple, list), f"phases({pp}, {m}, {rank})")
            if len(got) != 3:
                fail(f"phases({pp}, {m}, {rank}) must be (warmup, steady, cooldown), got {describe(got)}")
            warm = min(pp - rank - 1, m)
            want = (warm, m - warm, warm)
            if tuple(got) == want:
                continue
            if got[0] == pp - rank and warm == pp - rank - 1:
                fail(f"phases({pp}, {m}, {rank}): warmup {got[0]} is one too many -- the last stage runs no "
                     "warmup forward: count the stages a rank's warmup fills before its first gradient can come back "
                     f"{book('gpipe-1f1b', 'The three phases, per rank')}")
            if got[0] == pp - rank - 1 and pp - rank - 1 > m:
                there = plural(m, "microbatch", "microbatches")
                fail(f"phases({pp}, {m}, {rank}): warmup {got[0]} is more than the {there} there are: a short step "
                     f"caps the warmup {book('gpipe-1f1b', 'The three phases, per rank')}")
            if sum(got) != m + warm:
                fail(f"phases({pp}, {m}, {rank}) = {tuple(got)}: warmup + steady must equal M = {m} (each "
                     "microbatch's forward is in warmup or steady) and cooldown equals warmup")
            fail(f"phases({pp}, {m}, {rank}) = {tuple(got)} are not rank {rank}'s phase lengths: count its warmup "
                 f"forwards first {book('gpipe-1f1b', 'The three phases, per rank')}")


@check
def check_loss_rank(loss_rank, pps) -> None:
    for pp in pps:
        got = call(loss_rank, pp, name="loss_rank")
        if got != select_schedule(pp).loss_rank:
            fail(f"loss_rank({pp}) is {describe(got)}: the loss is computed where the output layer is -- which "
                 f"rank holds the last stage? {book('entry-point', 'Three families, three control flows')}")


def _own_loss_rank(loss_rank, pp):
    """The student's own ``loss_rank(pp)`` (None when it raises or is no int): a ``returns_losses`` built on it
    is judged against it, so a wrong ``loss_rank`` costs its own point only."""
    if loss_rank is None:
        return None
    try:
        got = call(loss_rank, pp, name="loss_rank")
    except LabCheckFailed:
        return "raises"
    return got if isinstance(got, int) and not isinstance(got, bool) else None


@check
def check_returns_losses(returns_losses, pps, loss_rank=None) -> None:
    for pp in pps:
        kit = select_schedule(pp).loss_rank
        own = _own_loss_rank(loss_rank, pp)
        for rank in range(pp):
            try:
                got = call(returns_losses, pp, rank, name="returns_losses")
            except LabCheckFailed:
                if own == "raises":
                    continue  # it calls the student's loss_rank, which fails here: m041_follow_loss_rank's point
                raise
            want = rank == kit
            if isinstance(got, bool) and got == want:
                continue
            if isinstance(own, int) and own != kit and isinstance(got, bool) and got == (rank == own):
                continue  # consistent with the student's own loss_rank: the mistake is counted there
            if not isinstance(got, bool):
                fail(f"returns_losses({pp}, {rank}) must be True or False (a bool), got "
                     f"{type(got).__name__} {describe(got)}")
            fail(f"returns_losses({pp}, {rank}) is {describe(got)}: only the rank that computes the loss returns it; "
                 "every other rank returns an empty list -- it only moves activations and gradients "
                 f"{book('entry-point', 'Three families, three control flows')}")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_selection_cases(rng) -> list:
    """(pp, vpp): pp = 1 with a virtual size, vpp = 1, a large pp without one first; then three drawn."""
    return drawn(rng, 3, lambda r: (r.randint(2, 16), r.choice([None, 1, r.randint(2, 8)])),
                 fixed=[(1, 4), (2, 1), (16, None)])


def hidden_phases_cases(rng) -> list:
    """(pp, M): M < pp - 1 (warmup capped by M), pp = 1, M = 1 first; then three drawn."""
    return drawn(rng, 3, lambda r: (r.randint(2, 8), r.randint(1, 16)), fixed=[(4, 2), (1, 4), (3, 1)])


def hidden_pps(rng) -> list:
    """Pipeline sizes other than the visible 1, 2, 4, 8: first 3 (a table of the visible sizes fails there) and 16
    (beyond one 8-GPU node), then three drawn."""
    return drawn(rng, 3, lambda r: r.choice([5, 6, 7, 9, 12, 24, 32]), fixed=[3, 16])
