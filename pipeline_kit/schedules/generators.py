"""Schedule generators: the per-rank op orders that production pipeline runtimes execute.

The order on each rank *is* the contract.  ``one_f_one_b`` and ``interleaved`` reproduce the
orders of Megatron-LM's ``forward_backward_pipelining_without_interleaving`` and
``forward_backward_pipelining_with_interleaving`` (which PyTorch's ``Schedule1F1B`` and
``ScheduleInterleaved1F1B`` also execute), including the configurations they refuse.  Nothing here
imports torch: generating a 65,536-op schedule must take milliseconds.
"""

from __future__ import annotations

from ..arguments import Arguments, shown
from ..limits import LimitError, check_schedule_size, ops_per_microbatch_stage
from .ops import Op, Schedule


class ScheduleConfigError(ValueError):
    """A schedule was asked for with arguments a production system would refuse (or the kit's limits do)."""


def check_sizes(pp: int, microbatches: int, chunks: int = 1, name: str = "1f1b", forward_only: bool = False) -> None:
    """Positive integers within :mod:`pipeline_kit.limits` (and ``forward_only`` a bool), checked before any op
    list is built.  The words are the short ones, ``pp must be a positive integer, got 0``: the book's
    JavaScript explorer repeats them."""
    arg = Arguments(None, ScheduleConfigError)
    for label, value, limit in (("pp", pp, "MAX_RANKS"), ("microbatches", microbatches, "MAX_MICROBATCHES"),
                                ("chunks", chunks, "MAX_CHUNKS")):
        arg.integer(label, value, limit=limit)
    arg.boolean("forward_only", forward_only)
    try:
        check_schedule_size(pp, microbatches, chunks, ops_per_microbatch_stage(name, forward_only))
    except LimitError as exc:
        raise ScheduleConfigError(str(exc)) from None


def gpipe(pp: int, microbatches: int, forward_only: bool = False) -> Schedule:
    """GPipe ("all forward, all backward"): every forward in microbatch order, then every backward.

    Simple, and the bubble is the same as 1F1B's -- but each rank holds all ``M`` microbatches'
    activations at the turn from forward to backward.
    """
    check_sizes(pp, microbatches, forward_only=forward_only)
    fwd = [Op("F", m) for m in range(microbatches)]
    bwd = [] if forward_only else [Op("B", m) for m in range(microbatches)]
    return Schedule(_name("gpipe", forward_only), pp, microbatches, 1, [fwd + bwd for _ in range(pp)])


def one_f_one_b(pp: int, microbatches: int, forward_only: bool = False) -> Schedule:
    """Non-interleaved 1F1B, in Megatron-LM's order.

    Rank ``r`` runs ``warmup = min(pp - r - 1, M)`` forwards, then a steady state of one forward
    followed by one backward, then a cooldown that drains the remaining ``warmup`` backwards.
    At most ``pp - r`` microbatches are ever in flight on rank ``r``.
    """
    check_sizes(pp, microbatches, forward_only=forward_only)
    ranks = []
    for r in range(pp):
        if forward_only:
            ranks.append([Op("F", m) for m in range(microbatches)])
            continue
        warmup = min(pp - r - 1, microbatches)
        ops = [Op("F", m) for m in range(warmup)]
        for i in range(microbatches - warmup):  # steady state: 1F then 1B
            ops.append(Op("F", warmup + i))
            ops.append(Op("B", i))
        ops.extend(Op("B", m) for m in range(microbatches - warmup, microbatches))  # cooldown
        ranks.append(ops)
    return Schedule(_name("1f1b", forward_only), pp, microbatches, 1, ranks)


def interleaved_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """Megatron's schedule table: the ``(microbatch, chunk)`` of every forward, in order.

    Microbatches run in groups of ``group``: chunk 0 for the whole group, then chunk 1, ...; the
    last group takes every microbatch that is left.  The k-th backward uses the k-th entry with
    the chunk mirrored (``chunks - 1 - chunk``), so backwards visit chunks in reverse.
    """
    check_sizes(1, microbatches, chunks)
    Arguments(None, ScheduleConfigError).integer("group", group)
    return _interleaved_table(microbatches, chunks, group)


