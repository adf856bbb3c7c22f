"""The planner's search: every pipeline configuration the kit can run for a model on N GPUs, predicted and ranked.

Why a search and not a formula: the bubble, the imbalance of a layout, P2P and memory pull against each other
differently for every model and batch, and the families each refuse some sizes. The kit already has an exact model
of the part that is schedule -- the simulator -- so the planner enumerates, asks each family to build its order,
sizes every rank (:mod:`.memory`) and simulates only what fits -- in a search at cluster sizes, only what fits and
could tie or rank among the fastest, which a lower bound (:mod:`.bound`) tells without simulating (:func:`settle`).
Everything else is an estimate and is named as one: per-stage times from FLOPs at ``tflops`` achieved, P2P from
latency and bandwidth, and the data-parallel gradient all-reduce as one ring all-reduce after the pipeline flush
over the same link.

A candidate's ``pipeline_time_s`` and ``bubble_fraction`` are exactly what ``python -m pipeline_kit simulate``
prints for its :meth:`Candidate.simulate_args`; ``step_time_s`` adds ``allreduce_time_s`` (0 when dp = 1).
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, replace

from ..arguments import Arguments
from ..layout.balance import ItemTimes, best_cuts, even_split, item_times_from_flops, layout_from_cuts, stage_times
from ..layout.costs import ModelSpec, boundary_bytes
from ..layout.spec import Layout, LayoutError
from ..limits import LimitError, check_at_most
from ..schedules import FAMILIES, ScheduleConfigError, build_schedule
from ..sim import simulate
from .bound import pipeline_bound
from .candidate import GB, PREDICTED, Candidate, Hardware, PlanError, simplicity
from .frameworks import FRAMEWORKS
from .memory import Training, rank_memory
from .shapes import count_ops, shape_refusal, shapes

TOLERANCE = 0.02  # step times within 2 % of the fastest are a tie: the FLOPs model, P2P and the all-reduce are
                  # estimates no closer than that, so the planner picks the simpler design among them
SIMULATE_ALL_OPS = 500_000  # a search whose schedules hold at most this many ops simulates every candidate that
                            # fits (every search of the book and the labs; about 3 s of simulation on 2 cores)
EXACT_TOP = 8  # above it, Search.ranked's first 8 are still exact: the report's 5 rows, --verify's at most 8 runs


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
    simulate_all: bool | None = None  # what plan() was asked: None, by the search's size (SIMULATE_ALL_OPS)

    @property
    def ranked(self) -> list[int]:
        """Indices of the simulated candidates (every one that fits, below ``SIMULATE_ALL_OPS``), fastest first
        (ties: less memory, then fewer ranks).  In a search that left some :attr:`bounded`, the first
        ``EXACT_TOP`` are still the fastest of all: a bounded candidate is slower than each of them."""
        fit = [i for i, c in enumerate(self.candidates) if c.fits and c.simulated]
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
    def bounded(self) -> list[int]:
        """Indices of the candidates that fit but were not simulated: their bound shows they cannot tie."""
        return [i for i, c in enumerate(self.candidates) if c.fits and not c.simulated]

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
        """The pick: of the :attr:`ties`, the simplest design (``simplicity``) -- fewer pipeline stages, then one
        chunk per rank, then a family more frameworks run, then Megatron's own split, then less memory."""
        ties = self.ties
        return min(ties, key=lambda i: (*simplicity(self.candidates[i], self.model.layers), i)) if ties else None

    def within(self, gpu_memory_bytes: float | None = None, schedules=None) -> Search:
        """The same search under a smaller memory budget and/or fewer families, without simulating again what was
        simulated: a candidate's prediction does not depend on the budget, only whether it fits does.  Equal,
        candidate for candidate, to :func:`plan` asked with that budget and those ``schedules`` (tested), and
        thousands of times faster -- what re-planning one model at several budgets needs.  (Where a large search
        left candidates bounded and the smaller budget drops the fastest, ``settle`` simulates the ones that
        could now tie.)"""
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
        search = replace(self, hardware=hw, candidates=out)
        settle(search)  # what a smaller budget brings within the tolerance is simulated now, as plan() would
        return search


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


