"""M054 (lab 7): why PP8/M16 gives 2.59x -- the local numbers, the losses as factors, what M = 32 would
buy, and a trace that checks the model.

Expected values come from ``decompose_speedup`` on the bank-pp8 model (:mod:`.synthetic`); numbers must be
computed, not typed from a printout (:data:`.synthetic.TIGHT`).
"""

from __future__ import annotations

import numbers

from ...layout import (
    boundary_bytes,
    decompose_speedup,
    even_layout,
    stage_costs,
)
from ...layout.measure import simulate_from_trace
from ...grading.parts import Parts, plural
from .common import (
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_int,
    expect_keys,
    expect_number,
    expect_type,
    fail,
)
from .m049 import expected_metrics, expected_slowest
from .m050 import check_profile_layout
from .synthetic import (
    BANK,
    BANK_GBPS,
    BANK_LAT_US,
    BANK_M,
    BANK_MEASURED,
    BANK_PP,
    TIGHT,
    _not_rounded,
    make_trace,
    bank_balance,
    bank_plan,
)


# == M054 main ==========================================================================================
def bank_p2p_ms(latency_us: float = BANK_LAT_US, gbps: float = BANK_GBPS) -> float:
    """One transfer's time (ms) under an assumed latency and bandwidth: latency + boundary bytes / bandwidth."""
    return latency_us * 1e-3 + boundary_bytes(BANK) / (gbps * 1e9) * 1e3


def bank_factors(microbatches: int = BANK_M, layout: str | None = None, latency_us: float = BANK_LAT_US,
                 gbps: float = BANK_GBPS, measured: float | None = BANK_MEASURED) -> dict:
    """decompose_speedup of bank-pp8 (ms units): name -> Factor."""
    plan = bank_plan(layout or str(even_layout(BANK.layers, BANK_PP)), microbatches)
    rows = decompose_speedup(BANK_PP, microbatches, plan.stage_fwd, plan.stage_bwd, bank_p2p_ms(latency_us, gbps),
                             measured)
    return {r.name: r for r in rows}


def expected_local() -> dict:
    costs = stage_costs(even_layout(BANK.layers, BANK_PP), BANK, BANK_PP)
    params = [c.params for c in costs]
    plan = bank_plan(str(even_layout(BANK.layers, BANK_PP)))
    times = plan.stage_times
    f = bank_factors()
    return {"bubble": 1 - f["bubble"].factor, "bound": f["bubble"].speedup, "efficiency": BANK_MEASURED / BANK_PP,
            "param_ratio": max(params) / min(params), "slow_over_mean": max(times) / (sum(times) / len(times))}


@check
def check_local(local) -> None:
    want = expected_local()
    expect_keys(local, tuple(want), "local")
    pp, m = BANK_PP, BANK_M
    parts = Parts()
    for key, exp in want.items():
        with parts.part():
            got = expect_number(local[key], f"local[{key!r}]")
            if close(got, exp, rel=TIGHT):
                continue
            where = f"local[{key!r}] = {got:.4g}"
            if key == "bubble":
                if close(got, (pp - 1) / m, rel=2e-3):
                    fail(f"{where} is (pp-1)/M, the bubble over the *ideal* time (Megatron's ratio); the "
                         f"bubble here is the idle share of the whole step {DECOMPOSITION}")
                if close(got, exp * 100, rel=2e-3):
                    fail(f"{where} is a percentage; give a fraction (the value is right otherwise)")
            if key == "bound" and close(got, m / (m + pp - 1), rel=2e-3):
                fail(f"{where} is the utilisation of one device; the bound on the speedup counts every device "
                     f"{DECOMPOSITION}")
            if key == "efficiency" and close(got, BANK_MEASURED / want["bound"], rel=2e-3):
                fail(f"{where} compares 2.59x with the bubble bound; parallel efficiency compares the speedup with "
                     f"the number of devices {DECOMPOSITION}")
            if key == "slow_over_mean":
                if close(got, want["param_ratio"], rel=2e-3):
                    fail(f"{where} is the parameter ratio; time is what counts: the slowest stage's F + B over the "
                         f"mean "
                         "stage's, with stage times from FLOPs (plan_for)")
                costs = stage_costs(even_layout(BANK.layers, BANK_PP), BANK, BANK_PP)
                params = [c.params for c in costs]
                if close(got, max(params) / (sum(params) / len(params)), rel=2e-3):
                    fail(f"{where} uses parameters; use the stage times (F + B from FLOPs)")
                times = bank_plan(str(even_layout(BANK.layers, BANK_PP))).stage_times
                if close(got, max(times) / min(times), rel=2e-3):
                    fail(f"{where} is slowest / fastest; the imbalance factor compares the slowest with the *mean* "
                         f"stage")
            _not_rounded(got, exp, f"local[{key!r}]")
            fail(f"{where} is not the kit's value (decompose_speedup and stage_costs of the even split)")
    parts.done()


