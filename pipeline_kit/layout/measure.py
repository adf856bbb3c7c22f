"""From a real run's trace to per-stage service times -- and back to a prediction (M049).

The runtime's trace records every op's start and end and every P2P wait.  An op's *service time*
is its duration minus the time it spent waiting for its input, i.e. what the stage itself costs
(:func:`~pipeline_kit.trace.service_times`, re-exported here with the other trace readers).
Per stage and kind we report p50 and p95, and the total P2P wait; simulating the same schedule
with the measured times predicts the measured makespan, which is how a profile turns into a
trustworthy "what if" for re-cutting layers.
"""

from __future__ import annotations

import statistics

from ..inputs import listed
from ..limits import check_at_most, ops_per_microbatch_stage
from ..schedules import ScheduleConfigError, build_schedule
from ..sim import simulate
from ..trace import StageService, TraceError, load_trace, service_times, stage_fwd_bwd
from .balance import ItemTimes
from .spec import Layout, LayoutError, even_layout, parse_layout

__all__ = ["StageService", "TraceError", "check_rebuild_size", "format_services", "item_times_from_trace", "load_trace",
           "measured_items", "predict_from_trace", "service_times", "simulate_from_trace", "stage_fwd_bwd"]


def check_rebuild_size(trace: dict, limit: str = "MAX_OPS") -> None:
    """Refuse, before anything is built, a trace whose *claimed* schedule (its ``pp``, ``chunks`` and
    ``microbatches``, not the ops it holds) passes ``limit``: a one-op file that claims pp=1024 and 976
    microbatches is refused at once instead of simulating (and drawing) two million ops."""
    name = trace["schedule"].replace("-forward-only", "")
    ops = trace["pp"] * trace["chunks"] * trace["microbatches"] * ops_per_microbatch_stage(
        name, name != trace["schedule"])
    check_at_most(f"the trace's schedule ({trace['schedule']}, pp={trace['pp']}, chunks={trace['chunks']}, "
                  f"microbatches={trace['microbatches']}) has up to {ops:,} ops, which", ops, limit, "ops")


def simulate_from_trace(trace: dict, stat: str = "mean", scale: float = 1.0):
    """Simulate the traced schedule with the trace's own service times and P2P latency (times x ``scale``); its
    size is checked against ``MAX_OPS`` first (:func:`check_rebuild_size`; a drawing checks ``MAX_DRAW_OPS``
    before it gets here)."""
    check_rebuild_size(trace)
    chunks = trace["chunks"]
    name = trace["schedule"].replace("-forward-only", "")
    services = service_times(trace)
    fwd, bwd, wgrad = ([t * scale for t in xs] for xs in stage_fwd_bwd(services, stat))
    try:
        sched = build_schedule(name, trace["pp"], trace["microbatches"], chunks if chunks > 1 else None)
    except ScheduleConfigError as exc:
        raise TraceError(f"the trace's schedule cannot be rebuilt: {exc}") from None
    return simulate(sched, fwd=fwd, bwd=bwd, wgrad=wgrad, p2p_latency=trace.get("p2p_latency", 0.0) * scale)


def predict_from_trace(trace: dict, stat: str = "mean") -> float:
    """The makespan the simulator predicts from the trace's own service times and P2P latency."""
    return simulate_from_trace(trace, stat).makespan


def format_services(services: list[StageService]) -> str:
    kinds = sorted({k for s in services for k in s.samples}, key="FBIW".index)
    columns = " ".join(f"{k + ' p50 ms':>9} {k + ' p95 ms':>9}" for k in kinds)
    head = f"{'stage':>5} {columns} {'P2P wait ms':>12}"
    lines = [head]
    for s in services:
        cells = " ".join(f"{s.p50(k) * 1e3:>9.2f} {s.p95(k) * 1e3:>9.2f}" for k in kinds)
        lines.append(f"{s.stage:>5} {cells} {s.p2p_wait * 1e3:>12.2f}")
    return "\n".join(lines)


def measured_items(path: str, layers: int) -> tuple[dict, Layout, list[StageService], ItemTimes]:
    """A ``--trace FILE``'s trace, its layout, its stages' service times and the per-item times fitted to them
    (seconds), for a model of ``layers`` decoder layers -- what ``balance --trace`` and ``plan --trace`` read.
    Raises :class:`TraceError` or :class:`LayoutError` saying what is wrong with the file."""
    trace = load_trace(path)
    if trace["layout"] is None and trace["layers"] is None:
        raise TraceError("the trace has neither a 'layout' nor a 'layers' field, so its stages are unknown")
    run_layout = parse_layout(trace["layout"] or str(even_layout(trace["layers"], trace["pp"])))
    services = service_times(trace)
    items = item_times_from_trace(services, run_layout)
    if items.layers != layers:
        raise TraceError(f"the traced run had {items.layers} layers but --config has {layers}")
    if not any(items.fwd + items.bwd):
        raise TraceError("every op in the trace takes no time, so there are no costs to take from it")
    return trace, run_layout, services, items


def item_times_from_trace(services: list[StageService], layout: Layout) -> ItemTimes:
    """Per-item (E, each layer, L) times fitted to measured stage times.

    A layer's time is the median, over stages holding only decoder layers, of stage time per layer
    (all stages if none is that plain); the embedding and the loss get whatever their stage
    measured beyond its layers.
    """
    if len(services) != layout.num_stages:
        raise LayoutError(f"the trace has {len(services)} stages but the layout {layout} has {layout.num_stages}")
    empty = [s.stage for s in services if not s.samples]
    if empty:  # a partial trace: a "balanced" layout from it would rest on stages it never measured
        held = sum(len(x) for s in services for x in s.samples.values())
        raise LayoutError(f"the trace holds {held:,} op(s), none of them on stage(s) {listed(empty)}: every stage "
                          "needs measured ops to balance (trace a whole step)")
    fwd, bwd, _ = stage_fwd_bwd(services)
    plain = [k for k, st in enumerate(layout.stages) if not st.embedding and not st.loss and len(st.layers)]
    pool = plain or [k for k, st in enumerate(layout.stages) if len(st.layers)]
    if not pool:
        raise LayoutError("no stage holds decoder layers, so a layer's time cannot be measured")
    per_layer_f = statistics.median(fwd[k] / len(layout.stages[k].layers) for k in pool)
    per_layer_b = statistics.median(bwd[k] / len(layout.stages[k].layers) for k in pool)
    first, last = layout.stages[0], layout.stages[-1]
    e_f = max(0.0, fwd[0] - len(first.layers) * per_layer_f)
    e_b = max(0.0, bwd[0] - len(first.layers) * per_layer_b)
    l_f = max(0.0, fwd[-1] - len(last.layers) * per_layer_f)
    l_b = max(0.0, bwd[-1] - len(last.layers) * per_layer_b)
    n = layout.num_layers
    return ItemTimes((e_f, *([per_layer_f] * n), l_f), (e_b, *([per_layer_b] * n), l_b))
