"""The planner's search: every pipeline configuration the kit can run for a model on N GPUs, predicted and ranked.

Why a search and not a formula: the bubble, the imbalance of a layout, P2P and memory pull against each other
differently for every model and batch, and the families each refuse some sizes.  The kit already has an exact
model of the part that is schedule -- the simulator -- so the planner enumerates, asks each family to build
its order, sizes every rank (:mod:`.memory`) and simulates only what fits.  Everything else is an estimate and
is named as one: per-stage times from FLOPs at ``tflops`` achieved, P2P from latency and bandwidth, and the
data-parallel gradient all-reduce as one ring all-reduce after the pipeline flush over the same link.

A candidate's ``pipeline_time_s`` and ``bubble_fraction`` are exactly what ``python -m pipeline_kit simulate``
prints for its :meth:`Candidate.simulate_args`; ``step_time_s`` adds ``allreduce_time_s`` (0 when dp = 1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..arguments import Arguments
from ..layout.balance import ItemTimes, best_cuts, even_split, item_times_from_flops, layout_from_cuts, stage_times
from ..layout.costs import ModelSpec, boundary_bytes
from ..layout.spec import Layout, LayoutError
from ..limits import MAX_RANKS, LimitError, check_at_most, ops_per_microbatch_stage
from ..schedules import FAMILIES, ScheduleConfigError, build_schedule
from ..sim import simulate
from .frameworks import FRAMEWORKS, needs_layout, unsupported
from .memory import RankMemory, Training, rank_memory

V_CHOICES = (2, 3, 4, 6, 8)  # chunks per rank tried for the families that take any number
TOLERANCE = 0.02  # step times within 2 % of the fastest are a tie: the FLOPs model, P2P and the all-reduce are
                  # estimates no closer than that, so the planner picks the simpler design among them
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

    @property
    def fits(self) -> bool:
        return self.why_not is None

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
            "simulate_args": self.simulate_args(),
        }


def simplicity(cand: Candidate, layers: int) -> tuple:
    """How simple a design is to run, smaller first: pipeline stages, chunks, the frameworks that cannot run its
    family, a layout the framework's own even split gives (no layout to write out), then memory and step time
    (what a tie is decided by)."""
    return (cand.pp, cand.chunks, unsupported(cand.schedule), needs_layout(cand, layers), cand.worst_memory_bytes,
            cand.step_time_s)


@dataclass
class Search:
    """What :func:`plan` found: every candidate, the index of the best, and the inputs it was asked with."""

    model: ModelSpec
    model_name: str
    hardware: Hardware
    training: Training
    global_batch: int
    candidates: list[Candidate]
    seconds: float
    tolerance: float = TOLERANCE
    framework: str = "any"
    cost_source: str = "FLOPs"  # where the compute times came from: FLOPs at a rate, or a trace

    @property
    def ranked(self) -> list[int]:
        """Indices of the candidates that fit, fastest first (ties: less memory, then fewer ranks)."""
        fit = [i for i, c in enumerate(self.candidates) if c.fits]
        return sorted(fit, key=lambda i: (self.candidates[i].step_time_s, self.candidates[i].worst_memory_bytes,
                                          self.candidates[i].pp, i))

    @property
    def refusals(self) -> dict[str, int]:
        """How many candidates were refused, by kind (``memory``, ``family``, ...), the commonest first."""
        kinds: dict[str, int] = {}
        for c in self.candidates:
            if not c.fits:
                kinds[c.refusal or "other"] = kinds.get(c.refusal or "other", 0) + 1
        return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))

    @property
    def fastest(self) -> int | None:
        ranked = self.ranked
        return ranked[0] if ranked else None

    @property
    def ties(self) -> list[int]:
        """The candidates within ``tolerance`` of the fastest, fastest first: as good as it, as far as the
        estimates can tell."""
        ranked = self.ranked
        if not ranked:
            return []
        top = self.candidates[ranked[0]].step_time_s
        return [i for i in ranked if self.candidates[i].step_time_s <= top * (1 + self.tolerance)]

    @property
    def best(self) -> int | None:
        """The pick: of the :attr:`ties`, the simplest design (:func:`simplicity`) -- fewer pipeline stages, then one
        chunk per rank, then a family more frameworks run, then Megatron's own split, then less memory."""
        ties = self.ties
        return min(ties, key=lambda i: (*simplicity(self.candidates[i], self.model.layers), i)) if ties else None

    def within(self, gpu_memory_bytes: float | None = None, schedules=None) -> Search:
        """The same search under a smaller memory budget and/or fewer families, without building or simulating
        anything again: a candidate's prediction does not depend on the budget, only whether it fits does.  Equal,
        candidate for candidate, to :func:`plan` asked with that budget and those ``schedules`` (tested), and
        thousands of times faster -- what re-planning one model at several budgets needs."""
        budget = self.hardware.gpu_memory_bytes if gpu_memory_bytes is None else gpu_memory_bytes
        arg = Arguments("Search.within", PlanError)
        arg.number("gpu_memory_bytes", budget, positive=True)
        if budget > self.hardware.gpu_memory_bytes:
            arg.fail(f"argument gpu_memory_bytes: {budget / GB:g} GB is more than the searched budget "
                     f"({self.hardware.gpu_memory_bytes / GB:g} GB): candidates that did not fit were never "
                     "simulated; plan again with the larger budget")
        asked = list(dict.fromkeys(c.schedule for c in self.candidates))
        families = asked if schedules is None else list(dict.fromkeys(schedules))
        for name in families:
            arg.text("schedules[]", name, asked)
        hw = replace(self.hardware, gpu_memory_bytes=budget)
        out = []
        for name in families:
            for cand in self.candidates:
                if cand.schedule == name:
                    out.append(_under_budget(cand, hw))
        return replace(self, hardware=hw, candidates=out)


