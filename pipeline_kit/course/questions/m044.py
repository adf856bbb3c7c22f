"""M044 (lab 3): derive the bubble, check it against the simulator, and price what it leaves out.

Every expected value is computed here with the kit -- the simulator for step times and bubbles, the
layout model and ``decompose_speedup`` for the question bank's PP8 case, ``Timeline``/``simulate_from_trace``
for profiles -- so a check can never disagree with the book.  Each check recognises the usual wrong
formulas (``(pp-1)/M`` for the step share, ``pp`` for ``pp-1``, ``M+pp`` for ``M+pp-1``...) and names
the term that is off.
"""

from __future__ import annotations

import functools
import json
import math
from fractions import Fraction

from ...layout import PRESETS, boundary_bytes, decompose_speedup, even_layout, stage_costs
from ...layout.measure import service_times, simulate_from_trace, stage_fwd_bwd
from ...schedules import build_schedule
from ...sim import SimResult, simulate
from ...trace import Timeline
from ...grading.parts import Parts
from .common import (
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_keys,
    expect_number,
    expect_type,
    fail,
    expect_rounded,
    first_match,
    kit_run_file,
)

# The scenario the notebook states (inputs, not answers).
PP8, M16 = 8, 16
KERNEL_EFFICIENCY = 0.8  # small GEMMs reach 80% of a big stage's efficiency
P2P_SLOT = Fraction(1, 10)  # P2P latency in units of one stage forward
BANK_SPEEDUP, TFLOPS, LATENCY_US, GBPS = 2.59, 100e12, 20e-6, 10e9
DERIVATION = book("bubble", "Derivation")  # where the book teaches what these checks find
NOT_IN_FORMULA = book("bubble", "What the formula does not contain")



def _sim(pp: int, m: int, name: str = "1f1b", chunks: int | None = None, **costs) -> SimResult:
    return simulate(build_schedule(name, pp, m, chunks), **costs)



# -- M044 main: the formula and its assumptions ---------------------------------------------------
@check
def check_bubble_fraction(bubble_fraction, cases) -> None:
    """M044 'formula': the idle share of the step, (pp-1)/(M+pp-1)."""
    for pp, m in cases:
        exact = _sim(pp, m, fwd=Fraction(1), bwd=Fraction(2))
        got = expect_number(call(bubble_fraction, pp, m, name="bubble_fraction"), f"bubble_fraction({pp}, {m})")
        want = exact.bubble_fraction
        if not close(got, float(want)):
            why = first_match(got, [
                (Fraction(pp - 1, m), ("that is the Megatron paper's ratio, bubble over the *ideal* time; the idle "
                                       "share divides the idle time by all ranks' time, pp x makespan")),
                (Fraction(pp, m + pp - 1), ("the numerator counts one stage offset too many: how many boundaries "
                                            "does the fill cross?")),
                (Fraction(pp - 1, m + pp), ("the denominator counts one slot too many: when does the last "
                                            "microbatch enter, and how many stages does it cross?")),
                (Fraction(pp, m + pp), "the numerator and the denominator each count one slot too many"),
                (Fraction(m, m + pp - 1), "that is the utilisation, the busy share; the bubble is what is left of 1"),
                (100 * want, "give a fraction between 0 and 1, not a percentage"),
            ]) or "compare idle time with pp x makespan in a simulated timeline"
            fail(f"bubble_fraction({pp}, {m}) = {got:.4g} is not the idle share of the simulated step: {why} "
                 f"{DERIVATION}")


@check
def check_bubble_over_ideal(bubble_over_ideal, cases) -> None:
    """M044 'formula': Megatron's ratio, bubble time over the ideal time, (pp-1)/M."""
    for pp, m in cases:
        exact = _sim(pp, m, fwd=Fraction(1), bwd=Fraction(2))
        got = expect_number(call(bubble_over_ideal, pp, m, name="bubble_over_ideal"), f"bubble_over_ideal({pp}, {m})")
        want = exact.bubble_over_ideal
        if not close(got, float(want)):
            why = first_match(got, [
                (Fraction(pp - 1, m + pp - 1), ("that is the idle share of the step; Megatron's ratio divides the "
                                                "bubble time by the ideal time, not by the step")),
                (Fraction(pp, m), "the bubble counts one slot too many: how many boundaries do fill and drain cross?"),
                (Fraction(m, pp - 1), "the ratio is upside down: bubble time over ideal time"),
            ]) or "divide (makespan - ideal) by the ideal time, the busiest rank's work"
            fail(f"bubble_over_ideal({pp}, {m}) = {got:.4g} is not the simulated step's ratio: {why} {DERIVATION}")