def plan(m: ModelSpec, hw: Hardware, training: Training | None = None, global_batch: int | None = None,
         schedules=None, model_name: str = "model", progress=None, framework: str = "any",
         tolerance: float = TOLERANCE, simulate_all: bool | None = None, measured: ItemTimes | None = None,
         cost_source: str | None = None) -> Search:
    """Enumerate and size every candidate of the families ``framework`` runs, and simulate what fits (all of it
    when the search builds at most ``SIMULATE_ALL_OPS`` ops, or ``simulate_all`` is True; else what
    ``pipeline_kit.plan.search.settle`` needs); ``progress(done, total)`` is called as it goes; step times within
    ``tolerance`` of the fastest tie (:attr:`Search.best`).  ``measured``: per-item seconds from a real run's trace
    (``plan --trace``) in place of the FLOPs estimate."""
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
    if simulate_all is not None:
        arg.boolean("simulate_all", simulate_all)
    ranks = hw.gpus // training.tp
    ops = count_ops(m, ranks, global_batch, families)
    try:
        check_at_most(f"the search ({ops:,} ops in the schedules of all its candidates)", ops, "MAX_PLAN_OPS",
                      "ops")
    except LimitError as exc:
        raise PlanError(f"{exc}; try fewer --schedules, a smaller --global-batch or a larger --micro-batch-size") \
            from None
    start = time.perf_counter()
    items = item_times(m, hw, training, measured)
    p2p_bytes = boundary_bytes(m) // training.tp  # sequence parallelism sends each tp rank its share
    p2p_time = hw.p2p_seconds(p2p_bytes)
    visits = list(shapes(m, ranks, families))
    now = ops <= SIMULATE_ALL_OPS if simulate_all is None else simulate_all  # else settle() picks what to simulate
    layouts: dict[int, list[tuple[str, Layout]]] = {}
    out: list[Candidate] = []
    for done, (name, pp, v) in enumerate(visits):
        out.extend(_evaluate(m, hw, training, global_batch, items, name, pp, v, p2p_time, p2p_bytes, now, layouts))
        if progress is not None:
            progress(done + 1, len(visits))
    source = cost_source or ("measured per-layer times" if measured else f"FLOPs at {hw.tflops:g} TFLOP/s")
    search = Search(m, model_name, hw, training, global_batch, out, 0.0, tolerance, framework, source, simulate_all)
    settle(search, layouts)
    search.seconds = time.perf_counter() - start
    return search


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


def _layouts(m: ModelSpec, items, stages: int, cache: dict | None = None) -> list[tuple[str, Layout]]:
    """The even split and, where it differs, the balancer's cut (``cache``: by stage count, as every family
    with ``stages`` stages has the same two)."""
    if cache is not None and stages in cache:
        return cache[stages]
    even, balanced = even_split(m.layers, stages), balanced_layout(m, items, stages)
    out = [("even", even)] + ([("balanced", balanced)] if str(balanced) != str(even) else [])
    if cache is not None:
        cache[stages] = out
    return out


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


def _unpredicted(cand: Candidate, **changes) -> Candidate:
    """``cand`` without a prediction (and with ``changes``)."""
    blank = Candidate(cand.schedule, cand.pp, cand.dp, cand.chunks, cand.microbatches, cand.layout, cand.layout_kind)
    return replace(cand, **{name: getattr(blank, name) for name in PREDICTED}, **changes)


def _under_budget(cand: Candidate, hw: Hardware) -> Candidate:
    """``cand`` as :func:`_evaluate` would have left it under ``hw``'s (smaller) budget: refused, unpredicted."""
    if not cand.fits or not cand.memory:
        return replace(cand)
    why = _over_budget(cand, hw)
    if why is None:
        return replace(cand)
    return _unpredicted(cand, why_not=why, refusal="memory", bound_s=None, bounded=None)


def _build(name: str, pp: int, microbatches: int, v: int):
    return build_schedule(name, pp, microbatches, v if FAMILIES[name].chunks != "one" else None)


