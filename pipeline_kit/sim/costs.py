"""Cost model for the simulator: how long each op takes and what crosses each boundary.

Convention (so that schedules compare on the *same* model): a compute cost is the time of one
microbatch through one rank's whole share of the model.  With ``v`` chunks per rank each chunk
(virtual stage) takes ``1/v`` of it.  A list of ``pp`` numbers gives each rank its own share; a
list of ``pp * v`` numbers gives each virtual stage its time directly and overrides the split.

A split backward costs what the full one costs: ``I = bwd - wgrad`` and ``W = wgrad`` (default
``wgrad = bwd / 2``, the zero-bubble paper's F = I = W when ``bwd = 2 fwd``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass, fields
from numbers import Real

from ..arguments import Arguments, is_number, shown
from ..limits import MAX_NUMBER
from ..schedules.ops import KINDS, PLACEMENTS, _stage_owner

Number = int | float
PerStage = Number | Sequence[Number]


class CostError(ValueError):
    """A cost argument has the wrong shape or sign; the message names the argument."""


def _layout_args(func: str, pp: int, chunks: int, placement: str) -> None:
    """The pipeline's shape, as :func:`per_virtual_stage` and :meth:`Costs.resolve` take it."""
    arg = Arguments(func, CostError)
    arg.integer("pp", pp, limit="MAX_RANKS")
    arg.integer("chunks", chunks, limit="MAX_CHUNKS")
    arg.text("placement", placement, PLACEMENTS)
    if placement == "v" and chunks != 2:
        arg.refuse("chunks", "2 (placement 'v' puts exactly 2 chunks on each rank)", chunks)


def cost_values(value, name: str, lengths: dict[int, str] | None = None) -> list:
    """A cost given as one number or as a list of one of the allowed ``lengths`` (length -> what one value is
    for; ``None``: any): the values as a list, each a non-negative number of at most ``MAX_NUMBER``.  The
    message names ``name``."""
    if isinstance(value, Real) and not isinstance(value, bool):
        values = [value]
    elif isinstance(value, (str, bytes)) or not (isinstance(value, Sized) and isinstance(value, Iterable)):
        raise CostError(f"{name} must be a number or a list of numbers, got {shown(value)}")
    elif lengths is not None and len(value) not in lengths:
        allowed = " or ".join(f"{n} ({what})" for n, what in lengths.items())
        raise CostError(f"{name} has {len(value)} values; expected 1 or {allowed}")
    else:
        values = list(value)
    for v in values:
        if not is_number(v):
            limit = f" of at most {MAX_NUMBER:g} (MAX_NUMBER)" if isinstance(v, Real) and v > MAX_NUMBER else ""
            raise CostError(f"{name} values must be non-negative numbers{limit}, got {shown(v)}")
    return values


def per_virtual_stage(value: PerStage, pp: int, chunks: int, name: str, placement: str = "looped") -> list:
    """Resolve a scalar / per-rank / per-virtual-stage cost into one number per virtual stage.

    A per-rank value goes to every stage that rank holds (``placement``: see
    :func:`~pipeline_kit.schedules.ops.virtual_stage`), each taking ``1/chunks`` of it.
    """
    _layout_args("per_virtual_stage", pp, chunks, placement)
    Arguments("per_virtual_stage", CostError).text("name", name)
    return _per_virtual_stage(value, pp, chunks, name, placement)


def _per_virtual_stage(value: PerStage, pp: int, chunks: int, name: str, placement: str) -> list:
    stages = pp * chunks
    lengths = {pp: "one per rank", stages: "one per virtual stage"} if chunks > 1 else {pp: "one per rank"}
    values = cost_values(value, name, lengths)
    if len(values) == 1:
        values = values * pp
    if len(values) == stages:
        return values  # one value per virtual stage (with one chunk, per rank): taken as is
    # per-rank values with v chunks: each of a rank's v stages takes 1/v of the rank's value
    return [values[_stage_owner(s, pp, placement)[0]] / chunks for s in range(stages)]