@check
def check_makespan(makespan, cases) -> None:
    """M044 'formula': the step time (M+pp-1)(f+b) for any f and b, GPipe and 1F1B alike."""
    for pp, m in cases:
        for name in ("gpipe", "1f1b"):
            for f, b in ((Fraction(1), Fraction(2)), (Fraction(2), Fraction(5)), (Fraction(1, 3), Fraction(1))):
                want = _sim(pp, m, name, fwd=f, bwd=b).makespan
                got = expect_number(call(makespan, pp, m, f, b, name="makespan"), f"makespan({pp}, {m}, {f}, {b})")
                if close(got, float(want)):
                    continue
                why = first_match(got, [
                    (m * (f + b), ("that is the ideal time, one rank's work; the step adds the fill and the "
                                   "drain")),
                    ((m + pp) * (f + b), ("one slot of f + b too many: when does the last microbatch enter, and how "
                                          "many stages does it cross?")),
                    (m * (f + b) + (pp - 1) * f, ("the drain is missing: the last backward also crosses the stages "
                                                  "back up")),
                    (m * (f + b) + (pp - 1) * b, ("the fill is missing: the first forward crosses the stages before "
                                                  "the last rank starts")),
                    (pp * (m + pp - 1) * (f + b), ("that adds up all pp ranks' time; the makespan is one wall-clock "
                                                   "span")),
                ]) or "it must hold for any f and b, not only b = 2f"
                fail(f"makespan({pp}, {m}, f={f}, b={b}) = {got:g} is not the makespan of a simulated {name} step: "
                     f"{why} {DERIVATION}")


SCENARIOS = {  # name -> (schedule, pp, M, chunks, cost keywords), stated the same way in the notebook
    "gpipe, f=1, b=2": ("gpipe", 8, 16, None, {}),
    "1f1b, f=1, b=3": ("1f1b", 8, 16, None, {"bwd": Fraction(3)}),
    "1f1b, M < pp (pp=8, M=4)": ("1f1b", 8, 4, None, {}),
    "1f1b, last stage 1.5x slower": ("1f1b", 8, 16, None, {"fwd": [Fraction(1)] * 7 + [Fraction(3, 2)],
                                                           "bwd": [Fraction(2)] * 7 + [Fraction(3)]}),
    "1f1b, P2P latency 0.1": ("1f1b", 8, 16, None, {"p2p_latency": P2P_SLOT}),
    "interleaved, v=2": ("interleaved", 8, 16, 2, {}),
}
WHY_EXACT = {
    "gpipe, f=1, b=2": "GPipe has the same critical path as 1F1B with equal stages",
    "1f1b, f=1, b=3": "the F:B ratio cancels out: fill and drain grow with f + b, as the work does",
    "1f1b, M < pp (pp=8, M=4)": "fill and drain still cost the same slots, however few microbatches there are",
}
WHY_NOT = {
    "1f1b, last stage 1.5x slower": "a slow stage sets the beat for every rank, so the others idle more",
    "1f1b, P2P latency 0.1": "every hop of fill and drain (and of the steady state) waits for a transfer",
    "interleaved, v=2": "fill and drain take chunk-sized steps, so the idle share changes",
}


@check
def check_assumptions(formula_exact) -> None:
    """One part per scenario: each is its own simulation."""
    expect_keys(formula_exact, SCENARIOS, "formula_exact")
    parts = Parts()
    for key, (name, pp, m, chunks, costs) in SCENARIOS.items():
        with parts.part():
            got = formula_exact[key]
            expect_type(got, bool, f"formula_exact[{key!r}]")
            result = _sim(pp, m, name, chunks, fwd=costs.get("fwd", Fraction(1)), bwd=costs.get("bwd", Fraction(2)),
                          p2p_latency=costs.get("p2p_latency", 0))
            formula = Fraction(pp - 1, m + pp - 1)
            exact = result.bubble_fraction == formula
            if got == exact:
                continue
            if exact:
                fail(f"formula_exact[{key!r}] is False, but there the simulated bubble is exactly the formula's: "
                     f"{WHY_EXACT[key]} {NOT_IN_FORMULA}")
            fail(f"formula_exact[{key!r}] is True, but there the simulated bubble is not the formula's: "
                 f"{WHY_NOT[key]} {NOT_IN_FORMULA}")
    parts.done()


