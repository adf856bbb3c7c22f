"""From a real run's trace to per-stage service times -- and back to a prediction (M049).

The runtime's trace records every op's start and end and every P2P wait.  An op's *service time*
is its duration minus the time it spent waiting for its input, i.e. what the stage itself costs.
Per stage and kind we report p50 and p95, and the total P2P wait; simulating the same schedule
with the measured times predicts the measured makespan, which is how a profile turns into a
trustworthy "what if" for re-cutting layers.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from ..inputs import Field, InputError, array, check_object, integer, nullable, number, read_json, text
from ..limits import LimitError
from ..schedules import SCHEDULES, ScheduleConfigError, build_schedule
from ..sim import simulate
from .balance import ItemTimes
from .spec import Layout, LayoutError


class TraceError(ValueError):
    pass


# A pipeline_kit.run --trace file, one line a field (fields the kit does not use are allowed and ignored).
TRACE_JSON = {
    "schedule": Field(text(*SCHEDULES, *(f"{name}-forward-only" for name in SCHEDULES)), required=True),
    "pp": Field(integer(1, "MAX_RANKS"), required=True),
    "microbatches": Field(integer(1, "MAX_MICROBATCHES"), required=True),
    "chunks": Field(integer(1, "MAX_CHUNKS"), required=True),
    "timeline": Field(array(lambda e, where: check_object(e, TRACE_EVENT, where, ignore_unknown=True), "op events"),
                      required=True),
    "waits": Field(array(lambda w, where: check_object(w, TRACE_WAIT, where, ignore_unknown=True), "P2P waits"),
                   default=[]),
    "makespan": Field(number(), default=None),
    "p2p_latency": Field(number(), default=0.0),
    "layers": Field(integer(1, "MAX_LAYERS"), default=None),
    "layout": Field(nullable(text()), default=None),
    "source": Field(text(), default="runtime"),
}
TRACE_EVENT = {
    "rank": Field(integer(0), required=True),
    "kind": Field(text("F", "B", "I", "W"), required=True),
    "microbatch": Field(integer(0), required=True),
    "chunk": Field(integer(0), required=True),
    "stage": Field(integer(0), required=True),
    "start": Field(number(), required=True),
    "end": Field(number(), required=True),
    "op": Field(text(), default=None),
}
TRACE_WAIT = {"rank": Field(integer(0), required=True), "start": Field(number(), required=True),
              "end": Field(number(), required=True)}


def load_trace(path: str) -> dict:
    """A ``pipeline_kit.run --trace`` file, checked against :data:`TRACE_JSON` and for ranges (an event's
    rank below pp, its stage below pp x chunks, end not before start), or :class:`TraceError`."""
    where = f"--trace {path}"
    if not os.path.isfile(path):
        raise TraceError(f"{where}: cannot read it ({'not a file' if os.path.exists(path) else 'no such file'})")
    try:
        data = read_json(path, "--trace")
        fields = check_object(data, TRACE_JSON, where, ignore_unknown=True)
    except (InputError, LimitError) as exc:
        raise TraceError(str(exc)) from None
    if not fields["timeline"]:
        raise TraceError(f"{where}: field 'timeline' is empty; a trace holds one event per op of the step")
    pp, stages, mbs = fields["pp"], fields["pp"] * fields["chunks"], fields["microbatches"]
    for i, e in enumerate(fields["timeline"]):
        for key, bound in (("rank", pp), ("stage", stages), ("microbatch", mbs), ("chunk", fields["chunks"])):
            if e[key] >= bound:
                raise TraceError(f"{where}: field 'timeline'[{i}]: {key} {e[key]} is out of range 0..{bound - 1}")
        if e["end"] < e["start"]:
            raise TraceError(f"{where}: field 'timeline'[{i}]: end {e['end']} is before start {e['start']}")
        if e["op"] is None:
            e["op"] = f"{e['kind']}{e['microbatch']}" + (f"c{e['chunk']}" if fields["chunks"] > 1 else "")
    for i, w in enumerate(fields["waits"]):
        if w["rank"] >= pp or w["end"] < w["start"]:
            raise TraceError(f"{where}: field 'waits'[{i}]: rank must be below pp={pp} and end not before start")
    if fields["makespan"] is None:
        fields["makespan"] = max((e["end"] for e in fields["timeline"]), default=0.0)
    return {**data, **fields}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class StageService:
    stage: int
    samples: dict[str, list[float]]  # kind -> service times (seconds)
    p2p_wait: float

    def p50(self, kind: str) -> float:
        return _percentile(self.samples.get(kind, []), 0.5)

    def p95(self, kind: str) -> float:
        return _percentile(self.samples.get(kind, []), 0.95)

    def mean(self, kind: str) -> float:
        values = self.samples.get(kind, [])
        return statistics.fmean(values) if values else 0.0


def service_times(trace: dict) -> list[StageService]:
    """Per virtual stage: every op's duration minus the P2P wait inside it, by kind, and the total wait."""
    stages = trace["pp"] * trace["chunks"]
    waits_by_rank: dict[int, list[tuple[float, float]]] = {}
    for w in trace.get("waits", []):
        waits_by_rank.setdefault(w["rank"], []).append((w["start"], w["end"]))
    out = [StageService(s, {}, 0.0) for s in range(stages)]
    for e in trace["timeline"]:
        waited = sum(max(0.0, min(e["end"], b) - max(e["start"], a)) for a, b in waits_by_rank.get(e["rank"], ()))
        svc = out[e["stage"]]
        svc.samples.setdefault(e["kind"], []).append(max(0.0, e["end"] - e["start"] - waited))
        svc.p2p_wait += waited
    return out


def stage_fwd_bwd(services: list[StageService], stat: str = "mean") -> tuple[list[float], list[float], list[float]]:
    """Per-stage forward, full-backward and weight-grad times from measured service times."""
    get = {"mean": StageService.mean, "p50": StageService.p50}[stat]
    fwd = [get(s, "F") for s in services]
    bwd = [get(s, "B") if "B" in s.samples else get(s, "I") + get(s, "W") for s in services]
    wgrad = [get(s, "W") if "W" in s.samples else b / 2 for s, b in zip(services, bwd)]
    return fwd, bwd, wgrad


def simulate_from_trace(trace: dict, stat: str = "mean", scale: float = 1.0):
    """Simulate the traced schedule with the trace's own service times and P2P latency (times x ``scale``)."""
    services = service_times(trace)
    fwd, bwd, wgrad = ([t * scale for t in xs] for xs in stage_fwd_bwd(services, stat))
    chunks = trace["chunks"]
    name = trace["schedule"].replace("-forward-only", "")
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
    head = f"{'stage':>5} " + " ".join(f"{k + ' p50 ms':>9} {k + ' p95 ms':>9}" for k in kinds) + f" {'P2P wait ms':>12}"
    lines = [head]
    for s in services:
        cells = " ".join(f"{s.p50(k) * 1e3:>9.2f} {s.p95(k) * 1e3:>9.2f}" for k in kinds)
        lines.append(f"{s.stage:>5} {cells} {s.p2p_wait * 1e3:>12.2f}")
    return "\n".join(lines)


def item_times_from_trace(services: list[StageService], layout: Layout) -> ItemTimes:
    """Per-item (E, each layer, L) times fitted to measured stage times.

    A layer's time is the median, over stages holding only decoder layers, of stage time per layer
    (all stages if none is that plain); the embedding and the loss get whatever their stage
    measured beyond its layers.
    """
    if len(services) != layout.num_stages:
        raise LayoutError(f"the trace has {len(services)} stages but the layout {layout} has {layout.num_stages}")
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