def scaled_by_stage(value: float, factors: Sequence[float], pp: int, chunks: int) -> list:
    """``value`` times each factor of ``--stage-costs``: one factor per rank (``pp`` of them), or one per virtual
    stage (``pp * chunks``), where each is a chunk's share, ``1/chunks`` of a rank-level ``value``.  The one rule
    for ``simulate --stage-costs`` and ``pipeline_kit.run --stage-costs``; a wrong count raises :class:`CostError`
    saying what was expected."""
    if len(factors) == pp:
        scale = 1.0
    elif chunks > 1 and len(factors) == pp * chunks:
        scale = 1.0 / chunks
    else:
        allowed = f"{pp} (one per rank)" + (f" or {pp * chunks} (one per virtual stage)" if chunks > 1 else "")
        raise CostError(f"got {len(factors)} values, expected {allowed}")
    return [value * scale * f for f in factors]


def scale_costs(fwd, bwd, wgrad, stage_costs, stage_bwd_costs, pp: int, chunks: int) -> tuple:
    """``(fwd, bwd, wgrad)`` scaled per stage: the forward by ``--stage-costs``, the backward and W by
    ``--stage-bwd-costs`` (for measured stages whose backward is not one multiple of their forward), else by
    ``--stage-costs`` too; ``None`` factors leave a time as it is, ``wgrad`` None stays None.  The one rule of
    ``simulate`` and ``pipeline_kit.run``; a wrong count raises :class:`CostError` naming the argument."""
    back = ("--stage-costs", stage_costs) if stage_bwd_costs is None else ("--stage-bwd-costs", stage_bwd_costs)
    out = [fwd, bwd, wgrad]
    for k, (name, factors) in enumerate((("--stage-costs", stage_costs), back, back)):
        if factors is not None and out[k] is not None:
            try:
                out[k] = scaled_by_stage(out[k], factors, pp, chunks)
            except CostError as exc:
                raise CostError(f"argument {name}: {exc}") from None
    return tuple(out)


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

    def __post_init__(self) -> None:
        """What can be checked before the pipeline's size is known: every value a non-negative number (or a
        list of them); :meth:`resolve` checks the lengths."""
        for name in ("fwd", "bwd", "wgrad", "p2p_bytes", "activation_bytes"):
            if name != "wgrad" or self.wgrad is not None:
                cost_values(getattr(self, name), name)
        self._check_link()

    def _check_link(self) -> None:
        arg = Arguments(None, CostError)  # the short words, "p2p_latency must be a non-negative number, got -1"
        arg.number("p2p_latency", self.p2p_latency)
        arg.number("bandwidth", self.bandwidth, positive=True, none=True)

    def resolve(self, pp: int, chunks: int, placement: str = "looped") -> StageCosts:
        """One number per virtual stage (and per boundary) for a pipeline of ``pp`` ranks of ``chunks`` chunks."""
        _layout_args("Costs.resolve", pp, chunks, placement)
        fwd = _per_virtual_stage(self.fwd, pp, chunks, "fwd", placement)
        bwd = _per_virtual_stage(self.bwd, pp, chunks, "bwd", placement)
        if self.wgrad is None:
            wgrad = [b / 2 for b in bwd]
        else:
            wgrad = _per_virtual_stage(self.wgrad, pp, chunks, "wgrad", placement)
            for s, (w, b) in enumerate(zip(wgrad, bwd)):
                if w > b:
                    raise CostError(f"wgrad on stage {s} is {w}, larger than the whole backward bwd={b}; "
                                    f"wgrad is the weight-gradient part of bwd")
        self._check_link()
        boundaries = max(pp * chunks - 1, 0)
        nbytes = cost_values(self.p2p_bytes, "p2p_bytes", {boundaries: "one per boundary"})
        if len(nbytes) == 1:
            nbytes = nbytes * boundaries
        if any(b and self.bandwidth is None for b in nbytes):
            raise CostError("p2p_bytes needs a bandwidth (bytes per time unit) to turn bytes into time")
        comm = [self.p2p_latency + (b / self.bandwidth if b else 0) for b in nbytes]
        act = _per_virtual_stage(self.activation_bytes, pp, chunks, "activation_bytes", placement)
        return StageCosts(fwd, bwd, wgrad, comm, nbytes, act)


COST_FIELDS = tuple(f.name for f in fields(Costs))  # what simulate(schedule, **costs) takes


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
        """How long an op of ``kind`` takes on virtual ``stage``."""
        arg = Arguments("StageCosts.duration", CostError)
        arg.text("kind", kind, KINDS)
        arg.integer("stage", stage, 0, len(self.fwd) - 1)
        if kind == "F":
            return self.fwd[stage]
        if kind == "B":
            return self.bwd[stage]
        if kind == "W":
            return self.wgrad[stage]
        return self.bwd[stage] - self.wgrad[stage]
