"""A lower bound on a schedule's simulated step time, computed without simulating it.

Why: at cluster sizes (1,536 GPUs, a global batch of 2,304 sequences) one search holds candidates of 100,000
ops and more, and simulating every one of them costs tens of seconds -- while most of them are far slower than
the fastest, and a bound says so in microseconds.  The planner simulates its candidates in order of this bound
and stops where the bound of the next one already passes the tie tolerance of the fastest step found
(:mod:`.search`), so what it leaves unsimulated provably cannot tie and is said to be bounded, not guessed.

The bound, for every rank ``r`` (the simulator's rules: a rank runs its ops one at a time, in order; an op starts
when its inputs exist, a cross-rank input one P2P time after its producer ended):

* ``busy_r`` -- the sum of its ops' times, ``M`` times the forward and backward of each stage it holds;
* ``head_r`` -- its first op cannot start before the forwards of every earlier stage of that microbatch, and
  the P2P hops between their ranks;
* ``tail_r`` -- when its last op is a backward (``B`` or ``I``), the input gradient it makes still has to pass
  every earlier stage's backward and the hops between them (counted as an ``I``, half a ``B``, where the
  schedule may run either).  A ``W`` leaves nothing behind it.

So the makespan is at least ``head_r + busy_r + tail_r`` for every ``r``.  Nothing here needs the timeline:
the first and last op of each rank, its stages and the per-stage times are enough.
"""

from __future__ import annotations

from ..schedules.ops import Schedule

SLACK = 1e-9  # the bound is taken this fraction lower, so that sums taken in another order than the simulator's
              # (float rounding, ~1e-16 a term) can never lift it above the simulated makespan


def pipeline_bound(sched: Schedule, fwd: list[float], bwd: list[float], p2p: float) -> float:
    """A lower bound on ``simulate(sched, fwd=fwd, bwd=bwd, p2p_latency=p2p).makespan`` (per-stage ``fwd`` and
    ``bwd``; a split backward's ``I`` and ``W`` take half of ``bwd`` each, the simulator's default)."""
    stages = sched.stages
    rank_of = [sched.rank_of(s) for s in range(stages)]
    grad = [b - b / 2 for b in bwd]  # I's time, never more than B's: what makes a stage's input gradient
    fwd_before, grad_before = [0.0] * stages, [0.0] * stages  # what must run on stages 0..s-1, with the hops
    for s in range(1, stages):
        hop = p2p if rank_of[s - 1] != rank_of[s] else 0.0
        fwd_before[s] = fwd_before[s - 1] + fwd[s - 1] + hop
        grad_before[s] = grad_before[s - 1] + grad[s - 1] + hop
    best = 0.0
    for r, ops in enumerate(sched.ranks):
        if not ops:
            continue
        mine = sched.stages_of(r)
        first, last = ops[0], ops[-1]
        training = last.kind != "F"  # a rank of a training schedule ends with a backward; forward-only, all F
        busy = sched.microbatches * sum(fwd[s] + (bwd[s] if training else 0.0) for s in mine)
        head = fwd_before[mine[first.chunk]]
        tail = grad_before[mine[last.chunk]] if last.kind in ("B", "I") else 0.0
        best = max(best, head + busy + tail)
    return best * (1 - SLACK)
