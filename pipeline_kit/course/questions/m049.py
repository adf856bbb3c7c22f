"""M049 (lab 7): find the slow stage in a trace, name its root cause, predict the step from the critical
path, and design the experiment that proves a re-cut helps.

The traces are the lab's synthetic runs (:mod:`.synthetic`); every expected value is computed with the kit
(``service_times``, ``simulate_from_trace``, the simulator) from those traces, never typed in.
"""

from __future__ import annotations

import contextlib
import io
import statistics

from ...layout import (
    LayoutError,
    parse_layout,
    service_times,
)
from ...layout.measure import StageService, simulate_from_trace, stage_fwd_bwd
from ...schedules import build_schedule
from ...sim import simulate
from ...trace import Timeline
from ...grading.parts import Parts, listing, plural
from .common import (
    LabCheckFailed,
    book,
    call,
    check,
    close,
    counts_text,
    describe,
    draw_counts,
    drawn,
    expect_int,
    expect_keys,
    expect_number,
    expect_raises,
    expect_type,
    fail,
    first_match,
    student_layout,
)
from .m049_causes import (  # noqa: F401 -- lab07 re-exports them
    CAUSES,
    LAB_CASES,
    check_root_causes,
    expected_cause,
    hidden_cause_cases,
    lab_scenarios,
    scenario,
)
from .synthetic import (
    _raw_p50,
    lab_trace,
)

WHAT_TO_MEASURE = book("imbalance", "What to measure")  # where the book teaches what these checks find
CRITICAL_PATH = book("imbalance", "Recomputing the critical path")


# == M049 main ==========================================================================================
def expected_metrics(trace: dict) -> list[dict]:
    """Per stage: p50 F and B service time, total P2P wait, and idle = makespan - service times (all ms)."""
    makespan = max(e["end"] for e in trace["timeline"])
    out = []
    for s in service_times(trace):
        idle = (makespan - sum(sum(v) for v in s.samples.values())) * 1e3
        out.append({"F_p50": s.p50("F") * 1e3, "B_p50": s.p50("B") * 1e3, "wait": s.p2p_wait * 1e3, "idle": idle})
    return out


def expected_slowest(trace: dict) -> int:
    rows = expected_metrics(trace)
    return max(range(len(rows)), key=lambda k: rows[k]["F_p50"] + rows[k]["B_p50"])


def _metric_rows(stage_metrics, name: str, trace: dict) -> list[dict]:
    """The student's rows for one trace, their form checked: a list of one dict per stage, numbers in it."""
    got = call(stage_metrics, trace, name="stage_metrics")
    want = len(service_times(trace))
    expect_type(got, (list, tuple), f"stage_metrics({name}) (a list of one dict per stage)")
    if len(got) != want:
        fail(f"stage_metrics({name}) has {plural(len(got), 'row')}; the trace has {plural(want, 'stage')} "
             "(pp x chunks), one dict per stage, in stage order")
    for k, row in enumerate(got):
        expect_keys(row, ("F_p50", "B_p50", "wait", "idle"), f"stage_metrics({name})[{k}]")
        for key in ("F_p50", "B_p50", "wait", "idle"):
            expect_number(row[key], f"stage_metrics({name})[{k}][{key!r}] (a number of ms)")
    return got


def _service_part(name: str, trace: dict, rows: list[dict], want: list[dict]) -> None:
    services = service_times(trace)
    for k, (row, exp) in enumerate(zip(rows, want)):
        for key in ("F_p50", "B_p50"):
            value = float(row[key])
            if close(value, exp[key], abs_=1e-6):
                continue
            kind = key[0]
            raw = _raw_p50(trace, k, kind)
            why = first_match(value, {"raw": raw, "mean": services[k].mean(kind) * 1e3, "s": exp[key] / 1e3,
                                      "raw_s": raw / 1e3})
            if why in ("raw", "raw_s"):
                fail(f"{name}, stage {k}: {key} = {value:.4g} is the p50 of the ops' whole durations "
                     f"(end - start), P2P wait included; the service time subtracts the wait inside each op -- "
                     "what the stage itself costs, not how long it waited for a neighbour")
            if why == "mean":
                fail(f"{name}, stage {k}: {key} = {value:.4g} ms is the mean; use the median (p50): one slow "
                     "microbatch moves the mean, not the p50 (p95 is where the outliers show)")
            if why == "s":
                fail(f"{name}, stage {k}: {key} = {value:.4g} is in seconds (the trace's unit); report ms (the "
                     "value is right otherwise)")
            fail(f"{name}, stage {k}: {key} = {value:.4g} ms is not the p50 service time of its {kind} ops "
                 f"{WHAT_TO_MEASURE}")


