"""The balancer (M050): the contiguous layout whose slowest stage is as fast as possible.

The model is a sequence of items ``E, t0, t1, ..., t(n-1), L`` with a time each; a layout cuts it
into ``pp * v`` contiguous, non-empty stages.  Any such cut keeps ``E`` on the first stage and
``L`` on the last, so the pins come for free.  Dynamic programming over (stages used, items
covered) finds the cut minimising the slowest stage exactly; the result is simulated next to the
even split so the gain is a step time and a bubble, not a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arguments import Arguments, shown
from ..limits import MAX_LAYERS, MAX_NUMBER
from ..schedules import build_schedule
from ..sim import simulate
from .costs import ModelSpec, _layout, _model, layer_flops_per_token, loss_flops_per_token
from .spec import Layout, LayoutError, StageSpec


@dataclass(frozen=True)
class ItemTimes:
    """Forward and backward time of one microbatch through each item: E, then each layer, then L."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]

    def __post_init__(self) -> None:
        arg = Arguments("ItemTimes", LayoutError)
        fwd = arg.numbers("fwd", self.fwd, most=MAX_LAYERS + 2)
        if len(fwd) < 2:
            arg.refuse("fwd", "a list of the embedding's, each layer's and the loss's times (2 at least)", self.fwd)
        bwd = arg.numbers("bwd", self.bwd, length=len(fwd), per="one per item of fwd")
        object.__setattr__(self, "fwd", tuple(fwd))
        object.__setattr__(self, "bwd", tuple(bwd))

    @classmethod
    def uniform(cls, layers: int, layer_fwd: float = 1.0, embedding_fwd: float = 0.0, loss_fwd: float = 0.0,
                bwd_ratio: float = 2.0) -> ItemTimes:
        """``layers`` layers of one time each between the embedding and the loss; backward ``bwd_ratio`` x forward."""
        arg = Arguments("ItemTimes.uniform", LayoutError)
        arg.integer("layers", layers, 0, limit="MAX_LAYERS")
        for name, value in (("layer_fwd", layer_fwd), ("embedding_fwd", embedding_fwd), ("loss_fwd", loss_fwd),
                            ("bwd_ratio", bwd_ratio)):
            arg.number(name, value)
        _fits(arg, "bwd_ratio (times layer_fwd, embedding_fwd or loss_fwd)",
              bwd_ratio * max(layer_fwd, embedding_fwd, loss_fwd))
        fwd = (embedding_fwd, *([layer_fwd] * layers), loss_fwd)
        return cls(fwd, tuple(bwd_ratio * f for f in fwd))

    @property
    def layers(self) -> int:
        return len(self.fwd) - 2

    def scaled(self, factor: float) -> ItemTimes:
        """The same times in another unit (``scaled(1e3)``: seconds to milliseconds)."""
        arg = Arguments("ItemTimes.scaled", LayoutError)
        _fits(arg, "factor", arg.number("factor", factor) * max(self.fwd + self.bwd))
        return ItemTimes(tuple(f * factor for f in self.fwd), tuple(b * factor for b in self.bwd))


def _fits(arg: Arguments, name: str, longest: float) -> None:
    """Refuse, naming ``name``, item times that would pass ``MAX_NUMBER`` (``longest`` is the longest)."""
    if longest > MAX_NUMBER:
        arg.fail(f"argument {name}: it makes an item take {shown(longest)}, more than the limit of {MAX_NUMBER:g} "
                 "(MAX_NUMBER)")


def item_times_from_flops(spec: ModelSpec, tflops: float) -> ItemTimes:
    """Forward/backward seconds per microbatch of each item from its FLOPs at ``tflops`` achieved."""
    _model("item_times_from_flops", spec)
    arg = Arguments("item_times_from_flops", LayoutError)
    arg.number("tflops", tflops, positive=True)
    tokens = spec.seq_len * spec.micro_batch_size
    per = 1.0 / (tflops * 1e12)
    layer = tokens * layer_flops_per_token(spec) * per
    loss = tokens * loss_flops_per_token(spec) * per
    _fits(arg, "tflops", 2 * max(layer, loss))  # a backward takes twice the forward
    return ItemTimes.uniform(spec.layers, layer_fwd=layer, embedding_fwd=0.0, loss_fwd=loss)


