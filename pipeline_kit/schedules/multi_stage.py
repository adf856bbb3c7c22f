"""PyTorch's multi-stage schedules beyond interleaved 1F1B: looped BFS, interleaved zero bubble, ZB-V, DualPipe-V.

Each generator returns the order ``torch.distributed.pipelining`` (torch 2.13) really executes on every rank --
the compute actions of ``pipeline_order_with_comms`` that ``_PipelineScheduleRuntime._step_microbatches`` walks,
with DualPipe-V's overlapped ``F+B`` pairs unpacked into the forward followed by the backward -- and refuses
exactly the configurations PyTorch refuses, quoting PyTorch's reason.  The ``None`` padding PyTorch stores for
its visualizer is timing only and is dropped: the validator and the simulator derive the waits themselves.

``zbv`` and ``dualpipev`` use the V placement (chunk 0 of rank r is stage r, chunk 1 is stage 2 pp - 1 - r,
see :func:`~pipeline_kit.schedules.ops.virtual_stage`); ``looped-bfs`` and ``interleaved-zb`` the looped one.
Nothing here imports torch.
"""

from __future__ import annotations

from collections import deque

from .generators import ScheduleConfigError, _interleaved_table, _phases, check_sizes
from .ops import Op, Schedule


def _forward_only(name: str, sched: Schedule) -> Schedule:
    """Inference variant: the same forward order, every backward op dropped (forwards depend only on forwards)."""
    ranks = [[op for op in ops if op.kind == "F"] for ops in sched.ranks]
    return Schedule(f"{name}-forward-only", sched.pp, sched.microbatches, sched.chunks, ranks, sched.placement)


