"""What the planner searches over and answers with: the hardware it plans for, and one candidate configuration.

Why its own module: the search (:mod:`.search`), the explanation, the drawing, the frameworks' arguments and lab
10's grader all read a :class:`Candidate`; keeping the records apart from the search keeps the imports running
one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..arguments import Arguments
from ..schedules import FAMILIES
from .frameworks import needs_layout, unsupported
from .memory import RankMemory

GB = 1e9  # the planner speaks in decimal gigabytes, as GPU data sheets do (an H100 has 80 GB)


class PlanError(ValueError):
    """A planning argument is out of range, or the search would be too large; the message names the argument."""


@dataclass(frozen=True)
class Hardware:
    """The cluster as the planner sees it: a count, a memory size, and three speeds (all estimates)."""

    gpus: int
    gpu_memory_bytes: float
    tflops: float = 400.0  # achieved (not peak) TFLOP/s per GPU
    p2p_gbps: float = 50.0  # GB/s of one point-to-point link, and of the all-reduce's ring
    p2p_latency_us: float = 10.0
    tp_gbps: float = 300.0  # GB/s of tensor parallelism's collectives inside a node (NVLink-class)

    def __post_init__(self) -> None:
        arg = Arguments("Hardware", PlanError)
        arg.integer("gpus", self.gpus, limit="MAX_GPUS")
        arg.number("gpu_memory_bytes", self.gpu_memory_bytes, positive=True)
        arg.number("tflops", self.tflops, positive=True)
        arg.number("p2p_gbps", self.p2p_gbps, positive=True)
        arg.number("p2p_latency_us", self.p2p_latency_us)
        arg.number("tp_gbps", self.tp_gbps, positive=True)

    @property
    def bandwidth(self) -> float:
        """Bytes per second of a link."""
        return self.p2p_gbps * GB

    @property
    def latency(self) -> float:
        return self.p2p_latency_us * 1e-6

    def p2p_seconds(self, nbytes: float) -> float:
        """One transfer of ``nbytes``: the latency, then the bytes at the link's bandwidth (no contention)."""
        return self.latency + nbytes / self.bandwidth


@dataclass
class Candidate:
    """One configuration: what it is, and either its prediction or why it cannot run (``why_not``)."""

    schedule: str
    pp: int
    dp: int
    chunks: int
    microbatches: int | None
    layout: str | None
    layout_kind: str  # "even" or "balanced" (the balancer's cut)
    why_not: str | None = None
    step_time_s: float | None = None
    pipeline_time_s: float | None = None
    allreduce_time_s: float | None = None
    tokens_per_s: float | None = None
    bubble_fraction: float | None = None
    memory: list[RankMemory] = field(default_factory=list)
    stage_fwd_s: list[float] = field(default_factory=list)  # per virtual stage, one microbatch
    stage_bwd_s: list[float] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)  # per rank, from the simulation
    p2p_time_s: float = 0.0  # one transfer: latency + bytes / bandwidth
    p2p_bytes: int = 0
    bwd_ratio: int | None = 2  # every stage's backward over its forward (3 with full recomputation); None for
                               # measured stage times (plan --trace), which are not one multiple of each other
    refusal: str | None = None  # "batch", "family", "layout", "memory", "size": why_not's kind
    bound_s: float | None = None  # for a candidate that fits: a lower bound on step_time_s (:mod:`.bound`)
    bounded: str | None = None  # why a candidate that fits was not simulated (a large search; see :func:`settle`)

    @property
    def fits(self) -> bool:
        return self.why_not is None

    @property
    def simulated(self) -> bool:
        """True once the step is predicted; a candidate that fits and is not is ``bounded`` (a large search's:
        :attr:`Search.bounded`)."""
        return self.pipeline_time_s is not None

    @property
    def peak_memory_bytes(self) -> list[float]:
        return [m.total for m in self.memory]

    @property
    def worst_rank(self) -> int | None:
        totals = self.peak_memory_bytes
        return max(range(len(totals)), key=totals.__getitem__) if totals else None

    @property
    def worst_memory_bytes(self) -> float | None:
        return max(self.peak_memory_bytes) if self.memory else None

    def label(self) -> str:
        """``zbv pp=8 v=2 M=16 balanced`` -- how the why-paragraph names a candidate."""
        v = f" v={self.chunks}" if FAMILIES[self.schedule].chunks != "one" else ""
        m = f" M={self.microbatches}" if self.microbatches else ""
        dp = f" dp={self.dp}" if self.dp > 1 else ""
        return f"{self.schedule} pp={self.pp}{dp}{v}{m} ({self.layout_kind} layout)"

    def simulate_args(self) -> list[str]:
        """The ``python -m pipeline_kit simulate`` arguments that reproduce ``pipeline_time_s`` and the bubble.

        ``--stage-costs`` takes one factor per virtual stage, scaled by ``1/v`` (the simulator's convention that a
        rank-level cost is split over its chunks), so ``--fwd v --bwd 2v`` makes each factor the stage's time (``3v``
        with full recomputation).  Measured stage times (``plan --trace``) give the backward its own factors,
        ``--bwd v --stage-bwd-costs``.
        """
        if self.pipeline_time_s is None:
            return []
        v = self.chunks
        args = ["--schedule", self.schedule, "--pp", str(self.pp), "--microbatches", str(self.microbatches)]
        if FAMILIES[self.schedule].chunks != "one":
            args += ["--chunks", str(v)]
        args += ["--fwd", str(v), "--bwd", str((self.bwd_ratio or 1) * v),
                 "--stage-costs", ",".join(repr(f) for f in self.stage_fwd_s)]
        if self.bwd_ratio is None:  # measured: each stage's backward as its own factor
            args += ["--stage-bwd-costs", ",".join(repr(b) for b in self.stage_bwd_s)]
        if self.pp > 1:
            args += ["--p2p-latency", repr(self.p2p_time_s)]
        return args

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule, "pp": self.pp, "dp": self.dp, "chunks": self.chunks,
            "microbatches": self.microbatches, "layout": self.layout, "layout_kind": self.layout_kind,
            "step_time_s": self.step_time_s, "pipeline_time_s": self.pipeline_time_s,
            "allreduce_time_s": self.allreduce_time_s, "tokens_per_s": self.tokens_per_s,
            "bubble_fraction": self.bubble_fraction, "peak_memory_bytes": self.peak_memory_bytes,
            "memory": [m.to_dict() for m in self.memory], "fits": self.fits, "why_not": self.why_not,
            "simulated": self.simulated, "step_time_bound_s": self.bound_s, "not_simulated": self.bounded,
            "simulate_args": self.simulate_args(),
        }


def simplicity(cand: Candidate, layers: int) -> tuple:
    """How simple a design is to run, smaller first: pipeline stages, chunks, the frameworks that cannot run its
    family, a layout the framework's own even split gives (no layout to write out), then memory and step time
    (what a tie is decided by)."""
    return (cand.pp, cand.chunks, unsupported(cand.schedule), needs_layout(cand, layers), cand.worst_memory_bytes,
            cand.step_time_s)


PREDICTED = ("step_time_s", "pipeline_time_s", "allreduce_time_s", "tokens_per_s", "bubble_fraction", "stage_fwd_s",
             "stage_bwd_s", "busy_s", "bwd_ratio")  # what :func:`predict` fills in, for a candidate that fits