DECOMPOSITION = book("case-study", "The decomposition")  # where the book teaches what these checks find
LOSS_NAMES = {"imbalance": "stage imbalance", "p2p": "P2P", "remainder": "remainder"}


@check
def check_losses(losses) -> None:
    f = bank_factors()
    expect_keys(losses, tuple(LOSS_NAMES), "losses")
    parts = Parts()
    for key, name in LOSS_NAMES.items():
        with parts.part():
            got = expect_number(losses[key], f"losses[{key!r}]")
            want = f[name].factor
            if close(got, want, rel=TIGHT):
                continue
            where = f"losses[{key!r}] = {got:.4g}"
            if close(got, f[name].speedup, rel=2e-3):
                fail(f"{where} is the speedup left after this loss; give the factor itself (this row's speedup over "
                     f"the "
                     "previous row's)")
            if close(got, 1 - want, rel=2e-3):
                fail(f"{where} is the share lost; give the multiplicative factor (speedup left / speedup before)")
            if key == "imbalance":
                costs = stage_costs(even_layout(BANK.layers, BANK_PP), BANK, BANK_PP)
                params = [c.params for c in costs]
                if close(got, min(params) / max(params), rel=2e-3):
                    fail(f"{where} is the inverse of the parameter ratio the interview question bank blames, which "
                         "is not the time imbalance; simulate the real cut against the same work balanced")
            if key == "p2p" and close(got, 1.0):
                fail(f"{where}: with 20 us + {boundary_bytes(BANK)} bytes / 10 GB/s per transfer the P2P factor is "
                     f"below 1 "
                     "-- pass p2p_latency (in the same unit as the stage times) to decompose_speedup")
            _not_rounded(got, want, f"losses[{key!r}]")
            fail(f"{where} is not the factor of decompose_speedup (bank-pp8 even split, 100 TFLOP/s, P2P 20 us + "
                 f"bytes / "
                 "10 GB/s, measured 2.59)")
    parts.done()
    product = losses["imbalance"] * losses["p2p"] * losses["remainder"]
    if not close(product * f["bubble"].speedup, BANK_MEASURED, rel=2e-3):
        fail(f"the three factors multiply to {product:.4f}; times the bubble bound they must give the measured 2.59x")


def expected_m32() -> dict:
    f16, f32 = bank_factors(), bank_factors(2 * BANK_M, measured=None)
    return {"bubble_only": f32["bubble"].speedup,
            "naive": BANK_MEASURED * f32["bubble"].speedup / f16["bubble"].speedup,
            "modelled": f32["P2P"].speedup * f16["remainder"].factor,
            "gbs_factor": 2}


@check
def check_m32(m32) -> None:
    want = expected_m32()
    expect_keys(m32, tuple(want), "m32")
    f32 = bank_factors(2 * BANK_M, measured=None)
    parts = Parts()
    for key, exp in want.items():
        with parts.part():
            got = expect_number(m32[key], f"m32[{key!r}]")
            if close(got, exp, rel=TIGHT):
                continue
            where = f"m32[{key!r}] = {got:.4g}"
            if key == "bubble_only" and close(got, 1 - (BANK_PP - 1) / (2 * BANK_M + BANK_PP - 1), rel=2e-3):
                fail(f"{where} is the utilisation of one device at M=32; as a speedup it counts every device")
            if key == "naive" and close(got, want["bubble_only"], rel=2e-3):
                fail(f"{where} is the bubble bound itself; the naive claim scales the *measured* 2.59x by the bubble "
                     "bound's gain from M=16 to M=32")
            if key == "modelled":
                if close(got, f32["P2P"].speedup, rel=2e-3):
                    fail(f"{where} leaves out the remainder: keep the M=16 remainder factor (the unexplained overheads "
                         "do not vanish) and multiply")
                if close(got, want["naive"], rel=2e-3):
                    fail(f"{where} is the naive claim; redo the decomposition at M=32: the imbalance factor falls as M "
                         "grows, which eats most of the bubble's gain")
            if key == "gbs_factor":
                fail(f"{where}: with the micro-batch size fixed, doubling M doubles the global batch (GBS = M x "
                     "micro-batch size) -- a different optimisation problem, not just a different schedule")
            _not_rounded(got, exp, f"m32[{key!r}]")
            fail(f"{where} is not the decomposition's value (see C.3 for how each is computed)")
    parts.done()


