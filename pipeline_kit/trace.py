"""The one result format: a step op by op, simulated or measured -- and what can be read from it.

A *trace* is a JSON-ready dict, the same whoever made it::

    schedule, pp, microbatches, chunks, source, makespan, p2p_latency, layers, layout,
    timeline: [{rank, op, kind, microbatch, chunk, stage, start, end}, ...]    one per op
    waits:    [{rank, peer, direction, microbatch, chunk, stage, start, end}, ...]
              one per P2P receive that had to wait, inside the op it fed

``pipeline_kit.run --trace`` writes one (times in seconds; an op's span starts when the rank turned
to it, so it includes the wait for its input).  :func:`from_sim` makes the same from a simulation,
and :class:`Timeline` reads either for drawing and analysis: idle gaps (the bubble), warmup /
steady / cooldown phases, the first backward, live activations, and per-stage service times (an
op's duration minus the P2P wait inside it, M049).  Imports neither torch nor matplotlib.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

from .inputs import Field, InputError, array, check_object, integer, nullable, number, read_json, text
from .limits import LimitError
from .schedules import PLACEMENTS, SCHEDULES


class TraceError(ValueError):
    pass


# -- the format ------------------------------------------------------------------------------------------
def op_record(schedule, rank: int, op, stage: int, start: float, end: float) -> dict:
    """One op of a trace's timeline (the simulator's, the executor's)."""
    return {"rank": rank, "op": schedule.op_text(op), "kind": op.kind, "microbatch": op.microbatch,
            "chunk": op.chunk, "stage": stage, "start": start, "end": end}


def wait_record(rank: int, peer: int, direction: str, microbatch: int, chunk: int, stage: int, start: float,
                end: float) -> dict:
    """One P2P wait: ``rank`` waited from ``start`` to ``end`` for the message from ``peer``."""
    return {"rank": rank, "peer": peer, "direction": direction, "microbatch": microbatch, "chunk": chunk,
            "stage": stage, "start": start, "end": end}


def new_trace(schedule, source: str, makespan: float, timeline: list[dict], waits: list[dict],
              p2p_latency: float = 0.0, layers: int | None = None, layout: str | None = None) -> dict:
    """A trace of ``schedule`` with its fields in the canonical order."""
    trace = {"schedule": schedule.name, "pp": schedule.pp, "microbatches": schedule.microbatches,
             "chunks": schedule.chunks}
    if schedule.placement != "looped":
        trace["placement"] = schedule.placement
    trace.update({"source": source, "makespan": makespan, "p2p_latency": p2p_latency, "layers": layers,
                  "layout": layout, "timeline": timeline, "waits": waits})
    return trace


def from_sim(result, per_second: float = 1.0, source: str = "simulator", p2p_latency: float = 0.0,
             layers: int | None = None, layout: str | None = None) -> dict:
    """A simulated step as a trace in the runtime's format; times (and ``p2p_latency``) are divided by
    ``per_second``, the simulator's time units per second (1000 when they are milliseconds).

    As in a measured run, an op that waited for a message starts when its rank turned to it: the
    wait is inside the op.
    """
    sched = result.schedule
    waited = {(w.rank, w.stage, w.microbatch, w.direction): w.start for w in result.waits}
    timeline = []
    for e in result.events:
        direction = "forward" if e.op.kind == "F" else "backward"
        start = waited.get((e.rank, e.stage, e.op.microbatch, direction), e.start)
        timeline.append(op_record(sched, e.rank, e.op, e.stage, start / per_second, e.end / per_second))
    waits = [wait_record(w.rank, w.peer, w.direction, w.microbatch, sched.chunk_of(w.stage), w.stage,
                         w.start / per_second, w.end / per_second) for w in result.waits]
    return new_trace(sched, source, result.makespan / per_second, timeline, waits, p2p_latency / per_second, layers,
                     layout)