def _interleaved_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    table: list[tuple[int, int]] = []
    for start in range(0, microbatches, group):
        end = min(microbatches, start + group)
        table.extend((m, c) for c in range(chunks) for m in range(start, end))
    return table


def interleaved_warmup(pp: int, rank: int, microbatches: int, chunks: int, group: int) -> int:
    """Forwards before rank ``rank``'s first backward: ``2 (pp - r - 1) + (v - 1) group``, capped."""
    check_sizes(pp, microbatches, chunks)
    arg = Arguments(None, ScheduleConfigError)
    arg.integer("rank", rank, 0, pp - 1, why=f"a rank below pp={pp}")
    arg.integer("group", group)
    return _interleaved_warmup(pp, rank, microbatches, chunks, group)


def _interleaved_warmup(pp: int, rank: int, microbatches: int, chunks: int, group: int) -> int:
    return min((pp - rank - 1) * 2 + (chunks - 1) * group, microbatches * chunks)


def one_f_one_b_phases(fwd: list[Op], bwd: list[Op], warmup: int, wgrad_delay: int | None = None) -> list[Op]:
    """One rank's warmup / steady / cooldown, built from its forward and backward sequences.

    ``warmup`` forwards, then forward ``k + warmup`` followed by backward ``k`` (steady state), then the
    remaining backwards (cooldown).  With ``wgrad_delay = d`` the backwards are input-grads and the
    weight-grad of backward ``k - d`` follows input-grad ``k``; the last ``d`` weight-grads drain at the end
    (PyTorch's zero-bubble rank ops, where ``d`` is the rank).  ``fwd`` and ``bwd`` are lists of :class:`Op`
    of one length.
    """
    arg = Arguments(None, ScheduleConfigError)
    for label, ops in (("fwd", fwd), ("bwd", bwd)):
        if not isinstance(ops, list) or not all(type(op) is Op for op in ops):
            arg.refuse(label, "a list of Op", ops, wrong=True)
    if len(fwd) != len(bwd):
        arg.fail(f"fwd and bwd must be lists of one length (one backward per forward), got {len(fwd):,} and "
                 f"{len(bwd):,} ops")
    arg.integer("warmup", warmup, 0)
    arg.integer("wgrad_delay", wgrad_delay, 0, none=True)
    return _phases(fwd, bwd, warmup, wgrad_delay)


def _phases(fwd: list[Op], bwd: list[Op], warmup: int, wgrad_delay: int | None = None) -> list[Op]:
    total = len(bwd)
    ops = fwd[:warmup]
    for k in range(total):
        if k + warmup < total:
            ops.append(fwd[k + warmup])
        ops.append(bwd[k])
        if wgrad_delay is not None and k >= wgrad_delay:
            ops.append(bwd[k - wgrad_delay]._replace(kind="W"))
    if wgrad_delay is not None:
        ops.extend(op._replace(kind="W") for op in bwd[max(0, total - wgrad_delay):])
    return ops


