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
from operator import itemgetter

from .arguments import Arguments, is_number, json_object, shown
from .inputs import Field, InputError, array, check_object, excerpt, integer, nullable, number, read_json, text
from .limits import MAX_NUMBER, LimitError
from .schedules import KINDS, PLACEMENTS, SCHEDULES, Op, Schedule
from .schedules.ops import need_schedule


class TraceError(ValueError):
    """A trace (a file, or a dict given to a function here) is not in the format; the message names the field."""


# -- the format ------------------------------------------------------------------------------------------
def op_record(schedule, rank: int, op, stage: int, start: float, end: float) -> dict:
    """One op of a trace's timeline (the simulator's, the executor's)."""
    need_schedule("op_record", schedule)
    arg = Arguments("op_record")
    arg.integer("rank", rank, 0, schedule.pp - 1)
    arg.instance("op", op, Op, "an Op")
    arg.integer("stage", stage, 0, schedule.stages - 1)
    _times(arg, start, end)
    return _op_record(schedule, rank, op, stage, start, end)


def _op_record(schedule, rank: int, op, stage: int, start: float, end: float) -> dict:
    return {"rank": rank, "op": op.text(schedule.chunks > 1), "kind": op.kind, "microbatch": op.microbatch,
            "chunk": op.chunk, "stage": stage, "start": start, "end": end}


def _times(arg: Arguments, start, end) -> None:
    """``start`` and ``end`` of a span: non-negative numbers (as in a trace file), the end not before the start."""
    arg.number("start", start)
    arg.number("end", end)
    if end < start:
        arg.refuse("end", f"a number >= start = {shown(start)}", end)


def wait_record(rank: int, peer: int, direction: str, microbatch: int, chunk: int, stage: int, start: float,
                end: float) -> dict:
    """One P2P wait: ``rank`` waited from ``start`` to ``end`` for the message from ``peer``."""
    arg = Arguments("wait_record")
    arg.integer("rank", rank, 0, limit="MAX_RANKS")
    arg.integer("peer", peer, 0, limit="MAX_RANKS")
    arg.text("direction", direction, ("forward", "backward"))
    arg.integer("microbatch", microbatch, 0, limit="MAX_MICROBATCHES")
    arg.integer("chunk", chunk, 0, limit="MAX_CHUNKS")
    arg.integer("stage", stage, 0)
    _times(arg, start, end)
    return _wait_record(rank, peer, direction, microbatch, chunk, stage, start, end)


def _wait_record(rank: int, peer: int, direction: str, microbatch: int, chunk: int, stage: int, start: float,
                 end: float) -> dict:
    return {"rank": rank, "peer": peer, "direction": direction, "microbatch": microbatch, "chunk": chunk,
            "stage": stage, "start": start, "end": end}


def _trace_fields(arg: Arguments, source, p2p_latency, layers, layout) -> None:
    """The arguments :func:`new_trace` and :func:`from_sim` share."""
    arg.text("source", source)
    arg.number("p2p_latency", p2p_latency)
    arg.integer("layers", layers, none=True, limit="MAX_LAYERS")
    arg.text("layout", layout, none=True)


def _sim_result(arg: Arguments, result, name: str = "result"):
    """A :class:`~pipeline_kit.sim.SimResult` (known by its fields: the simulator imports this module)."""
    if not (isinstance(getattr(result, "schedule", None), Schedule)
            and all(isinstance(getattr(result, attr, None), list) for attr in ("events", "waits", "busy"))):
        arg.refuse(name, "a SimResult (from simulate)", result, wrong=True)
    return result