@dataclass
class Plan:
    """A layout with its simulated step."""

    layout: Layout
    stage_fwd: list[float]
    stage_bwd: list[float]
    makespan: float
    bubble_fraction: float

    @property
    def stage_times(self) -> list[float]:
        return [f + b for f, b in zip(self.stage_fwd, self.stage_bwd)]

    @property
    def slowest_stage(self) -> float:
        return max(self.stage_times)


def layout_from_cuts(cuts: list[int], layers: int) -> Layout:
    """Stages from cut points over the item sequence (item 0 = E, items 1..n = layers, item n+1 = L)."""
    stages = []
    bounds = [0, *cuts, layers + 2]
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        first_layer, last_layer = max(lo, 1) - 1, min(hi, layers + 1) - 1
        stages.append(StageSpec(lo == 0, range(first_layer, max(first_layer, last_layer)), hi == layers + 2))
    return Layout(tuple(stages))


def stage_times(items: ItemTimes, layout: Layout) -> tuple[list[float], list[float]]:
    """Forward and backward time of one microbatch on each stage of ``layout``: the items it holds, summed."""
    fwd, bwd = [], []
    for st in layout.stages:
        idx = ([0] if st.embedding else []) + [i + 1 for i in st.layers] + ([items.layers + 1] if st.loss else [])
        fwd.append(sum(items.fwd[i] for i in idx))
        bwd.append(sum(items.bwd[i] for i in idx))
    return fwd, bwd


def plan_for(layout: Layout, items: ItemTimes, pp: int, microbatches: int, p2p_latency: float = 0.0) -> Plan:
    """Simulate ``layout`` with ``items``' times: 1F1B for one chunk per rank, interleaved for more."""
    _layout("plan_for", layout)
    arg = _run_args("plan_for", items, pp, microbatches, p2p_latency)
    if layout.num_layers != items.layers:
        raise LayoutError(f"the layout has {layout.num_layers} layers but the item times cover {items.layers}")
    layout._check(arg, pp, None)
    fwd, bwd = stage_times(items, layout)
    chunks = layout.chunks(pp)
    sched = build_schedule("interleaved" if chunks > 1 else "1f1b", pp, microbatches, chunks if chunks > 1 else None)
    res = simulate(sched, fwd=fwd, bwd=bwd, p2p_latency=p2p_latency)
    return Plan(layout, fwd, bwd, res.makespan, res.bubble_fraction)


def _run_args(func: str, items, pp, microbatches, p2p_latency) -> Arguments:
    """What :func:`plan_for` and :func:`balance` simulate with: item times, ranks, microbatches, latency."""
    arg = Arguments(func, LayoutError)
    arg.instance("items", items, ItemTimes, "an ItemTimes (ItemTimes.uniform, item_times_from_flops)")
    arg.integer("pp", pp, limit="MAX_RANKS")
    arg.integer("microbatches", microbatches, limit="MAX_MICROBATCHES", none=func == "balance")
    arg.number("p2p_latency", p2p_latency)
    return arg