@check
def check_next(next_experiment) -> None:
    """Three parts: the layout, the held M and micro-batch size, and the prediction (judged with the student's
    own layout, so a slow layout costs its part only)."""
    expect_keys(next_experiment, ("layout", "microbatches", "micro_batch_size", "predicted_speedup"), "next_experiment")
    text = next_experiment["layout"]
    parts = Parts()
    with parts.part():
        check_profile_layout(text, "next_experiment['layout']")
    with parts.part():
        m = expect_number(next_experiment["microbatches"], "next_experiment['microbatches']")
        mbs = expect_number(next_experiment["micro_batch_size"], "next_experiment['micro_batch_size']")
        if (m, mbs) != (BANK_M, BANK.micro_batch_size):
            fail(f"next_experiment runs M={m:g}, micro-batch size {mbs:g}; the baseline is M={BANK_M}, micro-batch "
                 f"size {BANK.micro_batch_size}: the re-split must keep both (and so the global batch), or its gain "
                 "is not the layout's")
    with parts.part():
        _next_prediction(next_experiment, text)
    parts.done()


def _next_prediction(next_experiment, text) -> None:
    try:
        f = bank_factors(layout=text, measured=None)
    except Exception:  # noqa: BLE001 -- a layout bank-pp8 cannot run: the layout part says why
        fail("next_experiment['predicted_speedup'] cannot be checked: its layout does not fit bank-pp8 on 8 stages")
    want = f["P2P"].speedup
    got = expect_number(next_experiment["predicted_speedup"], "next_experiment['predicted_speedup']")
    if close(got, want, rel=TIGHT):
        return
    if close(got, f["stage imbalance"].speedup, rel=2e-3):
        fail(f"next_experiment['predicted_speedup'] = {got:.4g} leaves out P2P; use the same 20 us + bytes / 10 GB/s "
             "as the baseline, so the two predictions differ only by the layout")
    even = bank_factors(measured=None)["P2P"].speedup
    if close(got, even, rel=2e-3) and not close(even, want, rel=2e-3):
        fail(f"next_experiment['predicted_speedup'] = {got:.4g} is the even split's; decompose your layout's stage "
             "times")
    _not_rounded(got, want, "next_experiment['predicted_speedup']")
    fail(f"next_experiment['predicted_speedup'] = {got:.4g} is not what decompose_speedup gives with your layout's "
         "stage times and the same P2P (the speedup after the P2P row)")


# == M054 follow-up =====================================================================================
def expected_single_ms() -> float:
    plan = bank_plan(str(even_layout(BANK.layers, BANK_PP)))
    return BANK_M * sum(plan.stage_times)


@check
def check_single(single_device_ms) -> None:
    got = expect_number(single_device_ms, "single_device_ms")
    want = expected_single_ms()
    if close(got, want, rel=TIGHT):
        return
    plan = bank_plan(str(even_layout(BANK.layers, BANK_PP)))
    if close(got, sum(plan.stage_times), rel=1e-4):
        fail(f"single_device_ms = {got:.4g} is one microbatch; one device runs all {BANK_M} microbatches of the step "
             "through all 8 stages' layers")
    if close(got, BANK_M * sum(plan.stage_fwd), rel=1e-4):
        fail(f"single_device_ms = {got:.4g} counts only forwards; add the backwards")
    if close(got, want / 1e3, rel=1e-4):
        fail(f"single_device_ms = {got:.4g} is in seconds; report ms (the value is right otherwise)")
    _not_rounded(got, want, "single_device_ms")
    fail(f"single_device_ms = {got:.4g} is not the step's work on one device, in ms: every microbatch through every "
         f"stage, forward and backward {DECOMPOSITION}")