def new_trace(schedule, source: str, makespan: float, timeline: list[dict], waits: list[dict],
              p2p_latency: float = 0.0, layers: int | None = None, layout: str | None = None) -> dict:
    """A trace of ``schedule`` with its fields in the canonical order."""
    need_schedule("new_trace", schedule)
    arg = Arguments("new_trace")
    arg.number("makespan", makespan)
    for name, value in (("timeline", timeline), ("waits", waits)):
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            arg.refuse(name, "a list of dicts (see op_record and wait_record)", value, wrong=True)
    _trace_fields(arg, source, p2p_latency, layers, layout)
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
    arg = Arguments("from_sim")
    _sim_result(arg, result)
    arg.number("per_second", per_second, positive=True)
    _trace_fields(arg, source, p2p_latency, layers, layout)
    sched = result.schedule
    waited = {(w.rank, w.stage, w.microbatch, w.direction): w.start for w in result.waits}
    timeline = []
    for e in result.events:
        direction = "forward" if e.op.kind == "F" else "backward"
        start = waited.get((e.rank, e.stage, e.op.microbatch, direction), e.start)
        timeline.append(_op_record(sched, e.rank, e.op, e.stage, start / per_second, e.end / per_second))
    waits = [_wait_record(w.rank, w.peer, w.direction, w.microbatch, sched.chunk_of(w.stage), w.stage,
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
    Arguments("load_trace", TraceError).text("path", path)
    where = f"--trace {path if len(path) <= 100 and path.isprintable() else excerpt(path)}"
    if not os.path.isfile(path):
        raise TraceError(f"{where}: cannot read it ({'not a file' if os.path.exists(path) else 'no such file'})")
    try:
        data = read_json(path, "--trace")
    except (InputError, LimitError) as exc:
        raise TraceError(str(exc)) from None
    return check_trace(data, where)


def check_trace(data, where: str) -> dict:
    """``data`` checked as :func:`load_trace` checks a file (``where`` starts every message), defaults filled in."""
    Arguments("check_trace", TraceError).text("where", where)
    json_object(data, where, TRACE_JSON, TraceError)
    try:
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


def _trace_arg(func: str, trace) -> dict:
    """A trace handed to ``func`` (:func:`load_trace`'s, :func:`from_sim`'s), checked as a file is: first by
    :func:`_plain_trace`'s quick pass (what nearly every trace takes), else by :func:`check_trace`, which says
    what is wrong."""
    Arguments(func, TraceError).instance("trace", trace, dict, "a trace dict (from load_trace or from_sim)")
    return _plain_trace(trace) or check_trace(trace, f"{func}: argument trace")


_TRACE_HEAD = {key: f for key, f in TRACE_JSON.items() if key not in ("timeline", "waits")}
_EVENT_FIELDS = itemgetter("rank", "kind", "microbatch", "chunk", "stage", "start", "end")
_WAIT_FIELDS = itemgetter("rank", "start", "end")


def _plain_trace(trace: dict) -> dict | None:
    """``trace`` with its defaults filled in when its every event plainly passes :func:`check_trace` (whole
    numbers in range, float or int times in order), else None: a tenth of ``check_trace``'s time."""
    try:
        head = check_object(trace, _TRACE_HEAD, "trace", ignore_unknown=True)
    except (InputError, LimitError):
        return None
    pp, chunks, mbs = head["pp"], head["chunks"], head["microbatches"]
    timeline, waits = trace.get("timeline"), trace.get("waits", [])
    if not (isinstance(timeline, list) and timeline and isinstance(waits, list)):
        return None
    low, high, stages, kinds, times = 0.0, MAX_NUMBER, pp * chunks, set(KINDS), (int, float)  # as TRACE_OP
    events = []
    try:
        for e in timeline:
            rank, kind, m, c, st, start, end = _EVENT_FIELDS(e)  # a KeyError or TypeError: not plain
            op = e.get("op")
            if not (type(rank) is int and 0 <= rank < pp and type(kind) is str and kind in kinds and type(m) is int
                    and 0 <= m < mbs and type(c) is int and 0 <= c < chunks and type(st) is int and 0 <= st < stages
                    and type(start) in times and type(end) in times and low <= start <= end <= high
                    and type(e) is dict and (op is None or type(op) is str)):
                return None
            events.append(e if op is not None else {**e, "op": f"{kind}{m}" + (f"c{c}" if chunks > 1 else "")})
        for w in waits:
            rank, start, end = _WAIT_FIELDS(w)
            if not (type(w) is dict and type(rank) is int and 0 <= rank < pp and type(start) in times
                    and type(end) in times and low <= start <= end <= high):
                return None
    except (KeyError, TypeError):
        return None
    makespan = head["makespan"] if head["makespan"] is not None else max(e["end"] for e in events)
    return {**trace, **head, "timeline": events, "waits": waits, "makespan": makespan}


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

    def __post_init__(self) -> None:
        arg = Arguments("Timeline")
        arg.integer("pp", self.pp, limit="MAX_RANKS")
        arg.integer("chunks", self.chunks, limit="MAX_CHUNKS")
        for name in ("ops", "transfers", "waits"):
            items = getattr(self, name)
            if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
                arg.refuse(name, "a list of dicts", items, wrong=True)
        arg.text("title", self.title)
        arg.text("unit", self.unit)
        arg.text("placement", self.placement, PLACEMENTS)

    @classmethod
    def from_sim(cls, result, title: str | None = None, unit: str = "time units") -> Timeline:
        arg = Arguments("Timeline.from_sim")
        _sim_result(arg, result)
        arg.text("title", title, none=True)
        arg.text("unit", unit)
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
        checked = _trace_arg("Timeline.from_trace", trace)
        Arguments("Timeline.from_trace").text("title", title, none=True)
        scale = 1e3
        waits = [{**raw, **w, "start": w["start"] * scale, "end": w["end"] * scale}
                 for raw, w in zip(trace.get("waits", []), checked["waits"])]
        by_rank: dict[int, list[dict]] = {}
        for w in waits:
            by_rank.setdefault(w["rank"], []).append(w)
        ops = []
        for e in checked["timeline"]:
            start, end = e["start"] * scale, e["end"] * scale
            inside = [w["end"] for w in by_rank.get(e["rank"], ())
                      if w["start"] >= start - 1e-9 and w["end"] <= end + 1e-9]
            ops.append({**e, "start": max([start, *inside]), "end": end})
        pp, name = checked["pp"], checked["schedule"]
        return cls(pp, checked["chunks"], ops, [], waits,
                   title if title is not None else f"measured: {name}, pp={pp}, M={checked['microbatches']}",
                   "ms", checked["placement"])

    @property
    def makespan(self) -> float:
        return max((o["end"] for o in self.ops), default=0.0)

    def _rank(self, func: str, rank) -> int:
        return Arguments(f"Timeline.{func}").integer("rank", rank, 0, self.pp - 1)

    def stages_of(self, rank: int) -> list[int]:
        """The virtual stages ``rank`` ran, read from its ops (so a drawing never re-derives the placement)."""
        self._rank("stages_of", rank)
        return sorted({o["stage"] for o in self.ops if o["rank"] == rank})

    def rank_ops(self, rank: int) -> list[dict]:
        self._rank("rank_ops", rank)
        return sorted((o for o in self.ops if o["rank"] == rank), key=lambda o: o["start"])

    def idle_gaps(self, rank: int) -> list[tuple[float, float]]:
        """Intervals where ``rank`` computes nothing, from 0 to the step's makespan."""
        self._rank("idle_gaps", rank)
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
        self._rank("phases", rank)
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
    Arguments("live_activations").instance("tl", tl, Timeline, "a Timeline (Timeline.from_sim or from_trace)")
    tl._rank("live_activations", rank)
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
    if not (isinstance(steps, list) and steps and all(isinstance(s, tuple) and len(s) == 2 and type(s[1]) is int
                                                      and is_number(s[0]) for s in steps)):
        Arguments("peak").refuse("steps", "a non-empty list of (time, count) pairs (from live_activations)", steps,
                                 wrong=True)
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
    """One virtual stage's measured service times, by op kind (seconds), and its total P2P wait."""

    stage: int
    samples: dict[str, list[float]]  # kind -> service times (seconds)
    p2p_wait: float

    def __post_init__(self) -> None:
        arg = Arguments("StageService")
        arg.integer("stage", self.stage, 0)
        if not isinstance(self.samples, dict) or not all(
                isinstance(kind, str) and isinstance(times, list) and all(is_number(t) for t in times)
                for kind, times in self.samples.items()):
            arg.refuse("samples", "a dict from op kind (F, B, I, W; or a label of your own) to a list of "
                       "non-negative times", self.samples, wrong=True)
        arg.number("p2p_wait", self.p2p_wait)

    def _values(self, func: str, kind: str) -> list[float]:
        return self.samples.get(Arguments(f"StageService.{func}").text("kind", kind), [])

    def p50(self, kind: str) -> float:
        return _percentile(self._values("p50", kind), 0.5)

    def p95(self, kind: str) -> float:
        return _percentile(self._values("p95", kind), 0.95)

    def mean(self, kind: str) -> float:
        values = self._values("mean", kind)
        return statistics.fmean(values) if values else 0.0


def service_times(trace: dict) -> list[StageService]:
    """Per virtual stage: every op's duration minus the P2P wait inside it, by kind, and the total wait."""
    trace = _trace_arg("service_times", trace)
    stages = trace["pp"] * trace["chunks"]
    waits_by_rank: dict[int, list[tuple[float, float]]] = {}
    for w in trace["waits"]:
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
    arg = Arguments("stage_fwd_bwd")
    if not isinstance(services, list) or not all(isinstance(s, StageService) for s in services):
        arg.refuse("services", "a list of StageService (from service_times)", services, wrong=True)
    get = {"mean": StageService.mean, "p50": StageService.p50}[arg.text("stat", stat, ("mean", "p50"))]
    fwd = [get(s, "F") for s in services]
    bwd = [get(s, "B") if "B" in s.samples else get(s, "I") + get(s, "W") for s in services]
    wgrad = [get(s, "W") if "W" in s.samples else b / 2 for s, b in zip(services, bwd)]
    return fwd, bwd, wgrad