def check_plan_args(m: ModelSpec, hw: Hardware, training: Training, global_batch: int | None,
                    schedules, framework: str = "any") -> tuple[int, list[str]]:
    """The checks every planning entry point shares; returns the global batch and the families to try (those of
    ``schedules`` that ``framework`` runs)."""
    arg = Arguments("plan", PlanError)
    arg.instance("m", m, ModelSpec, "a ModelSpec (or load_model_spec(...))")
    arg.instance("hw", hw, Hardware, "a Hardware")
    arg.instance("training", training, Training, "a Training")
    arg.text("framework", framework, list(FRAMEWORKS))
    if hw.gpus % training.tp:
        arg.fail(f"argument training: tp={training.tp} does not divide the {hw.gpus} GPUs")
    if m.hidden % m.heads:  # (the layout and memory sums need no whole head; a model to train does)
        arg.fail(f"argument m: hidden {m.hidden:,} is not a multiple of heads ({m.heads:,}): each attention head "
                 "takes an equal share of the hidden size")
    for what, size in (("attention heads", m.heads), ("hidden size", m.hidden), ("key/value heads", m.query_groups)):
        if size % training.tp:  # Megatron asserts both: each tensor-parallel rank takes a whole share
            arg.fail(f"argument training: tp={training.tp} does not divide the model's {what} ({size:,}): each "
                     "tensor-parallel rank holds a whole share of the heads and of the hidden dimension")
    if global_batch is None:
        global_batch = 2 * hw.gpus // training.tp * m.micro_batch_size
    arg.integer("global_batch", global_batch, 1, limit="MAX_MODEL_DIM")
    families = list(FAMILIES) if schedules is None else list(schedules)
    for name in families:
        arg.text("schedules[]", name, list(FAMILIES))
    if not families:
        arg.refuse("schedules", "at least one schedule family", schedules)
    runs = [name for name in dict.fromkeys(families) if name in FRAMEWORKS[framework]]
    if not runs:
        arg.fail(f"argument schedules: {framework} runs none of {', '.join(dict.fromkeys(families))} (it runs "
                 f"{', '.join(FRAMEWORKS[framework])})")
    return global_batch, runs


def _shapes(m: ModelSpec, ranks: int, families: list[str]):
    """Every (family, pp, v) the search visits, pp dividing the ``ranks`` (GPUs / tp).  A v that makes more stages
    than the model has items (E, the layers, L) is left out; where even the family's smallest v does, that one
    shape stays, to be refused."""
    items = m.layers + 2
    divisors = [d for d in range(1, min(ranks, MAX_RANKS) + 1) if ranks % d == 0]  # pp > MAX_RANKS: never built
    for name in families:
        kind = FAMILIES[name].chunks
        choices = (1,) if kind == "one" else (2,) if kind == "two" else V_CHOICES
        for pp in divisors:
            fitting = [v for v in choices if pp * v <= items]
            for v in fitting or choices[:1]:
                yield name, pp, v