def looped_bfs(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Breadth-first looped pipeline (Lamy-Poirier 2022, PyTorch's ``ScheduleLoopedBFS``).

    Each rank holds ``chunks`` looped stages and runs every microbatch through its first chunk, then its
    second, ... (breadth first), then the backwards chunk by chunk in reverse, each chunk's microbatches
    last-in first-out.  GPipe's memory (every microbatch live on every chunk at the turn) with a bubble that
    shrinks with ``v`` like interleaved 1F1B's; PyTorch refuses no size.
    """
    check_sizes(pp, microbatches, chunks, name="looped-bfs")
    ops = [Op("F", m, c) for c in range(chunks) for m in range(microbatches)]
    ops += [Op("B", m, c) for c in reversed(range(chunks)) for m in reversed(range(microbatches))]
    return Schedule("looped-bfs", pp, microbatches, chunks, [list(ops) for _ in range(pp)])


def torch_round_size(pp: int, microbatches: int, family: str, torch_words: str) -> int:
    """Microbatches per round of PyTorch's flexible interleaving: ``M`` splits into ``max(1, M // pp)`` rounds.

    An ``M`` that the rounds do not divide is refused with PyTorch's words.
    """
    rounds = max(1, microbatches // pp)
    if microbatches % rounds:
        raise ScheduleConfigError(
            f"{family} refuses microbatches={microbatches} with pp={pp}: \"{torch_words} requires the number of "
            f"microbatches to be a multiple of the number of rounds ({rounds}), but got {microbatches}.\" "
            f"(PyTorch splits M into max(1, M // pp) = {rounds} equal rounds)")
    return microbatches // rounds


def interleaved_zero_bubble(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Interleaved zero bubble (Qi et al. 2024's ZB1P; PyTorch's ``ScheduleInterleavedZeroBubble``).

    Looped placement as in interleaved 1F1B, microbatches in rounds of ``M / max(1, M // pp)``.  Rank ``r``
    warms up with ``(v - 1) * round + pp - 1 - r`` forwards -- one per hop, not interleaved 1F1B's two,
    because an input-grad comes back sooner than a full backward -- then runs ``F``, ``I`` pairs and puts each
    weight-grad ``r`` input-grads late, so the Ws fill the cooldown bubble.  Refused as PyTorch refuses: an
    ``M`` that its rounds do not divide.
    """
    check_sizes(pp, microbatches, chunks, name="interleaved-zb")
    per_round = torch_round_size(pp, microbatches, "interleaved-zb", "Zero bubble")
    table = _interleaved_table(microbatches, chunks, per_round)
    fwd = [Op("F", m, c) for m, c in table]
    bwd = [Op("I", m, chunks - 1 - c) for m, c in table]
    ranks = []
    for r in range(pp):
        warmup = min((chunks - 1) * per_round + pp - 1 - r, microbatches * chunks)
        ranks.append(_phases(fwd, bwd, warmup, wgrad_delay=r))
    return Schedule("interleaved-zb", pp, microbatches, chunks, ranks)


def _refuse_chunks(family: str, chunks: int) -> None:
    if chunks != 2:
        raise ScheduleConfigError(
            f"{family} needs --chunks 2, got {chunks}: \"ZBV requires exactly 2 stages per rank, but got {chunks}.\" "
            f"(PyTorch's V schedules put stages r and 2pp-1-r on rank r)")


def _zbv_rank(pp: int, r: int, planned: int) -> list[Op]:
    """PyTorch's ZB-V ops for rank ``r`` over ``planned`` microbatches (``_calculate_single_rank_operations``)."""
    ops: list[Op] = []
    f, b = [0, 0], [0, 0]  # next forward / backward microbatch of chunk 0 and chunk 1

    def forward(c: int) -> None:
        ops.append(Op("F", f[c], c))
        f[c] += 1

    def backward(c: int, with_wgrad: bool) -> None:
        ops.append(Op("I", b[c], c))
        if with_wgrad:
            ops.append(Op("W", b[c], c))
        b[c] += 1

    for _ in range(2 * (pp - r) - 1):  # warmup: chunk-0 forwards ...
        forward(0)
    for _ in range(r):  # ... chunk 1 starts while chunk 0 goes on ...
        forward(1)
        forward(0)
    for _ in range(pp - r):  # ... and chunk 1's first backwards, right at the turn of the V
        forward(1)
        backward(1, True)
    while f[1] < f[0] or f[0] < planned:  # steady: (F) I W on chunk 0, then F I W on chunk 1
        if f[0] < planned:
            forward(0)
        backward(0, True)
        forward(1)
        backward(1, True)
    w = list(b)
    for _ in range(r):  # cooldown: input-grads first, weight-grads deferred
        backward(0, False)
        backward(1, False)
    for _ in range(pp - r):
        backward(0, False)
        ops.append(Op("W", w[0], 0))
        w[0] += 1
    ops += [Op("W", m, 1) for m in range(w[1], b[1])]
    ops += [Op("W", m, 0) for m in range(w[0], b[0])]
    return ops


def zbv(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """ZB-V (Qi et al. 2024, section 6; PyTorch's ``ScheduleZBVZeroBubble``): zero bubble on a V placement.

    Rank ``r`` holds stage ``r`` (chunk 0) and stage ``2 pp - 1 - r`` (chunk 1): the last stage sits on rank 0
    next to the first, and a microbatch turns round on rank ``pp - 1`` with no transfer.  PyTorch plans at
    least ``2 pp - 1`` microbatches and drops the ones beyond ``M``, so every ``M`` is accepted; only
    ``chunks != 2`` is refused.  With F = I = W and enough microbatches the bubble is nearly zero at 1F1B's
    peak activation memory.
    """
    check_sizes(pp, microbatches, chunks, name="zbv")
    _refuse_chunks("zbv", chunks)
    planned = max(2 * pp - 1, microbatches)
    ranks = [[op for op in _zbv_rank(pp, r, planned) if op.microbatch < microbatches] for r in range(pp)]
    return Schedule("zbv", pp, microbatches, 2, ranks, placement="v")


def _dualpipev_rank(pp: int, r: int, microbatches: int) -> list[Op]:
    """PyTorch's DualPipe-V ops for rank ``r``, its eight steps, overlapped pairs as forward then backward."""
    ops: list[Op] = []
    f, b = [0, 0], [0, 0]  # next forward / backward microbatch of chunk 0 and chunk 1
    wgrads: deque[Op] = deque()  # weight-grads of split backwards, run later to fill bubbles

    def forward(c: int) -> None:
        ops.append(Op("F", f[c], c))
        f[c] += 1

    def backward(c: int, split: bool = False) -> None:
        ops.append(Op("I" if split else "B", b[c], c))
        if split:
            wgrads.append(Op("W", b[c], c))
        b[c] += 1

    def pending_wgrad() -> None:
        if wgrads:
            ops.append(wgrads.popleft())

    for _ in range(2 * (pp - r - 1)):  # 1: chunk-0 forwards
        forward(0)
    for _ in range(r + 1):  # 2: F0 F1
        forward(0)
        forward(1)
    for _ in range(pp - r - 1):  # 3: I1 W F1 (zero-bubble style)
        backward(1, split=True)
        pending_wgrad()
        forward(1)
    for _ in range(microbatches - 2 * pp + r + 1):  # 4: the overlapped pairs F0+B1, F1+B0
        forward(0)
        backward(1)
        forward(1)
        backward(0)
    for _ in range(pp - r - 1):  # 5: B1, F1+B0
        backward(1)
        forward(1)
        backward(0)
    split = False
    for i in range(r + 1):  # 6: B1 B0, from the middle on split into I (W later)
        if i == (r + 1) // 2 and r % 2 == 1:
            split = True
        backward(1, split)
        if i == (r + 1) // 2 and r % 2 == 0:
            split = True
        backward(0, split)
    for _ in range(pp - r - 1):  # 7: W, B0
        pending_wgrad()
        backward(0, split)
    for _ in range(r + 1):  # 8: the remaining weight-grads
        pending_wgrad()
    return ops


def dualpipev(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """DualPipe-V (DeepSeek-V3's DualPipe folded onto a V; PyTorch's ``ScheduleDualPipeV``).

    V placement as in :func:`zbv`.  The steady state pairs a forward of one chunk with a full backward of the
    other (``F c0 + B c1``, then ``F c1 + B c0``); on GPUs the pair's compute and communication overlap.  The
    kit's executor, like PyTorch's runtime, runs each pair as the forward followed by the backward.  Backwards
    near the edges are split into ``I`` now and ``W`` later to fill bubbles.  Refused as PyTorch refuses:
    chunks other than 2, and fewer microbatches than stages (``M < 2 pp``).
    """
    check_sizes(pp, microbatches, chunks, name="dualpipev")
    _refuse_chunks("dualpipev", chunks)
    if microbatches < 2 * pp:
        raise ScheduleConfigError(
            f"dualpipev needs microbatches >= 2*pp = {2 * pp}, got {microbatches}: \"DualPipeV requires at least "
            f"as many microbatches as stages, but got {microbatches} microbatches and {2 * pp} stages.\"")
    return Schedule("dualpipev", pp, microbatches, 2, [_dualpipev_rank(pp, r, microbatches) for r in range(pp)],
                    placement="v")


MULTI_STAGE = {
    "looped-bfs": looped_bfs,
    "interleaved-zb": interleaved_zero_bubble,
    "zbv": zbv,
    "dualpipev": dualpipev,
}


def build_multi_stage(name: str, pp: int, microbatches: int, chunks: int, forward_only: bool = False) -> Schedule:
    """One of :data:`MULTI_STAGE` by name; ``forward_only`` keeps its forwards in the same order."""
    sched = MULTI_STAGE[name](pp, microbatches, chunks)
    return _forward_only(name, sched) if forward_only else sched
