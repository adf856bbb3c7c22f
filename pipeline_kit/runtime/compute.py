"""What a stage computes for each op: the real model with autograd, or a timed wait.

The executor (:mod:`pipeline_kit.runtime.executor`) only decides *when*; these classes decide
*what*.  :class:`ModelCompute` runs the stage modules and keeps, per (chunk, microbatch), what
backward needs.  :class:`SyntheticCompute` sleeps for the simulator's costs instead, so the real
schedule and the real P2P can be timed on a 2-core laptop.
"""

from __future__ import annotations

import contextlib
import time

import torch

from .model import StageModule, lm_loss
from .split_backward import SplitBackward
from .split_backward import run_backward as _run_backward  # the name lab 5's grader imports


class ModelCompute:
    """Runs ``stages[chunk]`` (this rank's model chunks) with autograd and gradient accumulation."""

    def __init__(self, stages: dict[int, StageModule], microbatches: int, deallocate_pipeline_outputs: bool = True):
        self.stages, self.microbatches = stages, microbatches
        self.deallocate_pipeline_outputs = deallocate_pipeline_outputs  # Megatron's flag of the same name
        self.targets: list[torch.Tensor] = []
        self.saved: dict[tuple[int, int], tuple] = {}  # (chunk, mb) -> (input, output)
        self.split: dict[tuple[int, int], SplitBackward] = {}  # what I kept for W
        self.losses: list[torch.Tensor] = []
        self.bytes_per_microbatch: dict[int, int] = {}  # chunk -> activation bytes one microbatch keeps
        self.deallocated_output_bytes = 0
        self._param_ptrs = {p.data_ptr() for s in stages.values() for p in s.parameters()}

    def new_step(self, targets: list[torch.Tensor]) -> None:
        self.targets = targets
        self.deallocated_output_bytes = 0

    def forward(self, chunk: int, mb: int, x: torch.Tensor) -> torch.Tensor:
        stage = self.stages[chunk]
        if not stage.pre_process:
            x.requires_grad_()  # a received activation: backward must produce its gradient
        if chunk not in self.bytes_per_microbatch:  # measure once per chunk: shapes never change
            with self._count_saved_bytes(chunk):
                y = self._forward(stage, mb, x)
        else:
            y = self._forward(stage, mb, x)
        self.saved[(chunk, mb)] = (x, y)
        return y

    def _forward(self, stage: StageModule, mb: int, x: torch.Tensor) -> torch.Tensor:
        y = stage(x)
        if stage.post_process:  # only the last stage has logits, so only it has a loss
            y = lm_loss(y, self.targets[mb]) / self.microbatches
            self.losses.append(y.detach())
        return y

    @contextlib.contextmanager
    def _count_saved_bytes(self, chunk: int):
        """Sum the distinct non-parameter storages autograd saves for backward during one forward."""
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor):
            storage = t.untyped_storage()
            if storage.data_ptr() not in self._param_ptrs:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        self.bytes_per_microbatch[chunk] = sum(seen.values())

    def deallocate_output_tensor(self, chunk: int, mb: int) -> None:
        """Megatron's ``deallocate_output_tensor``: the output was sent; keep its graph, drop its data."""
        if not self.deallocate_pipeline_outputs:
            return
        y = self.saved[(chunk, mb)][1]
        self.deallocated_output_bytes += y.untyped_storage().nbytes()
        y.data = torch.empty((1,), device=y.device, dtype=y.dtype)

    def backward(self, chunk: int, mb: int, dy: torch.Tensor | None, weights: bool) -> torch.Tensor | None:
        """B (``weights=True``) or I: return the gradient for the previous stage (None on the first)."""
        x, y = self.saved[(chunk, mb)]
        grad = torch.ones_like(y) if dy is None else dy
        wants_dx = x.requires_grad
        if weights:  # full backward: input grad and weight grads in one pass
            del self.saved[(chunk, mb)]
            _run_backward((y,), (grad,), keep_graph=False)
            return x.grad if wants_dx else None
        params = [p for p in self.stages[chunk].parameters() if p.requires_grad]
        split = self.split[(chunk, mb)] = SplitBackward(y, x if wants_dx else None, params)
        return split.input_grad(grad)

    def weight_grad(self, chunk: int, mb: int) -> None:
        """W: accumulate this microbatch's weight gradients from what I kept, then free it all.

        Only the weights' share of the backward runs (see :mod:`~pipeline_kit.runtime.split_backward`),
        and the gradients equal a full backward's bitwise.
        """
        del self.saved[(chunk, mb)]
        self.split.pop((chunk, mb)).weight_grad()

    def activation_bytes(self, chunk: int, mb: int) -> int:
        return self.bytes_per_microbatch.get(chunk, 0)

    def take_loss(self) -> float | None:
        """Sum of this step's (already 1/M-scaled) microbatch losses; None off the last stage."""
        if not self.losses:
            return None
        total = float(torch.stack(self.losses).sum())
        self.losses.clear()
        return total


class SyntheticCompute:
    """Sleeps instead of computing, for exactly the times the simulator would use.

    ``costs`` is the simulator's own :class:`~pipeline_kit.sim.StageCosts` (one number per virtual
    stage, in seconds), so a run and its prediction share one cost convention.  Sent tensors are a
    preallocated buffer of the boundary shape.
    """

    def __init__(self, costs, stage_of_chunk: list[int], shape, device, dtype=torch.float32):
        self.costs, self.stage_of_chunk = costs, stage_of_chunk  # this rank's virtual stage per chunk
        self.buffer = torch.zeros(shape, device=device, dtype=dtype)
        self.deallocated_output_bytes = 0  # nothing to free: every send is the same buffer

    def new_step(self, targets) -> None:
        pass

    @staticmethod
    def _sleep(seconds: float) -> None:
        """Wait ``seconds`` precisely: sleep most of it, then spin the last fraction of a millisecond
        (``time.sleep`` alone overshoots by ~0.1 ms, which adds up over hundreds of ops)."""
        end = time.perf_counter() + seconds
        if seconds > 0.0005:
            time.sleep(seconds - 0.0003)
        while time.perf_counter() < end:
            pass

    def _wait(self, kind: str, chunk: int) -> None:
        self._sleep(self.costs.duration(kind, self.stage_of_chunk[chunk]))

    def forward(self, chunk: int, mb: int, x) -> torch.Tensor:
        self._wait("F", chunk)
        return self.buffer

    def deallocate_output_tensor(self, chunk: int, mb: int) -> None:
        pass

    def backward(self, chunk: int, mb: int, dy, weights: bool):
        self._wait("B" if weights else "I", chunk)
        return self.buffer

    def weight_grad(self, chunk: int, mb: int) -> None:
        self._wait("W", chunk)

    def activation_bytes(self, chunk: int, mb: int) -> int:
        return 0

    def take_loss(self):
        return None