# -- M044 main: the number -------------------------------------------------------------------------
@check
def check_pp8(pp8) -> None:
    expect_keys(pp8, ("bubble", "utilisation", "bubble_over_ideal"), "pp8")
    r = _sim(PP8, M16, fwd=Fraction(1), bwd=Fraction(2))
    want = {"bubble": r.bubble_fraction, "utilisation": 1 - r.bubble_fraction, "bubble_over_ideal": r.bubble_over_ideal}
    for key, exp in want.items():
        got = expect_number(pp8[key], f"pp8[{key!r}]")
        if expect_rounded(got, exp, f"pp8[{key!r}]", min_decimals=3):
            continue
        why = first_match(got, [
            (100 * exp, "give a fraction between 0 and 1, not a percentage"),
            (r.bubble_over_ideal if key != "bubble_over_ideal" else r.bubble_fraction,
             "that is the other definition: bubble over the ideal time (Megatron's) is not the idle share of the step"),
            (1 - r.bubble_over_ideal, ("1 - (pp-1)/M mixes the definitions: (pp-1)/M is relative to the ideal "
                                       "time, not to the step")),
            (r.bubble_fraction if key == "utilisation" else 1 - r.bubble_fraction,
             "bubble and utilisation are swapped"),
        ], rel=2e-3) or "simulate build_schedule('1f1b', 8, 16) and read the result's metrics"
        fail(f"pp8[{key!r}] = {got:.4g} is wrong for PP8/M16: {why} {DERIVATION}")


# -- M044 main: three losses the formula leaves out ------------------------------------------------
def _relative_flops() -> list[float]:
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, PP8), spec, PP8)
    return [c.fwd_flops / costs[1].fwd_flops for c in costs]


def _relative_params() -> list[float]:
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, PP8), spec, PP8)
    return [c.params / costs[1].params for c in costs]


@functools.lru_cache(maxsize=1)
def expected_losses() -> dict[str, SimResult]:
    rel = _relative_flops()
    slow = Fraction(1) / Fraction(KERNEL_EFFICIENCY).limit_denominator()
    return {"imbalance": _sim(PP8, M16, fwd=rel, bwd=[2 * x for x in rel]),
            "p2p": _sim(PP8, M16, p2p_latency=float(P2P_SLOT)),
            "kernel": _sim(PP8, M16, fwd=float(slow), bwd=float(2 * slow))}


def _same(a, b) -> bool:
    return len(a) == len(b) and all(close(float(x), float(y), rel=1e-6) for x, y in zip(a, b))


