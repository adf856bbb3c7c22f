"""Getting the logged loss to rank 0 -- outside autograd (M048).

Only the last pipeline stage owns the output layer, so only it has a loss; every other rank has
nothing to log.  The interview question bank's script brings it to rank 0 with ``all_reduce(MAX)``: every rank puts
its scalar in a tensor, the non-last ranks put 0, and since a cross-entropy loss is never negative
the maximum is the last stage's value.  It is safe because it runs after backward on a detached
number: it is not part of the graph and changes no gradient -- a logging trick, not training.

Production does it more directly: Megatron averages the loss over the data-parallel group on the
last stage and the last rank prints the training log (or the value is broadcast from the last
stage).  Here the last rank broadcasts to everyone -- one collective, correct for any sign.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def loss_to_all_ranks(loss: float | None, last_rank: int, device: torch.device) -> float:
    """Broadcast the last stage's step loss (a plain float, never a graph node) to every rank."""
    value = torch.tensor([loss if loss is not None else 0.0], dtype=torch.float64, device=device)
    dist.broadcast(value, src=last_rank)
    return float(value[0])


def loss_to_rank0_with_max(loss: float | None, device: torch.device) -> float:
    """The question bank's trick, kept for comparison: ``all_reduce(MAX)`` with 0 on every rank but the last."""
    value = torch.tensor([loss if loss is not None else 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value[0])