def _wait_part(name: str, trace: dict, rows: list[dict], want: list[dict]) -> None:
    for k, (row, exp) in enumerate(zip(rows, want)):
        wait = float(row["wait"])
        if close(wait, exp["wait"], abs_=1e-6):
            continue
        if close(wait, exp["wait"] / 1e3, abs_=1e-9):
            fail(f"{name}, stage {k}: wait = {wait:.4g} is in seconds; report ms (the value is right otherwise)")
        fail(f"{name}, stage {k}: wait = {wait:.4g} ms is not what the P2P waits of rank {k % trace['pp']} "
             f"(trace['waits']) add up to {WHAT_TO_MEASURE}")


def _idle_part(name: str, trace: dict, rows: list[dict], want: list[dict]) -> None:
    timeline = Timeline.from_trace(trace)
    for k, (row, exp) in enumerate(zip(rows, want)):
        idle = float(row["idle"])
        gaps = sum(b - a for a, b in timeline.idle_gaps(k % trace["pp"]))  # the drawn bubble: also right
        if close(idle, exp["idle"], abs_=1e-6) or close(idle, gaps, abs_=1e-6):
            continue
        if close(idle, exp["wait"], abs_=1e-6):
            fail(f"{name}, stage {k}: idle = {idle:.4g} ms is only the P2P wait; a rank is also idle after "
                 "its last op until the step ends (the makespan) and in the gaps between its ops")
        if close(idle, exp["idle"] / 1e3, abs_=1e-9):
            fail(f"{name}, stage {k}: idle = {idle:.4g} is in seconds; report ms (the value is right otherwise)")
        fail(f"{name}, stage {k}: idle = {idle:.4g} ms; idle is the step's makespan minus the rank's "
             f"service times (waits, gaps and the tail after its last op) {WHAT_TO_MEASURE}")


def _slowest_part(slowest_stage, name: str, trace: dict, rows: list[dict] | None, want: list[dict]) -> None:
    got_slow = expect_int(call(slowest_stage, trace, name="slowest_stage"), f"slowest_stage({name}) (a stage index)")
    want_slow = expected_slowest(trace)
    own = (max(range(len(rows)), key=lambda k: float(rows[k]["F_p50"]) + float(rows[k]["B_p50"]))
           if rows else None)  # the largest F_p50 + B_p50 of the student's own rows: a wrong row costs once
    if got_slow in (want_slow, own):
        return
    raw = [_raw_p50(trace, k, "F") + _raw_p50(trace, k, "B") for k in range(len(want))]
    total = [w["F_p50"] + w["B_p50"] for w in want]
    if got_slow == max(range(len(raw)), key=raw.__getitem__):
        fail(f"slowest_stage({name}) is {got_slow}: that ranks the stages by raw op durations, which include "
             "the P2P waits inside the ops; rank them by p50 service time (F + B), with the waits taken out")
    if 0 <= got_slow < len(total):
        fail(f"slowest_stage({name}) is {got_slow}, but that stage does not have the largest p50 F + B service "
             f"time {WHAT_TO_MEASURE}")
    fail(f"slowest_stage({name}) is {describe(got_slow)}: not a stage of this {plural(len(total), 'stage')} trace")