# A trace file, one line a field (fields the kit does not use are allowed and ignored).
TRACE_JSON = {
    "schedule": Field(text(*SCHEDULES, *(f"{name}-forward-only" for name in SCHEDULES)), required=True),
    "pp": Field(integer(1, "MAX_RANKS"), required=True),
    "microbatches": Field(integer(1, "MAX_MICROBATCHES"), required=True),
    "chunks": Field(integer(1, "MAX_CHUNKS"), required=True),
    "placement": Field(text(*PLACEMENTS), default="looped"),
    "timeline": Field(array(lambda e, where: check_object(e, TRACE_OP, where, ignore_unknown=True), "op events"),
                      required=True),
    "waits": Field(array(lambda w, where: check_object(w, TRACE_WAIT, where, ignore_unknown=True), "P2P waits"),
                   default=[]),
    "makespan": Field(nullable(number()), default=None),
    "p2p_latency": Field(number(), default=0.0),
    "layers": Field(nullable(integer(1, "MAX_LAYERS")), default=None),
    "layout": Field(nullable(text()), default=None),
    "source": Field(text(), default="runtime"),
}
TRACE_OP = {  # one entry of "timeline" (see op_record)
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
              "end": Field(number(), required=True)}  # one entry of "waits" (see wait_record)


def load_trace(path: str) -> dict:
    """Read a trace file, checked against :data:`TRACE_JSON` and for ranges (an op's rank below pp, its
    stage below pp x chunks, no end before its start); the error names the file, the field and what is
    wrong with it."""
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
    pp, chunks, mbs = fields["pp"], fields["chunks"], fields["microbatches"]
    for i, e in enumerate(fields["timeline"]):
        for key, bound in (("rank", pp), ("stage", pp * chunks), ("microbatch", mbs), ("chunk", chunks)):
            if e[key] >= bound:
                raise TraceError(f"{where}: field 'timeline'[{i}]: {key} {e[key]} is out of range 0..{bound - 1}")
        if e["end"] < e["start"]:
            raise TraceError(f"{where}: field 'timeline'[{i}]: end {e['end']} is before start {e['start']}")
        if e["op"] is None:
            e["op"] = f"{e['kind']}{e['microbatch']}" + (f"c{e['chunk']}" if chunks > 1 else "")
    for i, w in enumerate(fields["waits"]):
        if w["rank"] >= pp or w["end"] < w["start"]:
            raise TraceError(f"{where}: field 'waits'[{i}]: rank must be below pp={pp} and end not before start")
    if fields["makespan"] is None:
        fields["makespan"] = max(e["end"] for e in fields["timeline"])
    return {**data, **fields}