def bank_trace() -> dict:
    """A PP8/M16 trace of bank-pp8 (even split) with the assumed P2P and 3% jitter per op; the last stage runs
    15% over its FLOPs (softmax and cross-entropy are memory-bound), which a FLOPs model cannot know."""
    plan = bank_plan(str(even_layout(BANK.layers, BANK_PP)))
    over = [1.0] * (BANK_PP - 1) + [1.15]
    return make_trace([f * x for f, x in zip(plan.stage_fwd, over)], [b * x for b, x in zip(plan.stage_bwd, over)],
                      BANK_M, bank_p2p_ms(), jitter=0.03, seed=8, layout=str(plan.layout))


def expected_trace_check(trace: dict) -> dict:
    rows = expected_metrics(trace)
    fwd, bwd = [r["F_p50"] for r in rows], [r["B_p50"] for r in rows]
    f = {r.name: r for r in decompose_speedup(trace["pp"], trace["microbatches"], fwd, bwd,
                                              trace["p2p_latency"] * 1e3)}
    return {"slowest_stage": expected_slowest(trace), "imbalance": f["stage imbalance"].factor,
            "predicted_ms": simulate_from_trace(trace, "p50", scale=1e3).makespan}


@check
def check_trace_check(trace_check, trace) -> None:
    want = expected_trace_check(trace)
    expect_keys(trace_check, tuple(want), "trace_check")
    parts = Parts()
    with parts.part():
        got = expect_int(trace_check["slowest_stage"], "trace_check['slowest_stage']")
        if got != want["slowest_stage"]:
            hint = " -- stage 0 has the parameters, not the time" if got == 0 else ""
            fail(f"trace_check['slowest_stage'] is {got}, not the stage with the largest p50 F + B service time "
                 f"in the trace{hint}")
    for key in ("imbalance", "predicted_ms"):
        with parts.part():
            value = expect_number(trace_check[key], f"trace_check[{key!r}]")
            if close(value, want[key], rel=TIGHT):
                continue
            if key == "imbalance" and close(value, bank_factors()["stage imbalance"].factor, rel=1e-4):
                fail("trace_check['imbalance'] is the FLOPs model's factor; recompute it from the "
                     "trace's "
                     "p50 service times -- the point is to check the model against the measurement")
            _not_rounded(value, want[key], f"trace_check[{key!r}]")
            fail(f"trace_check[{key!r}] = {value:.4g} is not what the trace gives (from its p50 F and B service "
                 "times and its p2p_latency)")
    parts.done()


def expected_resplit() -> dict:
    best = str(bank_balance().best.layout)
    return {"even": bank_factors(measured=None)["P2P"].speedup,
            "balanced": bank_factors(layout=best, measured=None)["P2P"].speedup}


@check
def check_resplit(resplit) -> None:
    want = expected_resplit()
    expect_keys(resplit, tuple(want), "resplit")
    best = str(bank_balance().best.layout)
    parts = Parts()
    for key, exp in want.items():
        with parts.part():
            got = expect_number(resplit[key], f"resplit[{key!r}]")
            if close(got, exp, rel=TIGHT):
                continue
            layout = None if key == "even" else best
            f = bank_factors(layout=layout, measured=None)
            if close(got, f["stage imbalance"].speedup, rel=2e-3):
                fail(f"resplit[{key!r}] = {got:.4g} leaves out P2P: both layouts pay the same 20 us + bytes / 10 "
                     f"GB/s per "
                     "transfer, so keep it in both")
            if key == "balanced" and close(got, bank_factors(layout=best)["remainder"].speedup, rel=2e-3):
                fail(f"resplit['balanced'] = {got:.4g} is the measured 2.59x; the balanced layout has not been "
                     f"measured -- "
                     "predict it")
            _not_rounded(got, exp, f"resplit[{key!r}]")
            fail(f"resplit[{key!r}] = {got:.4g} is not the prediction of decompose_speedup at M=16 with the same "
                 f"P2P, speedup "
                 "after the P2P row)")
    parts.done()


SPLIT_CASES = [(20.0, 10.0), (50.0, 5.0)]