@check
def check_losses(losses, invisible_to_bubble, largest_loss) -> None:
    want = expected_losses()
    expect_keys(losses, want, "losses")
    for key, exp in want.items():
        got = losses[key]
        expect_type(got, SimResult, f"losses[{key!r}]")
        s = got.schedule
        if (s.name, s.pp, s.microbatches, s.chunks) != ("1f1b", PP8, M16, 1):
            fail(f"losses[{key!r}] simulates {s.name} with pp={s.pp}, M={s.microbatches}: every case is the "
                 f"interview question bank's 1F1B with pp=8, M=16 -- only the costs change")
        if close(got.makespan, exp.makespan, rel=1e-6):
            continue
        fwd, bwd, comm = got.costs.fwd, got.costs.bwd, got.costs.comm
        if key == "imbalance":
            rel = _relative_flops()
            if _same(fwd, _relative_params()):
                why = ("you scaled the stages by parameters; time follows FLOPs, and the embedding is a lookup "
                       "with almost none -- use fwd_flops")
            elif _same(fwd, [fwd[0]] * PP8):
                why = "every stage costs the same; use the bank-pp8 stages' forward FLOPs relative to a middle stage"
            elif _same(fwd, rel) and not _same(bwd, [2 * x for x in rel]):
                why = "the forwards are right; each stage's backward is 2x its own forward"
            else:
                why = (f"the stage forwards {', '.join(f'{float(x):.3g}' for x in fwd)} are not each stage's FLOPs "
                       "relative to stage 1's")
        elif key == "p2p":
            why = ("no transfer costs anything: pass p2p_latency" if not any(comm)
                   else f"a transfer costs {float(comm[0]):g}, not the latency the scenario states")
        else:
            if close(float(fwd[0]), 1 + (1 - KERNEL_EFFICIENCY)):
                why = (f"{KERNEL_EFFICIENCY:.0%} efficiency makes every op 1/{KERNEL_EFFICIENCY} = 1.25x as long, "
                       "not 1.2x")
            elif close(float(fwd[0]), 1.0):
                why = "the ops are not slower: at 80% efficiency each takes 1/0.8 of its time, forward and backward"
            else:
                why = (f"fwd={float(fwd[0]):g}, bwd={float(bwd[0]):g}: at 80% efficiency every op, forward and "
                       "backward, takes 1/0.8 of its time")
        fail(f"losses[{key!r}] has makespan {float(got.makespan):.4g}, not the scenario's: {why} {NOT_IN_FORMULA}")
    formula = want["kernel"].bubble_fraction
    changed = {k: r.bubble_fraction for k, r in want.items() if not close(r.bubble_fraction, formula)}
    if invisible_to_bubble != "kernel":
        shown = describe(invisible_to_bubble)
        extra = ": its bubble_fraction moves away from the formula's" if invisible_to_bubble in changed else ""
        fail(f"invisible_to_bubble is {shown}{extra}; the loss the bubble fraction cannot see is the one that "
             "makes ops slower (busy time, not idle time): its bubble stays the formula's while the step grows")
    biggest = max(want, key=lambda k: want[k].makespan)
    if largest_loss != biggest:
        fail(f"largest_loss is {describe(largest_loss)}, not the loss with the longest step: compare the makespans "
             f"of your three simulations {NOT_IN_FORMULA}")


# -- measured traces: the real run's and synthetic ones built from simulations --------------------
def trace_from_sim(result: SimResult, recorded_latency: float | None = None, unit: float = 1e-3) -> dict:
    """A ``pipeline_kit.run --trace`` style dict of a simulated step (times x ``unit`` seconds).

    As in the runtime, an op starts when its rank is ready to receive, so an input that has not
    arrived shows as a P2P wait inside the op.
    """
    s = result.schedule
    timeline, waits, free = [], [], {}
    for e in sorted(result.events, key=lambda e: (e.rank, e.start)):
        t0 = free.get(e.rank, 0)
        timeline.append({"rank": e.rank, "op": s.op_text(e.op), "kind": e.op.kind, "microbatch": e.op.microbatch,
                         "chunk": e.op.chunk, "stage": e.stage, "start": float(t0) * unit, "end": float(e.end) * unit})
        if e.start > t0:
            waits.append({"rank": e.rank, "microbatch": e.op.microbatch, "chunk": e.op.chunk, "stage": e.stage,
                          "start": float(t0) * unit, "end": float(e.start) * unit})
        free[e.rank] = e.end
    latency = result.costs.comm[0] if result.costs.comm else 0
    return {"schedule": s.name, "pp": s.pp, "microbatches": s.microbatches, "chunks": s.chunks, "source": "simulated",
            "makespan": float(result.makespan) * unit,
            "p2p_latency": float(latency if recorded_latency is None else recorded_latency) * unit,
            "timeline": timeline, "waits": waits}


TRACE_RUN = ("--schedule", "1f1b", "-m", "4", "--layers", "2", "--hidden", "32", "--steps", "2",
             "--synthetic-compute", "20,40", "--trace", "{file}", "--p2p-timeout", "20")  # the lab's real run


def real_trace() -> dict:
    """The trace of the lab's real 2-rank run, :data:`TRACE_RUN` (run once per process; the given cell shows it)."""
    return json.loads(kit_run_file(2, TRACE_RUN))


def idle_share(trace: dict) -> float:
    tl = Timeline.from_trace(trace)
    idle = sum(b - a for r in range(tl.pp) for a, b in tl.idle_gaps(r))
    return idle / (tl.pp * tl.makespan)


