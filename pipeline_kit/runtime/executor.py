"""The executor: walk this rank's ops, in order, for one training step.

This is the whole pipeline runtime in one function, meant to be read top to bottom.  It knows
nothing about *which* schedule it runs -- GPipe, 1F1B, interleaved and ZB-H1 are just different
lists in ``schedule.ranks[rank]`` -- and everything the schedule layer promised holds here:

* ``F m`` on stage ``s``: take the tokens (first stage) or receive the activation from stage
  ``s - 1``; run the stage; on the last stage compute the loss; else send the output to stage
  ``s + 1`` and free its data (the graph stays for backward).
* ``B m`` / ``I m``: take the loss (last stage) or receive the output gradient from stage
  ``s + 1``; backpropagate (``I``: input gradient only); send the input gradient to stage ``s - 1``.
* ``W m``: accumulate the weight gradients the matching ``I`` left for later.

Receives are posted before they are needed, so tensors travel while ops compute -- the overlap
Megatron gets from its combined ``send_forward_recv_backward`` calls: on gloo every receive of the
step is posted at its start (``post_ahead``); on NCCL, where each buffer is GPU memory, the receive
of the *next* op is posted before this op computes (``prefetch``).

Gradients accumulate across microbatches; the optimizer steps after the flush (in ``run.py``).
The executor counts live activations exactly as the simulator does, and records a trace whose
op entries have the simulator timeline's fields.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..schedules import Schedule, op_messages
from ..trace import op_record
from .p2p import P2P


@dataclass
class StepRecord:
    """What one rank saw in one step (times in seconds from the step's start)."""

    events: list[dict] = field(default_factory=list)  # one per op: rank, op, kind, microbatch, chunk, stage, start, end
    waits: list[dict] = field(default_factory=list)  # one per P2P receive: rank, peer, direction, microbatch, ...
    peak_activations: int = 0
    peak_activation_bytes: int = 0
    end: float = 0.0


def run_step(schedule: Schedule, rank: int, compute, p2p: P2P, tokens: list, cuda_sync: bool = False) -> StepRecord:
    """Run ``schedule.ranks[rank]`` once.  ``compute`` is a ModelCompute or SyntheticCompute."""
    ops = schedule.ranks[rank]
    stage_of_chunk = schedule.stages_of(rank)
    inbox, outbox = zip(*op_messages(schedule, rank)) if ops else ((), ())  # what each op receives, sends
    rec = StepRecord()
    live = live_bytes = 0
    t0 = time.perf_counter()
    p2p.waits_since(t0, rec.waits)
    p2p.post_ahead(inbox)

    for i, op in enumerate(ops):
        kind, m, chunk = op
        s = stage_of_chunk[chunk]
        start = time.perf_counter() - t0
        received = p2p.recv(inbox[i]) if inbox[i] else None
        if i + 1 < len(ops):
            p2p.prefetch(inbox[i + 1])  # the next op's input travels while this op computes

        if kind == "F":
            x = tokens[m] if s == 0 else received
            y = compute.forward(chunk, m, x)
            if outbox[i] is not None:  # every stage but the last sends its output on
                p2p.send(y, outbox[i])
                compute.deallocate_output_tensor(chunk, m)
            live += 1
            live_bytes += compute.activation_bytes(chunk, m)
            rec.peak_activations = max(rec.peak_activations, live)
            rec.peak_activation_bytes = max(rec.peak_activation_bytes, live_bytes)

        elif kind in ("B", "I"):
            dy = received  # None on the last stage, which starts from its own loss
            freed = compute.activation_bytes(chunk, m)
            dx = compute.backward(chunk, m, dy, weights=(kind == "B"))
            if outbox[i] is not None:  # every stage but the first sends its input gradient back
                p2p.send(dx, outbox[i])
            if kind == "B":  # the backward of (m, s) is complete: its activations are gone
                live -= 1
                live_bytes -= freed

        else:  # "W"
            freed = compute.activation_bytes(chunk, m)
            compute.weight_grad(chunk, m)
            live -= 1
            live_bytes -= freed

        if cuda_sync:
            torch.cuda.synchronize()
        rec.events.append(op_record(schedule, rank, op, s, start, time.perf_counter() - t0))

    rec.end = rec.events[-1]["end"] if rec.events else 0.0
    return rec