@check
def check_metrics(stage_metrics, slowest_stage, traces) -> None:
    """Four parts, each over every trace in order: the p50 service times, the waits, the idle times, and
    ``slowest_stage`` (judged against the student's own rows too, so a wrong row costs its part only)."""
    parts, rows, form = Parts(), {}, None
    try:
        for i, (name, trace) in enumerate(traces):
            rows[i] = _metric_rows(stage_metrics, name, trace)
    except LabCheckFailed as exc:  # a wrong form fails the three parts of stage_metrics, named once
        form = str(exc)
    for check_part in (_service_part, _wait_part, _idle_part):
        if form is None:
            with parts.part():
                for i, (name, trace) in enumerate(traces):
                    check_part(name, trace, rows[i], expected_metrics(trace))
    with parts.part():
        for i, (name, trace) in enumerate(traces):
            _slowest_part(slowest_stage, name, trace, rows.get(i), expected_metrics(trace))
    if form is not None:
        raise LabCheckFailed(listing([form, *parts.failed]), lost=(3 + len(parts.failed)) / 4)
    parts.done()


# -- critical path -------------------------------------------------------------------------------------
def expected_step(trace: dict, fix_stage: int | None = None, stat: str = "p50", latency: bool = True) -> float:
    """Simulated makespan (ms) from the trace's service times; ``fix_stage`` gets the median of the others."""
    fwd, bwd, _ = stage_fwd_bwd(service_times(trace), stat)
    fwd, bwd = [x * 1e3 for x in fwd], [x * 1e3 for x in bwd]
    if fix_stage is not None:
        others = [k for k in range(len(fwd)) if k != fix_stage]
        fwd[fix_stage] = statistics.median(fwd[k] for k in others)
        bwd[fix_stage] = statistics.median(bwd[k] for k in others)
    sched = build_schedule("1f1b", trace["pp"], trace["microbatches"])
    return simulate(sched, fwd=fwd, bwd=bwd, p2p_latency=trace["p2p_latency"] * 1e3 if latency else 0.0).makespan


@check
def check_critical_path(predict_step_ms, traces) -> None:
    """Two parts, each over every trace in order: the prediction, and the prediction with a stage fixed (judged
    with the plain prediction's own slip, if it is a known one, so that slip costs its part only)."""
    parts, plain = Parts(), {}
    with parts.part():
        for i, (name, trace) in enumerate(traces):
            plain[i] = expect_number(call(predict_step_ms, trace, name="predict_step_ms"),
                                     f"predict_step_ms({name}) (ms)")
            _plain_prediction(name, trace, plain[i])
    with parts.part():
        for i, (name, trace) in enumerate(traces):
            own = _VARIANTS.get(_plain_slip(trace, plain[i]), {}) if i in plain else {}
            _fixed_prediction(predict_step_ms, name, trace, own)
    parts.done()


_VARIANTS = {"no latency": {"latency": False}, "mean": {"stat": "mean"}}


def _plain_slip(trace: dict, got: float) -> str | None:
    """The known slip a plain prediction ``got`` is ("ok" when right)."""
    want = simulate_from_trace(trace, "p50", scale=1e3).makespan
    if close(got, want, rel=1e-6):
        return "ok"
    pp, m = trace["pp"], trace["microbatches"]
    rows = expected_metrics(trace)
    raw = [_raw_p50(trace, k, "F") + _raw_p50(trace, k, "B") for k in range(len(rows))]
    return first_match(got, {
        "measured": trace["makespan"] * 1e3,
        "no latency": expected_step(trace, latency=False),
        "mean": expected_step(trace, stat="mean"),
        "formula": (m + pp - 1) * max(r["F_p50"] + r["B_p50"] for r in rows),
        "raw formula": (m + pp - 1) * max(raw),
        "seconds": want / 1e3})