def _count_ops(m: ModelSpec, ranks: int, global_batch: int, families: list[str]) -> int:
    total = 0
    for name, pp, v in _shapes(m, ranks, families):
        dp = ranks // pp
        if global_batch % (dp * m.micro_batch_size) == 0 and pp * v <= m.layers + 2:
            total += 2 * pp * v * (global_batch // (dp * m.micro_batch_size)) * ops_per_microbatch_stage(name)
    return total


def plan(m: ModelSpec, hw: Hardware, training: Training | None = None, global_batch: int | None = None,
         schedules=None, model_name: str = "model", progress=None, framework: str = "any",
         tolerance: float = TOLERANCE, measured: ItemTimes | None = None, cost_source: str | None = None) -> Search:
    """Enumerate, size and simulate every candidate of the families ``framework`` runs; ``progress(done,
    total)`` is called as it goes; step times within ``tolerance`` of the fastest tie (:attr:`Search.best`).
    ``measured``: per-item seconds from a real run's trace (``plan --trace``) in place of the FLOPs estimate."""
    training = Training() if training is None else training
    global_batch, families = check_plan_args(m, hw, training, global_batch, schedules, framework)
    arg = Arguments("plan", PlanError)
    arg.text("model_name", model_name)
    arg.function("progress", progress, none=True)
    arg.number("tolerance", tolerance)
    arg.instance("measured", measured, ItemTimes, "an ItemTimes (item_times_from_trace)", none=True)
    if measured is not None and measured.layers != m.layers:
        arg.fail(f"argument measured: times for {measured.layers} layers but the model has {m.layers}")
    if not 0 <= tolerance < 1:
        arg.refuse("tolerance", "a fraction from 0 up to 1 (0.02 is 2 %)", tolerance)
    ranks = hw.gpus // training.tp
    ops = _count_ops(m, ranks, global_batch, families)
    try:
        check_at_most(f"the search ({ops:,} ops to build and simulate over all candidates)", ops, "MAX_PLAN_OPS",
                      "ops")
    except LimitError as exc:
        raise PlanError(f"{exc}; try fewer --schedules, a smaller --global-batch or a larger --micro-batch-size") \
            from None
    start = time.perf_counter()
    items = item_times(m, hw, training, measured)
    p2p_bytes = boundary_bytes(m) // training.tp  # sequence parallelism sends each tp rank its share
    p2p_time = hw.p2p_seconds(p2p_bytes)
    shapes = list(_shapes(m, ranks, families))
    out: list[Candidate] = []
    for done, (name, pp, v) in enumerate(shapes):
        out.extend(_evaluate(m, hw, training, global_batch, items, name, pp, v, p2p_time, p2p_bytes))
        if progress is not None:
            progress(done + 1, len(shapes))
    source = cost_source or ("measured per-layer times" if measured else f"FLOPs at {hw.tflops:g} TFLOP/s")
    return Search(m, model_name, hw, training, global_batch, out, time.perf_counter() - start, tolerance, framework,
                  source)


def item_times(m: ModelSpec, hw: Hardware, training: Training, measured: ItemTimes | None = None) -> ItemTimes:
    """Seconds per microbatch of each item (E, the layers, L): ``measured`` ones (a trace's, taken as they are,
    with the extra forward of full recomputation), or its FLOPs at ``tflops`` on each of ``tp`` GPUs,
    plus each decoder layer's tensor-parallel collectives (:func:`tp_seconds`), charged as compute is: twice in
    the backward (which runs the same four collectives: an upper bound that keeps every backward twice its
    forward, so ``simulate_args`` still reproduces the step); full recomputation adds a forward to every
    backward (the output layer's too: an upper bound)."""
    if measured is not None:
        fwd, bwd = measured.fwd, measured.bwd
    else:
        items = item_times_from_flops(m, hw.tflops * training.tp)
        comm = tp_seconds(m, hw, training.tp)
        fwd = tuple(f + (comm if 0 < k <= m.layers else 0.0) for k, f in enumerate(items.fwd))
        bwd = tuple(b + (2 * comm if 0 < k <= m.layers else 0.0) for k, b in enumerate(items.bwd))
    if training.recompute == "full":
        bwd = tuple(b + f for f, b in zip(fwd, bwd))
    return ItemTimes(fwd, bwd)


def tp_seconds(m: ModelSpec, hw: Hardware, tp: int) -> float:
    """One decoder layer's tensor-parallel communication for one microbatch, one way (forward or backward):
    with sequence parallelism two all-gathers and two reduce-scatters of the ``s b h`` activation, each moving
    ``(tp - 1) / tp`` of its bytes over the ``tp_gbps`` link, plus a latency each; none at ``tp = 1``.  Nothing
    is overlapped with compute (Megatron can overlap some of it: ``--tp-comm-overlap``)."""
    if tp == 1:
        return 0.0
    nbytes = m.seq_len * m.micro_batch_size * m.hidden * m.dtype_bytes
    return 4 * ((tp - 1) / tp * nbytes / (hw.tp_gbps * GB) + hw.latency)


def bwd_ratio(training: Training) -> int:
    """A stage's backward over its forward under the FLOPs model: 2, or 3 with full recomputation."""
    return 3 if training.recompute == "full" else 2


def balanced_layout(m: ModelSpec, items: ItemTimes, stages: int) -> Layout:
    """The balancer's cut of E, the layers and L into ``stages`` stages, by each item's forward + backward time."""
    return layout_from_cuts(best_cuts([f + b for f, b in zip(items.fwd, items.bwd)], stages), m.layers)


def _layouts(m: ModelSpec, items, stages: int) -> list[tuple[str, Layout]]:
    even, balanced = even_split(m.layers, stages), balanced_layout(m, items, stages)
    return [("even", even)] + ([("balanced", balanced)] if str(balanced) != str(even) else [])


def family_refusal(name: str, pp: int, microbatches: int, v: int, exc: Exception) -> str:
    """What a family's refusal of a shape says: the shape, then the family's own reason."""
    return f"{name} refuses pp={pp}, M={microbatches}" + (f", v={v}" if v > 1 else "") + f": {exc}"


def size(cand: Candidate, m: ModelSpec, hw: Hardware, training: Training, layout: Layout, sched) -> bool:
    """Size every rank of ``cand`` (:func:`~.memory.rank_memory`); False, with ``why_not`` saying which rank and by
    how much, when the worst rank passes the budget."""
    cand.memory = rank_memory(m, layout, sched, training, cand.dp)
    cand.why_not = _over_budget(cand, hw)
    cand.refusal = "memory" if cand.why_not else None
    return cand.why_not is None


def _over_budget(cand: Candidate, hw: Hardware) -> str | None:
    """Why a sized candidate's worst rank does not fit ``hw``'s budget; None when it fits."""
    worst = cand.worst_rank
    need = cand.memory[worst].total
    if need <= hw.gpu_memory_bytes:
        return None
    return (f"rank {worst} needs {need / GB:.2f} GB, {(need - hw.gpu_memory_bytes) / GB:.2f} GB over the "
            f"{hw.gpu_memory_bytes / GB:g} GB budget")


PREDICTED = ("step_time_s", "pipeline_time_s", "allreduce_time_s", "tokens_per_s", "bubble_fraction", "stage_fwd_s",
             "stage_bwd_s", "busy_s", "bwd_ratio")  # what :func:`predict` fills in, for a candidate that fits


def _under_budget(cand: Candidate, hw: Hardware) -> Candidate:
    """``cand`` as :func:`_evaluate` would have left it under ``hw``'s (smaller) budget: refused, unpredicted."""
    if not cand.fits or not cand.memory:
        return replace(cand)
    why = _over_budget(cand, hw)
    if why is None:
        return replace(cand)
    blank = Candidate(cand.schedule, cand.pp, cand.dp, cand.chunks, cand.microbatches, cand.layout, cand.layout_kind)
    return replace(cand, why_not=why, refusal="memory", **{name: getattr(blank, name) for name in PREDICTED})


def _evaluate(m, hw, training, global_batch, items, name, pp, v, p2p_time, p2p_bytes) -> list[Candidate]:
    dp = hw.gpus // training.tp // pp
    per_replica = dp * m.micro_batch_size
    base = dict(schedule=name, pp=pp, dp=dp, chunks=v, p2p_time_s=p2p_time, p2p_bytes=p2p_bytes)
    if global_batch % per_replica:
        return [Candidate(**base, microbatches=None, layout=None, layout_kind="even", refusal="batch",
                          why_not=f"the global batch {global_batch} is not a multiple of dp x micro-batch = "
                                  f"{dp} x {m.micro_batch_size} = {per_replica}")]
    mb = global_batch // per_replica
    stages = pp * v
    if stages > m.layers + 2:
        return [Candidate(**base, microbatches=mb, layout=None, layout_kind="even", refusal="layout",
                          why_not=f"{stages} stages but only {m.layers + 2} items (E, {m.layers} layers, L) to fill "
                                  "them")]
    try:
        sched = build_schedule(name, pp, mb, v if FAMILIES[name].chunks != "one" else None)
    except (ScheduleConfigError, LimitError) as exc:
        return [Candidate(**base, microbatches=mb, layout=None, layout_kind="even", refusal="family",
                          why_not=family_refusal(name, pp, mb, v, exc))]
    out = []
    for kind, layout in _layouts(m, items, stages):
        cand = Candidate(**base, microbatches=mb, layout=str(layout), layout_kind=kind)
        out.append(cand)
        try:
            fits = size(cand, m, hw, training, layout, sched)
        except LayoutError as exc:
            cand.why_not, cand.refusal = f"layout {layout}: {exc}", "layout"
            continue
        if fits:  # only what fits is simulated: the rest needs no step time
            predict(cand, m, hw, training, global_batch, items, layout, sched)
    return out


def allreduce_seconds(grad_bytes: float, dp: int, hw: Hardware, param_bytes: float | None = None) -> float:
    """A ring all-reduce of ``grad_bytes`` over ``dp`` replicas: ``2 (dp-1)/dp`` of the bytes each way, plus
    ``2 (dp-1)`` latencies; 0 without data parallelism.  With the distributed optimizer (``param_bytes``, the
    weights' bytes): a reduce-scatter of the gradients and an all-gather of the updated weights, ``(dp-1)/dp`` of
    each -- 4 + 2 bytes a parameter in bf16 where the all-reduce moves 8."""
    if dp <= 1:
        return 0.0
    moved = 2 * grad_bytes if param_bytes is None else grad_bytes + param_bytes
    return (dp - 1) / dp * moved / hw.bandwidth + 2 * (dp - 1) * hw.latency


def _reduce_starts(res) -> list[float]:
    """When each rank's gradients start to be final: the start of its first backward (B, or W for a split
    backward) of the last microbatch -- where Megatron's overlapped reduce launches its first bucket."""
    last = res.schedule.microbatches - 1
    starts = [float("inf")] * res.schedule.pp
    for e in res.events:  # (one pass: rank_events would walk them all once per rank)
        if e.op.kind in ("B", "W") and e.op.microbatch == last:
            starts[e.rank] = min(starts[e.rank], e.start)
    return starts


def predict(cand: Candidate, m, hw, training, global_batch, items, layout, sched) -> None:
    """Fill in ``cand``'s step time, bubble and busy times by simulating ``layout`` under ``sched`` -- lab 10's
    grader predicts a student's own layout with it, so a grade and the planner never disagree."""
    fwd, bwd = stage_times(items, layout)
    ratio = bwd_ratio(training)
    cand.stage_fwd_s, cand.stage_bwd_s = fwd, bwd
    cand.bwd_ratio = ratio if all(b == ratio * f for f, b in zip(fwd, bwd)) else None  # (None: measured times)
    res = simulate(sched, fwd=fwd, bwd=bwd, p2p_latency=cand.p2p_time_s if sched.pp > 1 else 0)
    cand.pipeline_time_s = res.makespan
    cand.bubble_fraction = res.bubble_fraction
    cand.busy_s = list(res.busy)
    reduces = [allreduce_seconds(r.gradients, cand.dp, hw, r.weights if training.distributed_optimizer else None)
               for r in cand.memory]
    if training.overlap_grad_reduce and cand.dp > 1:  # the reduce runs from the last microbatch's backward on
        end = max(start + t for start, t in zip(_reduce_starts(res), reduces))
        cand.allreduce_time_s = max(0.0, end - res.makespan)  # only what outlasts the pipeline adds to the step
    else:
        cand.allreduce_time_s = max(reduces)  # after the flush: the rank with the most gradients finishes last
    cand.step_time_s = cand.pipeline_time_s + cand.allreduce_time_s
    cand.tokens_per_s = global_batch * m.seq_len / cand.step_time_s if cand.step_time_s else None


def describe_search(search: Search) -> str:
    """One line: how many candidates, how many fit, and the refusals by kind."""
    refused = ", ".join(f"{k} {n}" for k, n in search.refusals.items())
    fit = sum(c.fits for c in search.candidates)
    return (f"searched {len(search.candidates)} candidates in {search.seconds:.2f} s: {fit} fit"
            + (f", {len(search.candidates) - fit} refused ({refused})" if refused else ""))