def _idle_share_variants(trace: dict) -> list[tuple[float, str]]:
    """Values of the typical mistakes, each with its feedback."""
    pp, m, v = trace["pp"], trace["microbatches"], trace.get("chunks", 1)
    ops = trace["timeline"]
    end = max(o["end"] for o in ops)
    busy_raw = sum(o["end"] - o["start"] for o in ops)
    tl = Timeline.from_trace(trace)
    no_tail = 0.0
    for r in range(pp):
        last = max(o["end"] for o in tl.rank_ops(r))
        no_tail += sum(b - a for a, b in tl.idle_gaps(r) if b <= last + 1e-12)
    exact = idle_share(trace)
    return [
        (Fraction(pp - 1, v * m + pp - 1), "that is the formula's value; measure the idle share from the trace's ops"),
        (1 - busy_raw / (pp * end), ("you counted the P2P wait inside each op as busy: a measured op starts by "
                                     "receiving its input, so subtract the trace's waits (Timeline.from_trace does)")),
        (no_tail / (pp * tl.makespan), "the idle time after a rank's last op, until the step ends, is missing"),
        (exact * pp, "divide the idle time by pp x makespan (all ranks' time), not by the makespan"),
    ]


@check
def check_measured_bubble(measured_bubble, traces) -> None:
    for i, trace in enumerate(traces):
        label = ("the real run's trace" if trace.get("source") == "runtime"
                 else f"hidden trace {i} ({trace['schedule']}, pp={trace['pp']}, M={trace['microbatches']})")
        got = expect_number(call(measured_bubble, trace, name="measured_bubble"), f"measured_bubble on {label}")
        want = idle_share(trace)
        if close(got, want, rel=1e-6, abs_=1e-9):
            continue
        why = first_match(got, _idle_share_variants(trace)) or \
            "sum every rank's idle gaps (Timeline.from_trace(trace).idle_gaps) and divide by pp x makespan"
        fail(f"measured_bubble on {label} = {got:.4f} is not the trace's idle share: {why} {NOT_IN_FORMULA}")


# -- M044 follow-up: the question bank's 2.59x decomposed ---------------------------------------------------
@functools.lru_cache(maxsize=1)
def expected_factors() -> tuple[dict[str, float], float]:
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, PP8), spec, PP8)
    fwd = [c.fwd_flops / TFLOPS for c in costs]
    latency = LATENCY_US + boundary_bytes(spec) / GBPS
    rows = decompose_speedup(PP8, M16, fwd, [2 * x for x in fwd], latency, BANK_SPEEDUP)
    return {r.name: r.factor for r in rows if r.name != "ideal"}, latency


@functools.lru_cache(maxsize=1)
def _speedups() -> dict[str, float]:
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, PP8), spec, PP8)
    fwd = [c.fwd_flops / TFLOPS for c in costs]
    rows = decompose_speedup(PP8, M16, fwd, [2 * x for x in fwd], expected_factors()[1], BANK_SPEEDUP)
    return {r.name: r.speedup for r in rows}


def _factor(factors, name: str) -> float:
    expect_keys(factors, ("bubble", "stage imbalance", "P2P", "remainder"), "factors")
    return expect_number(factors[name], f"factors[{name!r}]")


@check
def check_follow_bubble(measured_efficiency, bound_speedup, factors) -> None:
    eff = expect_number(measured_efficiency, "measured_efficiency")
    want_eff = BANK_SPEEDUP / PP8
    if not expect_rounded(eff, want_eff, "measured_efficiency", min_decimals=3):
        why = first_match(eff, [(BANK_SPEEDUP / M16, "divide by the 8 GPUs, not by the 16 microbatches"),
                                 (100 * want_eff, "give a fraction, not a percentage")], rel=2e-3) or \
            "parallel efficiency is the speedup over one device divided by the number of devices"
        fail(f"measured_efficiency = {eff:.4g}: {why}")
    speed = _speedups()
    bound = expect_number(bound_speedup, "bound_speedup")
    if not expect_rounded(bound, speed["bubble"], "bound_speedup", min_decimals=2):
        why = first_match(bound, [
            (PP8 * (1 - Fraction(PP8 - 1, M16)), ("1 - (pp-1)/M mixes the definitions: (pp-1)/M is relative to "
                                                  "the ideal time, not to the step")),
            (Fraction(M16, M16 + PP8 - 1), "that is the utilisation of one GPU; the bound counts all 8"),
            (PP8, "8x ignores fill and drain"),
        ], rel=2e-3) or "8 GPUs, each busy only outside the bubble"
        fail(f"bound_speedup = {bound:.4g}: {why} {NOT_IN_FORMULA}")
    got = _factor(factors, "bubble")
    want, _ = expected_factors()
    if not close(got, want["bubble"], rel=1e-4):
        fail(f"factors['bubble'] = {got:.4g} is not decompose_speedup's bubble factor: use the factor column (each "
             "row's ratio to the row above), not the speedup left")