def _plain_prediction(name: str, trace: dict, got: float) -> None:
    why = _plain_slip(trace, got)
    if why == "ok":
        return
    pp, m = trace["pp"], trace["microbatches"]
    if why == "measured":
        fail(f"predict_step_ms({name}) = {got:.4g} is the measured makespan; the point is to *predict* it "
             "by simulating the schedule with the stages' p50 service times")
    if why == "no latency":
        fail(f"predict_step_ms({name}) = {got:.4g} ms leaves out the P2P latency: every hop costs "
             "trace['p2p_latency'] (in seconds) on the critical path; pass it to simulate, in ms")
    if why == "mean":
        fail(f"predict_step_ms({name}) = {got:.4g} ms uses mean service times; use the p50 (median)")
    if why in ("formula", "raw formula"):
        fail(f"predict_step_ms({name}) = {got:.4g} ms is (M + pp - 1) x the slowest stage: that charges fill "
             "and drain at the slow stage's pace; simulate the 1F1B order with each stage's own times instead")
    if why == "seconds":
        fail(f"predict_step_ms({name}) = {got:.4g} is in seconds; return ms (the value is right otherwise)")
    fail(f"predict_step_ms({name}) = {got:.4g} ms is not what simulating 1F1B (pp={pp}, M={m}) with the p50 F and B "
         f"service times and the trace's P2P latency (all in ms) gives {CRITICAL_PATH}")


def _fixed_prediction(predict_step_ms, name: str, trace: dict, own: dict) -> None:
    for k in (expected_slowest(trace), 0):
        want = expected_step(trace, k)
        mine = expected_step(trace, k, **own) if own else want
        got = expect_number(call(predict_step_ms, trace, k, name="predict_step_ms"),
                            f"predict_step_ms({name}, fix_stage={k}) (ms)")
        if close(got, want, rel=1e-6) or close(got, mine, rel=1e-6):
            continue
        if close(got, expected_step(trace, **own), rel=1e-6):
            fail(f"predict_step_ms({name}, fix_stage={k}) = {got:.4g} ms is the unchanged prediction: give stage "
                 f"{k} the median F and B of the other stages before simulating")
        fail(f"predict_step_ms({name}, fix_stage={k}) = {got:.4g} ms is not the step with stage {k} given the "
             "median p50 F and the median p50 B of the *other* stages (not of all stages), everything else as "
             "measured")


# -- the controlled experiment -------------------------------------------------------------------------
OUTPUT_ONLY = {"trace", "json", "verbose_p2p", "p2p_timeout"}  # may differ: they record, they do not change the run
_KNOB_WHY = {
    "microbatches": "changing M changes the global batch (M x micro-batch size) and the bubble: two knobs at once",
    "micro_batch_size": "changing the micro-batch size changes the global batch and every kernel's shape",
    "seed": "a different seed changes the data order and the initial weights",
    "schedule": "a different schedule changes the bubble and the op order",
    "steps": "keep the number of steps, so both runs average the same steady state",
}


@check
def check_experiment(candidate_args, baseline_args: list[str], trace: dict) -> None:
    from ...run import build_parser
    expect_type(candidate_args, (list, tuple), "candidate_args")
    for a in candidate_args:
        expect_type(a, str, "every item of candidate_args")
    parser = build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's own message would duplicate ours
            cand = vars(parser.parse_args(list(candidate_args)))
    except SystemExit:
        fail(f"pipeline_kit.run does not accept candidate_args {describe(list(candidate_args), 200)}: run "
             "`python -m pipeline_kit.run --help` and use its flags")
    base = vars(parser.parse_args(list(baseline_args)))
    changed = [k for k in base if k != "layout" and k not in OUTPUT_ONLY and cand[k] != base[k]]
    if changed:
        k = changed[0]
        why = _KNOB_WHY.get(k, "it changes the model or the run, not just where the layers sit")
        fail(f"candidate_args change --{k.replace('_', '-')} ({base[k]!r} -> {cand[k]!r}): {why}. Hold everything but "
             "the layout fixed, so a difference in step time can only come from the re-cut")
    if not cand["layout"] or cand["layout"] == base["layout"]:
        fail("candidate_args keep the baseline layout: the experiment varies exactly one knob, --layout")
    new = student_layout(cand["layout"], "the candidate layout", trace["pp"], base["layers"])
    old = parse_layout(base["layout"])
    slow = expected_slowest(trace)
    before = [len(s.layers) for s in old.stages]
    after = [len(s.layers) for s in new.stages]
    lost = [k for k in range(len(after)) if after[k] < before[k]]
    if after[slow] >= before[slow]:
        hint = ""
        if lost and lost[0] == len(after) - 1:
            hint = (" -- the last stage has the most FLOPs (the output layer), but the trace says stage "
                    f"{slow} is slower")
        elif lost and lost[0] == 0:
            hint = " -- stage 0 has the most parameters (the embedding table), but parameters are not time"
        fail(f"the candidate layout {new} does not take a layer off stage {slow}, the stage the trace shows slowest "
             f"(layers per stage {before} -> {after}){hint}")
    if [k for k in lost if k != slow]:
        fail(f"the candidate layout {new} also takes layers off stage(s) {[k for k in lost if k != slow]}; move "
             f"layers only off the slow stage {slow} (layers per stage {before} -> {after})")