def best_cuts(costs: list[float], parts: int) -> list[int]:
    """Cut ``costs`` into ``parts`` contiguous non-empty pieces minimising the largest piece sum (exact DP;
    ties broken towards the smoothest cut)."""
    arg = Arguments("best_cuts", LayoutError)
    costs = arg.numbers("costs", costs, most=MAX_LAYERS + 2)  # the items E, t..., L: quadratic in them
    arg.integer("parts", parts)
    n = len(costs)
    if not 1 <= parts <= n:
        items = f"{n} items" + (f" (E, {n - 2} layers, L)" if n >= 2 else "")
        arg.fail(f"arguments costs and parts: cannot cut {items} into {shown(parts)} non-empty stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    # Pass 1: the smallest possible slowest stage.  Pieces only grow as a cut moves left, so the
    # scan stops once a piece alone is no better than the best found.
    slowest, _ = _partition(prefix, parts, combine=max, stop=lambda piece, best: piece >= best)
    # Pass 2: among cuts whose every piece is at most that, the one with the smallest sum of squared
    # piece times -- as even as possible below the bottleneck, not just any optimum.
    limit = slowest + 1e-9 * max(1.0, abs(slowest))
    _, cuts = _partition(prefix, parts, combine=lambda prev, piece: prev + piece * piece,
                         stop=lambda piece, best: piece > limit)
    return cuts


def _partition(prefix: list[float], parts: int, combine, stop) -> tuple[float, list[int]]:
    """Dynamic programme over (stages used, items covered): ``best[k][j]`` is the best value of the
    first ``j`` items cut into ``k`` stages, ``combine(best[k-1][i], piece)`` extends it by the piece
    ``i..j-1``, and ``stop(piece, best so far)`` ends the leftward scan.  Returns the optimum and its cuts."""
    n = len(prefix) - 1
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for j in range(k, n - (parts - k) + 1):
            row, value, arg = best[k - 1], inf, k - 1
            for i in range(j - 1, k - 2, -1):  # the last stage is items i .. j-1
                piece = prefix[j] - prefix[i]
                if stop(piece, value):
                    break
                candidate = combine(row[i], piece)
                if candidate < value:
                    value, arg = candidate, i
            best[k][j], cut[k][j] = value, arg
    cuts, j = [], n
    for k in range(parts, 0, -1):
        j = cut[k][j]
        cuts.append(j)
    return best[parts][n], sorted(cuts)[1:]  # drop the leading 0


@dataclass
class Balance:
    best: Plan
    even: Plan

    def report(self) -> str:
        lines = [f"{'':<9} {'layout':<48} {'slowest stage':>13} {'step time':>10} {'bubble':>7}"]
        for name, plan in (("even", self.even), ("balanced", self.best)):
            text = str(plan.layout)
            text = text if len(text) <= 48 else text[:45] + "..."
            lines.append(f"{name:<9} {text:<48} {plan.slowest_stage:>13.4g} {plan.makespan:>10.4g} "
                         f"{plan.bubble_fraction:>7.3f}")
        lines.append(f"balanced layout: {self.best.layout}")
        lines.append("per-stage time (fwd+bwd per microbatch), even -> balanced:")
        for k, (a, b) in enumerate(zip(self.even.stage_times, self.best.stage_times)):
            lines.append(f"  stage {k:>2}: {a:>10.4g} -> {b:>10.4g}   {self.even.layout.stages[k].text():>8} -> "
                         f"{self.best.layout.stages[k].text()}")
        gain = f"{self.even.makespan / self.best.makespan:.3f}x" if self.best.makespan else "n/a (every item takes 0)"
        lines.append(f"predicted speedup of the step: {gain}")
        return "\n".join(lines)


def even_split(layers: int, stages: int) -> Layout:
    """The even split, or as even as it gets (earlier stages take the extra layers)."""
    arg = Arguments("even_split", LayoutError)
    arg.integer("layers", layers, 0, limit="MAX_LAYERS")
    arg.integer("stages", stages, high=layers + 2, why=f"layers={layers}, E and L fill at most {layers + 2}")
    base, extra = divmod(layers, stages)
    return Layout.from_counts([base + (1 if k < extra else 0) for k in range(stages)])


def balance(items: ItemTimes, pp: int, chunks: int = 1, microbatches: int | None = None,
            p2p_latency: float = 0.0) -> Balance:
    """Find the layout minimising the slowest of the ``pp * chunks`` stages and compare it to the even split."""
    arg = _run_args("balance", items, pp, microbatches, p2p_latency)
    arg.integer("chunks", chunks, limit="MAX_CHUNKS")
    stages = pp * chunks
    if stages > len(items.fwd):
        arg.fail(f"pp={pp} x chunks={chunks} = {stages} stages are more than the {len(items.fwd)} items (E, "
                 f"{items.layers} layers, L) that fill them")
    microbatches = 2 * pp if microbatches is None else microbatches
    costs = [f + b for f, b in zip(items.fwd, items.bwd)]
    layout = layout_from_cuts(best_cuts(costs, stages), items.layers)
    best = plan_for(layout, items, pp, microbatches, p2p_latency)
    even = plan_for(even_split(items.layers, stages), items, pp, microbatches, p2p_latency)
    return Balance(best, even)