def _evaluate(m, hw, training, global_batch, items, name, pp, v, p2p_time, p2p_bytes, simulate_now=True,
              layouts=None) -> list[Candidate]:
    """The candidates of one shape, sized and bounded; simulated too when ``simulate_now``."""
    dp = hw.gpus // training.tp // pp
    per_replica = dp * m.micro_batch_size
    base = dict(schedule=name, pp=pp, dp=dp, chunks=v, p2p_time_s=p2p_time, p2p_bytes=p2p_bytes)
    if global_batch % per_replica:
        return [Candidate(**base, microbatches=None, layout=None, layout_kind="even", refusal="batch",
                          why_not=f"the global batch {global_batch} is not a multiple of dp x micro-batch = "
                                  f"{dp} x {m.micro_batch_size} = {per_replica}")]
    mb = global_batch // per_replica
    stages = pp * v
    refused = shape_refusal(m, name, pp, v)
    if refused:
        return [Candidate(**base, microbatches=mb, layout=None, layout_kind="even", refusal="layout",
                          why_not=refused)]
    try:
        sched = _build(name, pp, mb, v)
    except (ScheduleConfigError, LimitError) as exc:
        return [Candidate(**base, microbatches=mb, layout=None, layout_kind="even", refusal="family",
                          why_not=family_refusal(name, pp, mb, v, exc))]
    out = []
    for kind, layout in _layouts(m, items, stages, layouts):
        cand = Candidate(**base, microbatches=mb, layout=str(layout), layout_kind=kind)
        out.append(cand)
        try:
            fits = size(cand, m, hw, training, layout, sched)
        except LayoutError as exc:
            cand.why_not, cand.refusal = f"layout {layout}: {exc}", "layout"
            continue
        if not fits:  # only what fits is simulated: the rest needs no step time
            continue
        fwd, bwd = stage_times(items, layout)
        cand.bound_s = (pipeline_bound(sched, fwd, bwd, cand.p2p_time_s if pp > 1 else 0)
                        + (0.0 if training.overlap_grad_reduce else _allreduce_after_flush(cand, hw, training)))
        if simulate_now:
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


def _reduces(cand: Candidate, hw: Hardware, training: Training) -> list[float]:
    """Each rank's data-parallel gradient reduce, in seconds (from its sized gradients and weights)."""
    return [allreduce_seconds(r.gradients, cand.dp, hw, r.weights if training.distributed_optimizer else None)
            for r in cand.memory]


def _allreduce_after_flush(cand: Candidate, hw: Hardware, training: Training) -> float:
    """The reduce after the pipeline's flush: the rank with the most gradients finishes last."""
    return max(_reduces(cand, hw, training))


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
    if training.overlap_grad_reduce and cand.dp > 1:  # the reduce runs from the last microbatch's backward on
        end = max(start + t for start, t in zip(_reduce_starts(res), _reduces(cand, hw, training)))
        cand.allreduce_time_s = max(0.0, end - res.makespan)  # only what outlasts the pipeline adds to the step
    else:
        cand.allreduce_time_s = _allreduce_after_flush(cand, hw, training)
    cand.step_time_s = cand.pipeline_time_s + cand.allreduce_time_s
    cand.tokens_per_s = global_batch * m.seq_len / cand.step_time_s if cand.step_time_s else None


def describe_search(search: Search) -> str:
    """One line: how many candidates, how many fit (and were simulated), and the refusals by kind."""
    refused = ", ".join(f"{k} {n}" for k, n in search.refusals.items())
    fit = sum(c.fits for c in search.candidates)
    bounded = len(search.bounded)
    return (f"searched {len(search.candidates)} candidates in {search.seconds:.2f} s: {fit} fit"
            + (f" ({fit - bounded} simulated; {bounded} bounded, not simulated: a lower bound puts each more than "
               f"{100 * search.tolerance:g} % over the fastest and past the {EXACT_TOP}th)" if bounded else "")
            + (f", {len(search.candidates) - fit} refused ({refused})" if refused else ""))


def baseline(search: Search, near: Candidate | None = None) -> int | None:
    """The plain 1F1B baseline: 1F1B with the even split at ``near``'s pp (the pick's), else the fastest 1F1B
    that fits, else the 1F1B with the least memory (to say why it does not fit)."""
    ones = [i for i, c in enumerate(search.candidates) if c.schedule == "1f1b" and c.layout_kind == "even"]
    if not ones:
        return None
    if near is not None:
        same = [i for i in ones if search.candidates[i].pp == near.pp]
        if same:
            return same[0]
    fit = [i for i in ones if search.candidates[i].fits and search.candidates[i].simulated]
    if fit:
        return min(fit, key=lambda i: search.candidates[i].step_time_s)
    sized = [i for i in ones if search.candidates[i].memory]
    return min(sized, key=lambda i: search.candidates[i].worst_memory_bytes) if sized else ones[0]