# == M049 follow-up =====================================================================================
def expected_per_microbatch(trace: dict, stage: int) -> list[float]:
    """F + B service time (ms) of each microbatch on ``stage``, indexed by microbatch."""
    svc = service_times(trace)[stage]
    out = [0.0] * trace["microbatches"]
    for kind in ("F", "B"):
        mbs = [e["microbatch"] for e in trace["timeline"] if e["stage"] == stage and e["kind"] == kind]
        for m, t in zip(mbs, svc.samples[kind]):  # service_times keeps the timeline's order
            out[m] += t * 1e3
    return out


@check
def check_per_microbatch(per_microbatch, traces) -> None:
    for name, trace in traces:
        for stage in range(trace["pp"] * trace["chunks"]):
            got = call(per_microbatch, trace, stage, name="per_microbatch")
            want = expected_per_microbatch(trace, stage)
            expect_type(got, (list, tuple), f"per_microbatch({name}, {stage})")
            if len(got) != len(want):
                fail(f"per_microbatch({name}, {stage}) has {len(got)} values; one per microbatch ({len(want)}), "
                     "F + B together")
            values = [expect_number(v, f"per_microbatch({name}, {stage})[{m}]") for m, v in enumerate(got)]
            bad = [m for m, (g, w) in enumerate(zip(values, want)) if not close(g, w, abs_=1e-6)]
            if not bad:
                continue
            m = bad[0]
            ops = [e for e in trace["timeline"] if e["stage"] == stage and e["microbatch"] == m]
            raw = sum(e["end"] - e["start"] for e in ops) * 1e3
            fwd_only = expected_metrics_op(trace, stage, m, "F")
            why = first_match(values[m], {"raw": raw, "s": want[m] / 1e3, "F": fwd_only,
                                     "B": want[m] - fwd_only})
            if why == "raw":
                fail(f"per_microbatch({name}, {stage})[{m}] = {values[m]:.4g} ms includes the P2P wait inside the ops "
                     f"(raw end - start); take the service times, the waits subtracted {WHAT_TO_MEASURE}")
            if why == "s":
                fail(f"per_microbatch({name}, {stage}) is in seconds; report ms")
            if why in ("F", "B"):
                fail(f"per_microbatch({name}, {stage})[{m}] = {values[m]:.4g} ms is only the {why} op; add the "
                     f"{'B' if why == 'F' else 'F'} of the same microbatch")
            if sorted(values) == sorted(want) or close(sum(values), sum(want), rel=1e-6):
                fail(f"per_microbatch({name}, {stage}) has the right times in the wrong order: index by the op's "
                     f"'microbatch' field, not by position in the trace (microbatch {m} is off)")
            fail(f"per_microbatch({name}, {stage})[{m}] = {values[m]:.4g} ms is not microbatch {m}'s F + B service "
                 f"time on stage {stage} {WHAT_TO_MEASURE}")


def expected_metrics_op(trace: dict, stage: int, microbatch: int, kind: str) -> float:
    svc = service_times(trace)[stage]
    mbs = [e["microbatch"] for e in trace["timeline"] if e["stage"] == stage and e["kind"] == kind]
    return svc.samples[kind][mbs.index(microbatch)] * 1e3


DYNAMIC_THRESHOLD = 1.2