@check
def check_follow_imbalance(param_ratio, factors) -> None:
    spec = PRESETS["bank-pp8"][0]
    costs = stage_costs(even_layout(spec.layers, PP8), spec, PP8)
    params = [c.params for c in costs]
    flops = [c.fwd_flops for c in costs]
    want = max(params) / min(params)
    got = expect_number(param_ratio, "param_ratio")
    if not expect_rounded(got, want, "param_ratio", min_decimals=2):
        why = first_match(got, [
            (max(params) / (sum(params) / PP8), "that is max/mean; the question bank's ratio is the largest stage "
                                                "over the smallest"),
            (max(flops) / min(flops), "that is the forward-FLOPs ratio; the question bank quotes parameters"),
            (max(params) / params[-1], ("stage 0 over stage 7: both endpoints are big (embedding, output layer); "
                                        "compare with a middle stage")),
        ], rel=2e-3) or "max over min of the per-stage parameters of stage_costs(even_layout(16, 8), bank-pp8, 8)"
        fail(f"param_ratio = {got:.4g} is not the per-stage parameter ratio: {why}")
    exp, _ = expected_factors()
    speed = _speedups()
    got = _factor(factors, "stage imbalance")
    if not close(got, exp["stage imbalance"], rel=1e-4):
        why = first_match(got, [
            (1 / want, ("that treats time as proportional to parameters; the simulator runs on stage times, which "
                        "follow FLOPs")),
            (speed["stage imbalance"], ("that is the speedup left after the imbalance; the factor is its ratio to "
                                        "the row above")),
        ]) or "build stage_fwd from each stage's fwd_flops / 100e12 and stage_bwd = 2 x stage_fwd"
        fail(f"factors['stage imbalance'] = {got:.4g} is not decompose_speedup's imbalance factor: {why}")


@check
def check_follow_p2p(p2p_latency_s, factors) -> None:
    exp, latency = expected_factors()
    spec = PRESETS["bank-pp8"][0]
    one = boundary_bytes(spec)
    got = expect_number(p2p_latency_s, "p2p_latency_s")
    if not close(got, latency, rel=1e-4):
        why = first_match(got, [
            (LATENCY_US, "only the fixed 20 us; add the size term s*b*h*2 bytes / 10 GB/s"),
            (one / GBPS, "only the size term; add the fixed 20 us per transfer"),
            (LATENCY_US + 2 * one / GBPS, ("one transfer carries one tensor of s*b*h*2 bytes; the gradient goes back "
                                           "in a transfer of its own")),
            (LATENCY_US + 8 * one / GBPS, "GB/s are gigabytes, not gigabits: do not multiply the bytes by 8"),
            (latency * 1e6, "give seconds, not microseconds"),
        ], rel=1e-3) or "the fixed 20 us plus one boundary tensor of bank-pp8 over 10 GB/s"
        fail(f"p2p_latency_s = {got:.4g} is not one transfer's time, in seconds: {why}")
    for name in ("P2P", "remainder"):
        got = _factor(factors, name)
        if not close(got, exp[name], rel=1e-4):
            fail(f"factors[{name!r}] = {got:.4g} is not decompose_speedup's: pass p2p_latency_s and measured=2.59 "
                 "to it and take each row's factor")
    product = math.prod(_factor(factors, k) for k in ("bubble", "stage imbalance", "P2P", "remainder"))
    if not close(product * PP8, BANK_SPEEDUP, rel=1e-4):
        fail(f"the factors multiply to {product * PP8:.3f}x, not the measured 2.59x")


def expected_plan(trace: dict) -> dict[str, float]:
    fwd, bwd, _ = stage_fwd_bwd(service_times(trace))
    name = trace["schedule"]
    chunks = trace["chunks"] if trace["chunks"] > 1 else None
    balanced = simulate(build_schedule(name, trace["pp"], trace["microbatches"], chunks),
                        fwd=sum(fwd) / len(fwd) * trace["chunks"], bwd=sum(bwd) / len(bwd) * trace["chunks"])
    return {"measured": trace["makespan"], "achievable": simulate_from_trace(trace).makespan,
            "balanced": balanced.makespan}