def interleaved(
    pp: int, microbatches: int, chunks: int = 2, forward_only: bool = False, group: int | None = None
) -> Schedule:
    """Interleaved 1F1B (virtual pipeline, Narayanan et al. 2021), in Megatron-LM's order.

    Each rank holds ``chunks = v`` model chunks; chunk ``c`` of rank ``r`` is virtual stage
    ``c * pp + r``.  ``group`` is Megatron's ``microbatch_group_size_per_vp_stage`` (default
    ``pp``).  Refused, with Megatron's reasons: ``pp < 2``, ``chunks < 2``, ``group`` outside
    ``[pp, M]`` (so ``M < pp`` is refused), and a last group smaller than ``pp`` (with the default
    group: ``M`` not a multiple of ``pp``).
    """
    check_sizes(pp, microbatches, chunks, forward_only=forward_only)
    group = pp if group is None else Arguments(None, ScheduleConfigError).integer("group", group, None)
    if pp < 2:
        raise ScheduleConfigError(
            f"interleaved needs pp >= 2, got pp={pp}: with one rank there is nothing to interleave "
            f"(Megatron requires pipeline-model-parallel size > 1 for a virtual pipeline)"
        )
    if chunks < 2:
        raise ScheduleConfigError(f"interleaved needs chunks (virtual stages per rank) >= 2, got {chunks}; "
                                  "use 1f1b for one chunk")
    if not pp <= group <= microbatches:
        raise ScheduleConfigError(
            f"interleaved needs the microbatch group size in [pp={pp}, microbatches={microbatches}], "
            f"got {shown(group)}{' (microbatches must be at least pp)' if microbatches < pp else ''}"
        )
    remainder = microbatches % group
    if 0 < remainder < pp:
        such_as = f" such as {microbatches - remainder}" if microbatches - remainder >= group else ""
        raise ScheduleConfigError(
            f"interleaved refuses microbatches={microbatches} with group size {group}: the last group "
            f"would hold {remainder} < pp={pp} microbatches, which stalls the pipeline (Megatron raises "
            f"the same error); use a multiple of {group}{such_as} or {microbatches - remainder + group}"
        )
    table = _interleaved_table(microbatches, chunks, group)
    ranks = []
    for r in range(pp):
        fwd = [Op("F", m, c) for m, c in table]
        if forward_only:
            ranks.append(fwd)
            continue
        bwd = [Op("B", m, chunks - 1 - c) for m, c in table]
        ranks.append(_phases(fwd, bwd, _interleaved_warmup(pp, r, microbatches, chunks, group)))
    return Schedule(_name("interleaved", forward_only), pp, microbatches, chunks, ranks)


def zb_h1(pp: int, microbatches: int, forward_only: bool = False) -> Schedule:
    """ZB-H1, the zero-bubble schedule of Qi et al. (2023) that keeps 1F1B's peak count of live microbatches.

    Backward is split into ``I`` (gradient w.r.t. the stage input -- on the critical path, sent
    upstream at once) and ``W`` (gradient w.r.t. the weights -- needed only by the optimizer).
    Rank ``r`` follows the paper's steady-state triple ``(F x, I x-(pp-1-r), W x-(pp-1))``:
    forwards and input-grads run exactly as in 1F1B, while weight-grads trail by ``r`` slots and
    fill the holes 1F1B leaves in the cooldown.  No rank ever holds more than ``pp`` microbatches
    (rank 0's 1F1B peak), so its peak in microbatches equals 1F1B's -- in bytes only where the stages keep
    equal bytes per microbatch (:func:`pipeline_kit.plan.rank_memory` counts them) -- and with F = I = W the
    bubble is about a third of 1F1B's.
    """
    check_sizes(pp, microbatches, name="zb-h1", forward_only=forward_only)
    if forward_only:
        forwards = [[Op("F", m) for m in range(microbatches)] for _ in range(pp)]
        return Schedule(_name("zb-h1", True), pp, microbatches, 1, forwards)
    ranks = []
    for r in range(pp):
        ops = []
        for x in range(microbatches + pp - 1):
            i_mb, w_mb = x - (pp - 1 - r), x - (pp - 1)
            if x < microbatches:
                ops.append(Op("F", x))
            if 0 <= i_mb < microbatches:
                ops.append(Op("I", i_mb))
            if 0 <= w_mb < microbatches:
                ops.append(Op("W", w_mb))
        ranks.append(ops)
    return Schedule("zb-h1", pp, microbatches, 1, ranks)


def no_pipelining(microbatches: int, forward_only: bool = False) -> Schedule:
    """One rank, each microbatch's forward then its backward (Megatron's ``forward_backward_no_pipelining``)."""
    check_sizes(1, microbatches, forward_only=forward_only)
    ops: list[Op] = []
    for m in range(microbatches):
        ops.append(Op("F", m))
        if not forward_only:
            ops.append(Op("B", m))
    return Schedule(_name("no-pipelining", forward_only), 1, microbatches, 1, [ops])


def _name(base: str, forward_only: bool) -> str:
    return f"{base}-forward-only" if forward_only else base