def spread(trace: dict) -> list[float]:
    """p95 / p50 of each stage's per-microbatch F + B service time (the kit's percentiles)."""
    out = []
    for k in range(trace["pp"] * trace["chunks"]):
        s = StageService(k, {"FB": expected_per_microbatch(trace, k)}, 0.0)
        out.append(s.p95("FB") / s.p50("FB"))
    return out


def expected_dynamic(trace: dict) -> int | None:
    r = spread(trace)
    k = r.index(max(r))
    return k if r[k] > DYNAMIC_THRESHOLD else None


@check
def check_dynamic(dynamic_stage, traces) -> None:
    for name, trace in traces:
        got = call(dynamic_stage, trace, name="dynamic_stage")
        want = expected_dynamic(trace)
        r = spread(trace)
        if got is None and want is None:
            continue
        if got is None:
            fail(f"dynamic_stage({name}) is None, but a stage's p95/p50 of F + B per microbatch is above "
                 f"{DYNAMIC_THRESHOLD}")
        got = expect_int(got, f"dynamic_stage({name})")
        if want is None:
            fail(f"dynamic_stage({name}) is {got}, but no stage's p95/p50 exceeds {DYNAMIC_THRESHOLD}: a stage that "
                 "is slow on every microbatch is static, not dynamic -- return None")
        if got != want:
            slow = expected_slowest(trace)
            hint = (f" -- stage {got} is the slowest by p50, which is a static cost; dynamic means the spread "
                    "between microbatches" if got == slow else "")
            fail(f"dynamic_stage({name}) is {got} (p95/p50 = {r[got]:.2f}), but another stage spreads more{hint}")


# -- re-split: move one layer --------------------------------------------------------------------------
MOVE_CASES = [("Et*3|t*3|t*3|t*3L", 1, 0), ("Et*3|t*3|t*3|t*3L", 3, 2), ("Et*2|t*2|t*2L", 1, 2)]


def _counts(layout) -> list[int]:
    return [len(s.layers) for s in layout.stages]


def expected_move(text: str, src: int, dst: int) -> str | None:
    """The layout with one layer moved from ``src`` to its neighbour ``dst``; None when that is impossible."""
    lay = parse_layout(text)
    counts = _counts(lay)
    if abs(src - dst) != 1 or not 0 <= dst < len(counts) or counts[src] == 0:
        return None
    counts[src] -= 1
    counts[dst] += 1
    st = lay.stages
    if counts[src] == 0 and not (st[src].embedding or st[src].loss):
        return None
    return counts_text(counts)  # a legal layout has E on its first stage and L on its last


@check
def check_move_layer(move_layer, cases) -> None:
    for text, src, dst in cases:
        want = expected_move(text, src, dst)
        if want is None:
            stages = parse_layout(text).num_stages
            why = ("not a neighbour" if abs(src - dst) != 1 else f"no stage {dst}" if not 0 <= dst < stages
                   else f"stage {src} would be empty")
            expect_raises(move_layer, text, src, dst, name="move_layer",
                          why=f"{why} -- a layer can only move to a neighbouring stage that exists, and a stage "
                              "holding nothing else may not give away its last layer")
            continue
        got = call(move_layer, text, src, dst, name="move_layer")
        expect_type(got, str, f"move_layer({text!r}, {src}, {dst})")
        old = parse_layout(text)
        try:
            new = parse_layout(got, layers=old.num_layers)
        except LayoutError as exc:
            fail(f"move_layer({text!r}, {src}, {dst}) = {got!r} is not a legal layout: {exc}")
        if _counts(new) == _counts(parse_layout(want)) and new.num_stages == old.num_stages:
            continue
        before, after = _counts(old), _counts(new)
        if new.num_stages != old.num_stages:
            fail(f"move_layer({text!r}, {src}, {dst}) = {got!r} has {new.num_stages} stages; a re-split keeps the "
                 f"{old.num_stages} stages and moves one layer")
        if after == before:
            fail(f"move_layer({text!r}, {src}, {dst}) = {got!r} moved nothing (layers per stage {before})")
        if after[src] == before[src] - 1 and after[dst] == before[dst]:
            fail(f"move_layer({text!r}, {src}, {dst}) = {got!r}: the layer left stage {src} but did not arrive on "
                 f"stage {dst} (layers per stage {before} -> {after})")
        fail(f"move_layer({text!r}, {src}, {dst}) = {got!r}: layers per stage {before} -> {after} is not one layer "
             f"from stage {src} to stage {dst}, the rest unchanged")


