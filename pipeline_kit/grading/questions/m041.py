"""M041 (lab 1): which schedule Megatron's entry point picks, how the three control flows differ, the callback
contract, and the phases of a rank.

Expected values come from the kit's own ``select_schedule`` and simulator, so a check can never disagree
with the book.
"""

from __future__ import annotations

from ...schedules import select_schedule
from ...sim import simulate
from .live import check_callback  # noqa: F401 -- a live-object check: it probes the kernel (live.py)
from .common import (
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
MEGATRON = {
    "no-pipelining": "forward_backward_no_pipelining",
    "1f1b": "forward_backward_pipelining_without_interleaving",
    "interleaved": "forward_backward_pipelining_with_interleaving",
}


@check
def check_selection(choose, cases) -> None:
    for pp, vpp in cases:
        got = call(choose, pp, vpp, name="choose_schedule")
        want = select_schedule(pp, vpp).name
        if got == want:
            continue
        if got not in FAMILIES:
            fail(f"choose_schedule({pp}, {vpp}) returned {describe(got)}; the answer is one of {', '.join(FAMILIES)}")
        if pp == 1:
            fail(f"choose_schedule(1, {vpp}) returned {got!r}: with one stage there is nothing to pipeline -- "
                 "Megatron ignores the virtual size and runs forward_backward_no_pipelining")
        if vpp == 1:
            fail(f"choose_schedule({pp}, 1) returned {got!r}: a virtual size of 1 is one chunk per rank, so "
                 "Megatron runs the non-interleaved 1F1B ('1f1b')")
        fail(f"choose_schedule({pp}, {vpp}) returned {got!r}, expected {want!r}: pp > 1 pipelines, and only a "
             "virtual size above 1 interleaves")


def expected_differences() -> dict:
    out = {}
    for name, pp, vpp in (("no-pipelining", 1, None), ("1f1b", 4, None), ("interleaved", 4, 2)):
        result = simulate(select_schedule(pp, vpp)(8), fwd=1, bwd=2)
        out[name] = {"p2p_messages": len(result.transfers), "peak_rank0": result.peak_activations[0],
                     "bubble": round(result.bubble_fraction, 3)}
    return out


@check
def check_differences(differences) -> None:
    expect_keys(differences, FAMILIES, "differences")
    want = expected_differences()
    for name in FAMILIES:
        row = differences[name]
        expect_keys(row, ("p2p_messages", "peak_rank0", "bubble"), f"differences[{name!r}]")
        for key in ("p2p_messages", "peak_rank0", "bubble"):
            got = expect_number(row[key], f"differences[{name!r}][{key!r}]")
            exp = want[name][key]
            if close(got, exp, abs_=1e-3 if key == "bubble" else 1e-9):
                continue
            hint = ""
            if key == "p2p_messages" and name == "1f1b" and got == exp / 2:
                hint = " -- count both directions: activations forward and gradients backward"
            elif key == "peak_rank0" and name == "1f1b" and got == 8:
                hint = " -- that is GPipe's peak (all M); 1F1B's rank 0 holds only pp microbatches"
            elif key == "peak_rank0" and name == "interleaved":
                hint = " -- count chunk activations: with 2 chunks a rank holds more, smaller ones"
            elif key == "bubble" and name == "no-pipelining":
                hint = " -- one rank never waits for another"
            fail(f"differences[{name!r}][{key!r}] is {got:g}, but the simulation gives {exp:g}{hint}")


@check
def check_megatron_names(names) -> None:
    if not isinstance(names, dict):
        fail(f"megatron_function must be a dict keyed by family ({', '.join(map(repr, FAMILIES))}), got "
             f"{type(names).__name__} {describe(names)}")
    expect_keys(names, FAMILIES, "megatron_function")
    for family in FAMILIES:
        got = names[family]
        if isinstance(got, str) and got.strip().rsplit(".", 1)[-1] == MEGATRON[family]:
            continue  # the bare name, or the dotted one (megatron.core.pipeline_parallel.schedules.<name>)
        if got != MEGATRON[family]:
            fail(f"megatron_function[{family!r}] is {describe(got)}; look for the function that "
                 f"get_forward_backward_func returns when the family is {family!r}")


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
                     f"warmup forward, so rank r runs pp - r - 1 = {warm}")
            if got[0] == pp - rank - 1 and pp - rank - 1 > m:
                fail(f"phases({pp}, {m}, {rank}): warmup {got[0]} is more than the {m} microbatches there are; "
                     f"it is min(pp - rank - 1, M) = {warm}")
            if sum(got) != m + warm:
                fail(f"phases({pp}, {m}, {rank}) = {tuple(got)}: warmup + steady must equal M = {m} (each "
                     "microbatch's forward is in warmup or steady) and cooldown equals warmup")
            fail(f"phases({pp}, {m}, {rank}) = {tuple(got)}, expected {want}")


@check
def check_loss_rank(loss_rank, pps) -> None:
    for pp in pps:
        got = call(loss_rank, pp, name="loss_rank")
        if got != select_schedule(pp).loss_rank:
            fail(f"loss_rank({pp}) is {describe(got)}: the loss is computed where the output layer is, on the "
                 f"last stage, rank {pp - 1}")


@check
def check_returns_losses(returns_losses, pps) -> None:
    for pp in pps:
        for rank in range(pp):
            got = call(returns_losses, pp, rank, name="returns_losses")
            want = rank == select_schedule(pp).loss_rank
            if bool(got) != want or not isinstance(got, bool):
                fail(f"returns_losses({pp}, {rank}) is {describe(got)}, expected {want}: every other rank "
                     "returns an empty list; it only moves activations and gradients")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_selection_cases(rng) -> list:
    return drawn(rng, 3, lambda r: (r.randint(2, 16), r.choice([None, 1, r.randint(2, 8)])),
                 fixed=[(1, 4), (2, 1), (16, None)])


def hidden_phases_cases(rng) -> list:
    return drawn(rng, 3, lambda r: (r.randint(2, 8), r.randint(1, 16)), fixed=[(4, 2), (1, 4)])


def hidden_pps(rng) -> list:
    """Pipeline sizes other than the visible 1, 2, 4, 8."""
    return drawn(rng, 3, lambda r: r.choice([3, 5, 6, 7, 9, 12, 16, 24, 32]))
