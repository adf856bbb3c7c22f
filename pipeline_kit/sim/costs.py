"""Cost model for the simulator: how long each op takes and what crosses each boundary.

Convention (so that schedules compare on the *same* model): a compute cost is the time of one
microbatch through one rank's whole share of the model.  With ``v`` chunks per rank each chunk
(virtual stage) takes ``1/v`` of it.  A list of ``pp`` numbers gives each rank its own share; a
list of ``pp * v`` numbers gives each virtual stage its time directly and overrides the split.

A split backward costs what the full one costs: ``I = bwd - wgrad`` and ``W = wgrad`` (default
``wgrad = bwd / 2``, the zero-bubble paper's F = I = W when ``bwd = 2 fwd``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real

from ..schedules.ops import stage_owner

Number = int | float
PerStage = Number | Sequence[Number]


class CostError(ValueError):
    """A cost argument has the wrong shape or sign; the message names the argument."""


def per_virtual_stage(value: PerStage, pp: int, chunks: int, name: str, placement: str = "looped") -> list:
    """Resolve a scalar / per-rank / per-virtual-stage cost into one number per virtual stage.

    A per-rank value goes to every stage that rank holds (``placement``: see
    :func:`~pipeline_kit.schedules.ops.virtual_stage`), each taking ``1/chunks`` of it.
    """
    stages = pp * chunks
    if isinstance(value, Real) and not isinstance(value, bool):
        values = [value] * pp
    elif isinstance(value, (str, bytes)):
        raise CostError(f"{name} must be a number or a list of numbers, got {value!r}")
    else:
        try:
            values = list(value)
        except TypeError:
            raise CostError(f"{name} must be a number or a list of numbers, got {value!r}") from None
        if len(values) not in (pp, stages):
            allowed = f"{pp} (one per rank)" + (f" or {stages} (one per virtual stage)" if chunks > 1 else "")
            raise CostError(f"{name} has {len(values)} values; expected 1 or {allowed}")
    for v in values:
        if not isinstance(v, Real) or isinstance(v, bool) or not 0 <= v < math.inf:
            raise CostError(f"{name} values must be non-negative numbers, got {v!r}")
    if len(values) == stages:
        return values  # one value per virtual stage (with one chunk, per rank): taken as is
    # per-rank values with v chunks: each of a rank's v stages takes 1/v of the rank's value
    return [values[stage_owner(s, pp, placement)[0]] / chunks for s in range(stages)]


@dataclass
class Costs:
    """Inputs of the simulator.  Times are in any unit you like (the CLI says "time units").

    ``fwd`` / ``bwd`` / ``wgrad``: compute costs (see module docstring).
    ``p2p_latency``: fixed time of every transfer between different ranks.
    ``p2p_bytes`` / ``bandwidth``: optional size-dependent transfer time ``bytes / bandwidth``;
    ``p2p_bytes`` is one number or one per boundary (``pp * chunks - 1`` of them).
    ``activation_bytes``: memory one microbatch leaves live on a stage until its backward,
    per rank share like the compute costs.
    Transfers do not contend for links; each takes latency + bytes / bandwidth.
    """

    fwd: PerStage = 1.0
    bwd: PerStage = 2.0
    wgrad: PerStage | None = None
    p2p_latency: Number = 0
    p2p_bytes: PerStage = 0
    bandwidth: Number | None = None
    activation_bytes: PerStage = 0

    def resolve(self, pp: int, chunks: int, placement: str = "looped") -> StageCosts:
        fwd = per_virtual_stage(self.fwd, pp, chunks, "fwd", placement)
        bwd = per_virtual_stage(self.bwd, pp, chunks, "bwd", placement)
        if self.wgrad is None:
            wgrad = [b / 2 for b in bwd]
        else:
            wgrad = per_virtual_stage(self.wgrad, pp, chunks, "wgrad", placement)
            for s, (w, b) in enumerate(zip(wgrad, bwd)):
                if w > b:
                    raise CostError(f"wgrad on stage {s} is {w}, larger than the whole backward bwd={b}; "
                                    f"wgrad is the weight-gradient part of bwd")
        if not isinstance(self.p2p_latency, Real) or not 0 <= self.p2p_latency < math.inf:
            raise CostError(f"p2p_latency must be a non-negative number, got {self.p2p_latency!r}")
        if self.bandwidth is not None and (not isinstance(self.bandwidth, Real) or not 0 < self.bandwidth < math.inf):
            raise CostError(f"bandwidth must be a positive number (bytes per time unit), got {self.bandwidth!r}")
        stages = pp * chunks
        boundaries = max(stages - 1, 0)
        if isinstance(self.p2p_bytes, Real):
            nbytes = [self.p2p_bytes] * boundaries
        else:
            nbytes = list(self.p2p_bytes)
            if len(nbytes) != boundaries:
                raise CostError(f"p2p_bytes has {len(nbytes)} values; expected 1 or {boundaries} (one per boundary)")
        if any(b and self.bandwidth is None for b in nbytes):
            raise CostError("p2p_bytes needs a bandwidth (bytes per time unit) to turn bytes into time")
        comm = [self.p2p_latency + (b / self.bandwidth if b else 0) for b in nbytes]
        act = per_virtual_stage(self.activation_bytes, pp, chunks, "activation_bytes", placement)
        return StageCosts(fwd, bwd, wgrad, comm, nbytes, act)


@dataclass
class StageCosts:
    """Costs resolved to one number per virtual stage (``comm``/``nbytes``: per boundary s|s+1)."""

    fwd: list
    bwd: list
    wgrad: list
    comm: list
    nbytes: list
    activation_bytes: list

    def duration(self, kind: str, stage: int):
        if kind == "F":
            return self.fwd[stage]
        if kind == "B":
            return self.bwd[stage]
        if kind == "W":
            return self.wgrad[stage]
        return self.bwd[stage] - self.wgrad[stage]