# -- success metric ------------------------------------------------------------------------------------
STEP_NOISE = 0.02  # a step must drop by more than this to count (run-to-run noise)


def expected_verdict(before: dict, after: dict) -> str:
    same = all(before.get(k) == after.get(k) for k in ("schedule", "pp", "microbatches", "layers"))
    if not same:
        return "not comparable"
    slow_before = max(r["F_p50"] + r["B_p50"] for r in expected_metrics(before))
    slow_after = max(r["F_p50"] + r["B_p50"] for r in expected_metrics(after))
    faster = after["makespan"] < (1 - STEP_NOISE) * before["makespan"]
    return "better" if faster and slow_after < slow_before else "not better"


def verdict_pairs() -> list[tuple[str, dict, dict]]:
    """The visible (name, before, after) pairs around the lab's trace (the hidden ones: ``hidden_verdict_pairs``)."""
    base = lab_trace()
    return [("moving a layer off stage 1", base, lab_trace("Et*4|t*2|t*3|t*3L", seed=8)),
            ("moving a layer off the last stage", base, lab_trace("Et*3|t*3|t*4|t*2L", seed=12)),
            ("the same layout, run again", base, lab_trace(seed=13)),
            ("the re-split at M=4", base, lab_trace("Et*4|t*2|t*3|t*3L", microbatches=4, seed=8))]


@check
def check_verdict(verdict, pairs) -> None:
    for name, before, after in pairs:
        got = call(verdict, before, after, name="verdict")
        want = expected_verdict(before, after)
        if got == want:
            continue
        if got not in ("better", "not better", "not comparable"):
            fail(f"verdict({name}) returned {describe(got)}; return 'better', 'not better' or 'not comparable'")
        gain = 1 - after["makespan"] / before["makespan"]
        if want == "not comparable":
            diff = [k for k in ("schedule", "pp", "microbatches", "layers") if before.get(k) != after.get(k)]
            fail(f"verdict({name}) is {got!r}, but the runs differ in {', '.join(diff)} "
                 f"({', '.join(f'{before.get(k)} vs {after.get(k)}' for k in diff)}): runs that differ in more than "
                 "the layout (a different M is a different global batch and bubble) do not compare step for step")
        if want == "not better" and got == "better":
            fail(f"verdict({name}) is 'better', but the step is only {gain:.1%} shorter, within the {STEP_NOISE:.0%} "
                 "run-to-run noise, or the slowest stage did not get faster: count a gain only when the step drops by "
                 f"more than {STEP_NOISE:.0%} *and* the largest p50 F + B service time drops")
        if want == "better":
            fail(f"verdict({name}) is {got!r}, but the step is {gain:.1%} shorter and the slowest stage's p50 F + B "
                 "dropped, with pp, M and layers unchanged: both conditions of a gain hold")
        fail(f"verdict({name}) is {got!r}: are the runs comparable, and did both the step and the slowest stage "
             "get faster?")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_move_cases(rng) -> list:
    """(layout, src, dst): mostly a move to a neighbour, sometimes one that must raise (not a neighbour, no such
    stage, a stage's last layer); the fixed cases are an emptied middle stage, src == dst and spaces."""
    def make(r):
        counts = draw_counts(r, r.randint(2, 8), most=4)
        src = r.randrange(len(counts))
        neighbours = [d for d in (src - 1, src + 1) if 0 <= d < len(counts)]
        dst = r.choice(neighbours) if r.random() < 0.8 else r.choice([src, src + 2, -1, len(counts)])
        return counts_text(counts), src, dst
    return drawn(rng, 6, make, fixed=[("Et*3|t|t*3L", 1, 2), ("EtL", 0, 0), ("E t*2|t*3|t*3| t*2L", 2, 3)])