@check
def check_plan(timeline_plan, traces) -> None:
    for i, trace in enumerate(traces):
        label = ("the real run's trace" if trace.get("source") == "runtime"
                 else f"hidden trace {i} ({trace['schedule']}, pp={trace['pp']}, M={trace['microbatches']})")
        got = call(timeline_plan, trace, name="timeline_plan")
        expect_keys(got, ("measured", "achievable", "balanced"), f"timeline_plan on {label}")
        want = expected_plan(trace)
        fwd, bwd, _ = stage_fwd_bwd(service_times(trace))
        for key in ("measured", "achievable", "balanced"):
            value = expect_number(got[key], f"timeline_plan(...)[{key!r}] on {label}")
            if close(value, want[key], rel=1e-6, abs_=1e-12):
                continue
            candidates = [(want[key] * 1e3, "give seconds, as the trace does, not milliseconds")]
            if key == "achievable":
                candidates.insert(0, (want["measured"], ("that is the measured makespan; achievable is what the "
                                                         "schedule would take with the measured per-stage service "
                                                         "times and P2P latency (simulate_from_trace)")))
            if key == "balanced":
                sched = build_schedule(trace["schedule"], trace["pp"], trace["microbatches"],
                                       trace["chunks"] if trace["chunks"] > 1 else None)
                v = trace["chunks"]
                candidates += [
                    (simulate(sched, fwd=max(fwd) * v, bwd=max(bwd) * v).makespan,
                     "you used the slowest stage; the bound assumes the work spread evenly: mean service times"),
                    (simulate(sched, fwd=sum(fwd) / len(fwd) * v, bwd=sum(bwd) / len(bwd) * v,
                              p2p_latency=trace["p2p_latency"]).makespan,
                     "the bound has free P2P: leave the latency out, it is part of what the gap explains"),
                    (want["achievable"], ("that is the achievable makespan; the balanced bound uses the mean service "
                                          "time on every stage and free P2P")),
                ]
            why = first_match(value, candidates) or {
                "measured": "the trace's own makespan (trace['makespan'], seconds)",
                "achievable": "simulate_from_trace(trace).makespan",
                "balanced": "the same schedule with every stage at the mean service time (F and B), no P2P latency",
            }[key]
            fail(f"timeline_plan(...)[{key!r}] on {label} = {value:.6g} is not the trace's: {why}")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_formula_cases(rng) -> list:
    """(pp, M) for the three formula functions: M = 1, M < pp and M = pp first, three more drawn."""
    return drawn(rng, 3, lambda r: (r.randint(2, 8), r.randint(1, 24)), fixed=[(2, 1), (8, 4), (5, 5)])


def fixed_traces() -> list[dict]:
    """The traces every grade checks first: 1F1B with an uneven last stage and a mis-recorded latency, GPipe with
    uneven stages (a schedule other than 1F1B), and interleaved with two chunks (pp x chunks stages)."""
    return [trace_from_sim(_sim(3, 5, fwd=[1, 1, 1.5], bwd=[2, 2, 3], p2p_latency=0.2), recorded_latency=0.05),
            trace_from_sim(_sim(3, 4, "gpipe", fwd=[1, 2, 1], bwd=[2, 4, 2], p2p_latency=0.1)),
            trace_from_sim(_sim(2, 4, "interleaved", 2, fwd=[1, 1.5, 1, 1], bwd=[2, 3, 2, 2], p2p_latency=0.05))]


def hidden_trace_cases(rng) -> list[dict]:
    """Simulated traces: :func:`fixed_traces` first, then 1F1B, GPipe or interleaved, per-stage costs, a P2P
    latency and sometimes a recorded latency that is not the real one."""
    def make(r):
        name, pp = r.choice(["1f1b", "gpipe", "interleaved"]), r.randint(2, 4)
        v = 2 if name == "interleaved" else None
        m = pp * r.randint(1, 2) if v else r.randint(1, 8)
        fwd = [r.choice([1, 1, 1.2, 1.5, 2]) for _ in range(pp * (v or 1))]
        bwd = [f * r.choice([2, 2, 2.5, 3]) for f in fwd]
        sim = _sim(pp, m, name, v, fwd=fwd, bwd=bwd, p2p_latency=r.choice([0, 0.05, 0.1, 0.2]))
        return trace_from_sim(sim, recorded_latency=r.choice([None, None, 0.0, 0.05]))
    return drawn(rng, 2, make, fixed=fixed_traces())