def settle(search: Search, layouts: dict | None = None) -> None:
    """Decide, in place, which candidates that fit are simulated -- a function of the candidates alone, so that
    :meth:`Search.within` and :func:`plan` agree candidate for candidate.

    Below ``SIMULATE_ALL_OPS`` (or when asked, ``simulate_all``) every one is.  Above, they are simulated in
    order of their lower bound (``bound_s``, :mod:`.bound`) until the next bound is more than the tolerance over
    the fastest step found and more than the ``EXACT_TOP``-th fastest: that one and every later one cannot tie
    and cannot enter the first ``EXACT_TOP`` of :attr:`Search.ranked`, so they are left **bounded**, with the
    reason.  Then the pick's plain 1F1B baseline (what :func:`~.explain.explain` compares against) is simulated
    if it was left bounded.  What was simulated before and is now past the cut is made bounded again."""
    cands = search.candidates
    fits = [i for i, c in enumerate(cands) if c.fits]
    lazy = _Lazy(search, layouts)
    everything = search.simulate_all
    if everything is None:
        ranks = search.hardware.gpus // search.training.tp
        families = list(dict.fromkeys(c.schedule for c in cands))
        everything = count_ops(search.model, ranks, search.global_batch, families) <= SIMULATE_ALL_OPS
    if everything:
        for i in fits:
            lazy.predict(i)
        return
    order = sorted(fits, key=lambda i: (cands[i].bound_s, i))
    steps: list[float] = []  # the simulated step times, sorted
    cut = len(order)
    for k, i in enumerate(order):
        fastest = steps[0] * (1 + search.tolerance) if steps else math.inf
        kth = steps[EXACT_TOP - 1] if len(steps) >= EXACT_TOP else math.inf
        if cands[i].bound_s > max(fastest, kth):
            cut = k
            break
        lazy.predict(i)
        bisect.insort(steps, cands[i].step_time_s)
    for i in order[cut:]:
        cands[i] = _unpredicted(cands[i], bounded=_bounded_reason(cands[i], steps, search.tolerance))
    best = search.best
    base = baseline(search, cands[best]) if best is not None else None
    if base is not None and cands[base].fits and not cands[base].simulated:
        lazy.predict(base)


def _bounded_reason(cand: Candidate, steps: list[float], tolerance: float) -> str:
    kth = f" and than the {EXACT_TOP}th fastest ({1e3 * steps[EXACT_TOP - 1]:.1f} ms)" if len(steps) >= EXACT_TOP \
        else ""
    return (f"not simulated: its step takes at least {1e3 * cand.bound_s:.1f} ms (a lower bound: its busiest rank's "
            f"work, the forwards before it and the backwards after it, and the all-reduce), more than "
            f"{100 * tolerance:g} % over the fastest ({1e3 * steps[0]:.1f} ms){kth}")


class _Lazy:
    """Simulates a search's candidates on demand (:func:`settle`): rebuilds the schedule (the last one is kept:
    a shape's two layouts often come one after the other) and the layout, then :func:`predict`."""

    def __init__(self, search: Search, layouts: dict | None = None):
        self.search = search
        self.items = item_times(search.model, search.hardware, search.training)
        self.layouts = {} if layouts is None else layouts
        self.last: tuple | None = None

    def predict(self, i: int) -> None:
        s, cand = self.search, self.search.candidates[i]
        if cand.simulated:
            return
        cand = s.candidates[i] = replace(cand, bounded=None)  # (a copy: a search's within() shares candidates)
        shape = (cand.schedule, cand.pp, cand.microbatches, cand.chunks)
        if self.last is None or self.last[0] != shape:
            self.last = (shape, _build(*shape))
        stages = cand.pp * cand.chunks
        layout = dict(_layouts(s.model, self.items, stages, self.layouts))[cand.layout_kind]
        predict(cand, s.model, s.hardware, s.training, s.global_batch, self.items, layout, self.last[1])