@check
def check_split(split_p2p, cases) -> None:
    for lat, gbps in cases:
        got = call(split_p2p, lat, gbps, name="split_p2p")
        expect_type(got, (tuple, list), f"split_p2p({lat:g}, {gbps:g})")
        if len(got) != 2:
            fail(f"split_p2p({lat:g}, {gbps:g}) must return (p2p_factor, remainder_factor), got {describe(got)}")
        f = bank_factors(latency_us=lat, gbps=gbps)
        want = (f["P2P"].factor, f["remainder"].factor)
        p2p, rest = (expect_number(x, f"split_p2p({lat:g}, {gbps:g})") for x in got)
        if close(p2p, want[0], rel=TIGHT) and close(rest, want[1], rel=TIGHT):
            continue
        wrong_bytes = bank_factors(latency_us=lat, gbps=gbps * 8)  # bits vs bytes
        if close(p2p, wrong_bytes["P2P"].factor, rel=2e-3):
            fail(f"split_p2p({lat:g}, {gbps:g}): the P2P factor {p2p:.4g} treats GB/s as Gbit/s; one transfer is "
                 f"{boundary_bytes(BANK)} bytes / ({gbps:g} x 1e9 bytes/s)")
        no_bw = bank_factors(latency_us=lat, gbps=1e12)
        if close(p2p, no_bw["P2P"].factor, rel=2e-3):
            fail(f"split_p2p({lat:g}, {gbps:g}): the P2P factor {p2p:.4g} counts only the latency; add bytes / "
                 "bandwidth per transfer")
        if not close(p2p * rest, want[0] * want[1], rel=2e-3):
            fail(f"split_p2p({lat:g}, {gbps:g}): the two factors do not fit: their product must stay "
                 "the same whatever the P2P assumption -- the assumption only moves loss between "
                 "'P2P' and 'remainder' (the measured 2.59x does not change)")
        fail(f"split_p2p({lat:g}, {gbps:g}) = ({p2p:.4g}, {rest:.4g}) are not the P2P and remainder factors of "
             "decompose_speedup under that assumption")


SWEEP_CASES = [(32, [8, 16, 32, 64])]


def expected_sweep(gbs: int, ms) -> list[tuple[int, int]]:
    return [(m, gbs // m) for m in ms if gbs % m == 0]


@check
def check_sweep(fair_m_sweep, cases) -> None:
    for gbs, ms in cases:
        got = call(fair_m_sweep, gbs, list(ms), name="fair_m_sweep")
        want = expected_sweep(gbs, ms)
        expect_type(got, (list, tuple), f"fair_m_sweep({gbs}, {ms})")
        try:
            pairs = [tuple(p) for p in got]
        except TypeError:
            fail(f"fair_m_sweep({gbs}, {ms}) must be a list of (M, micro_batch_size) pairs, got {describe(got)}")
        if pairs == want and all(isinstance(x, numbers.Integral) for p in pairs for x in p):
            continue
        if pairs == want:
            fail(f"fair_m_sweep({gbs}, {ms}): micro-batch sizes must be integers (use //), got {describe(got)}")
        if any(p[0] * p[1] != gbs for p in pairs if len(p) == 2):
            bad = next(p for p in pairs if len(p) != 2 or p[0] * p[1] != gbs)
            product = bad[0] * bad[1] if len(bad) == 2 else "?"
            fail(f"fair_m_sweep({gbs}, {ms}) contains {bad}: M x micro-batch size = {product}, "
                 f"not the global batch {gbs} -- a run with another GBS cannot be compared with the baseline")
        missing = [p for p in want if p not in pairs]
        extra = [p for p in pairs if p not in want]
        if extra:
            fail(f"fair_m_sweep({gbs}, {ms}) includes {extra}: an M that does not divide the global batch {gbs} has no "
                 "integer micro-batch size -- leave it out")
        if missing:
            fail(f"fair_m_sweep({gbs}, {ms}) misses {plural(len(missing), 'pair')}: keep every M of ms that divides "
                 "the global batch")
        fail(f"fair_m_sweep({gbs}, {ms}) = {describe(got)}: give the pairs in the order of ms")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_split_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (float(r.randint(0, 100)), float(r.choice([1, 2, 5, 10, 25, 50, 100]))),
                 fixed=[(0.0, 50.0)])


def hidden_sweep_cases(rng) -> list:
    def make(r):
        gbs = r.randint(1, 128)
        return gbs, sorted(r.sample(range(1, 129), r.randint(3, 7)), key=lambda _: r.random())
    return drawn(rng, 2, make, fixed=[(16, [16, 8, 5]), (1, [1, 2])])