# -- reading a step ------------------------------------------------------------------------------------
@dataclass
class Timeline:
    """Per-op boxes of one step, whatever produced them.  Times in ``unit``."""

    pp: int
    chunks: int
    ops: list[dict]  # rank, op, kind, microbatch, chunk, stage, start, end
    transfers: list[dict] = field(default_factory=list)  # src, dst, start, end (simulated runs)
    waits: list[dict] = field(default_factory=list)  # rank, start, end (measured runs)
    title: str = ""
    unit: str = "time"
    placement: str = "looped"  # "v": chunk 0 of rank r is stage r, chunk 1 is stage 2 pp - 1 - r

    @classmethod
    def from_sim(cls, result, title: str | None = None, unit: str = "time units") -> Timeline:
        d = result.to_dict()
        s = result.schedule
        return cls(s.pp, s.chunks, d["timeline"], d["transfers"], [],
                   title if title is not None else f"{s.name}, pp={s.pp}, M={s.microbatches}"
                   + (f", v={s.chunks}" if s.chunks > 1 else "") + (", V placement" if s.placement == "v" else ""),
                   unit, s.placement)

    @classmethod
    def from_trace(cls, trace: dict, title: str | None = None) -> Timeline:
        """A trace (times in seconds, drawn in ms).

        A measured op starts by receiving its input; the box is drawn from the end of that wait, so
        waiting shows as idle time (the bubble), exactly as in a simulated timeline.
        """
        scale = 1e3
        waits = [{**w, "start": w["start"] * scale, "end": w["end"] * scale} for w in trace.get("waits", [])]
        by_rank: dict[int, list[dict]] = {}
        for w in waits:
            by_rank.setdefault(w["rank"], []).append(w)
        ops = []
        for e in trace["timeline"]:
            start, end = e["start"] * scale, e["end"] * scale
            inside = [w["end"] for w in by_rank.get(e["rank"], ())
                      if w["start"] >= start - 1e-9 and w["end"] <= end + 1e-9]
            ops.append({**e, "start": max([start, *inside]), "end": end})
        name = trace.get("schedule", "run")
        return cls(trace["pp"], trace.get("chunks", 1), ops, [], waits,
                   title if title is not None else f"measured: {name}, pp={trace['pp']}, M={trace['microbatches']}",
                   "ms", trace.get("placement", "looped"))

    @property
    def makespan(self) -> float:
        return max((o["end"] for o in self.ops), default=0.0)

    def stages_of(self, rank: int) -> list[int]:
        """The virtual stages ``rank`` ran, read from its ops (so a drawing never re-derives the placement)."""
        return sorted({o["stage"] for o in self.ops if o["rank"] == rank})

    def rank_ops(self, rank: int) -> list[dict]:
        return sorted((o for o in self.ops if o["rank"] == rank), key=lambda o: o["start"])

    def idle_gaps(self, rank: int) -> list[tuple[float, float]]:
        """Intervals where ``rank`` computes nothing, from 0 to the step's makespan."""
        gaps, t = [], 0.0
        for o in self.rank_ops(rank):
            if o["start"] > t + 1e-12:
                gaps.append((t, o["start"]))
            t = max(t, o["end"])
        if self.makespan > t + 1e-12:
            gaps.append((t, self.makespan))
        return gaps

    def phases(self, rank: int) -> dict[str, tuple[float, float]]:
        """Warmup, steady and cooldown of ``rank``, counted as Megatron's loops count them.

        The steady state is a run of (forward, backward) pairs: it starts with the forward right
        before the first backward and ends with the backward right after the last forward.  Warmup
        is the forwards before it (none on the last rank), cooldown the backwards after it.
        When every forward precedes every backward (M <= pp - rank), the order alone cannot tell
        Megatron's "warmup M, no pair" from "warmup M - 1, one pair"; this reads it as one pair, so
        for M < pp - rank it shows one warmup forward fewer than Megatron's min(pp - rank - 1, M).
        """
        ops = self.rank_ops(rank)
        backs = [i for i, o in enumerate(ops) if o["kind"] != "F"]
        fwds = [i for i, o in enumerate(ops) if o["kind"] == "F"]
        if not backs or not fwds:
            return {}
        steady_start = max(backs[0] - 1, 0)
        steady_end = min(fwds[-1] + 2, len(ops))  # one past the backward after the last forward
        out = {}
        if steady_start > 0:
            out["warmup"] = (ops[0]["start"], ops[steady_start]["start"])
        out["steady"] = (ops[steady_start]["start"], ops[steady_end - 1]["end"])
        if steady_end < len(ops):
            out["cooldown"] = (ops[steady_end]["start"], ops[-1]["end"])
        return out

    def first_backward(self) -> dict | None:
        backs = [o for o in self.ops if o["kind"] in ("B", "I")]
        return min(backs, key=lambda o: (o["start"], -o["rank"])) if backs else None


def live_activations(tl: Timeline, rank: int) -> list[tuple[float, int]]:
    """Step function ``[(time, live count from then on), ...]`` for ``rank`` (M052).

    A microbatch-chunk's activations are live from the start of its forward until its backward ends
    (``B``, or ``W`` for a split backward) -- the same count the simulator and the runtime report.
    """
    events = []
    done_by = {}
    for o in tl.ops:
        if o["rank"] != rank:
            continue
        if o["kind"] == "F":
            events.append((o["start"], +1))
        else:
            key = (o["microbatch"], o["chunk"])
            if o["kind"] in ("B", "W") or key not in done_by:
                done_by[key] = o
    for o in done_by.values():
        if o["kind"] in ("B", "W"):
            events.append((o["end"], -1))
    net: dict[float, int] = {}
    for t, d in events:  # a backward ending exactly when the next forward starts is one step, not a dip
        net[t] = net.get(t, 0) + d
    out, live = [(0.0, 0)], 0
    for t in sorted(net):
        if net[t]:
            live += net[t]
            out.append((t, live))
    return out


def peak(steps: list[tuple[float, int]]) -> tuple[float, int]:
    """The first time the step function reaches its highest value, and that value."""
    return max(steps, key=lambda s: (s[1], -s[0]))


# -- service times (M049) ------------------------------------------------------------------------------
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
