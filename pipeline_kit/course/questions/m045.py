"""M045 (lab 3): what more microbatches buy, at a fixed micro-batch size and at a fixed global batch, and how
to compare the two fairly.

Expected values come from the simulator with a per-op cost ``alpha + beta * b``; the checks recognise
the usual slips (GPipe's memory for 1F1B's, M2/M1 for a throughput gain, a global batch without dp) and
the confounders a fair comparison must name.
"""

from __future__ import annotations

import functools
from fractions import Fraction

from ...grading.parts import Parts

from .common import (
    LabCheckFailed,
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_keys,
    expect_number,
    expect_raises,
    expect_type,
    fail,
    first_match,
)
from .m044 import _sim

FIXED_B = book("bubble", "Fixed micro-batch size: more work per step")  # where the book teaches it
FIXED_GBS = book("bubble", "Fixed global batch: smaller micro-batches")
M045 = {"pp": 8, "alpha": 0.5, "beta": 1.0, "overhead": 50.0, "b": 4, "gbs": 64, "ms": (8, 16, 32, 64)}


# -- M045 main ---------------------------------------------------------------------------------------
def _samples_per_time(pp: int, m: int) -> float:
    return m / _sim(pp, m, fwd=Fraction(1), bwd=Fraction(2)).makespan


@check
def check_gain(throughput_gain, cases) -> None:
    for pp, m1, m2 in cases:
        r1, r2 = (_sim(pp, m, fwd=Fraction(1), bwd=Fraction(2)) for m in (m1, m2))
        want = (m2 / r2.makespan) / (m1 / r1.makespan)
        got = expect_number(call(throughput_gain, pp, m1, m2, name="throughput_gain"),
                            f"throughput_gain({pp}, {m1}, {m2})")
        if close(got, float(want), rel=1e-6):
            continue
        why = first_match(got, [
            (r2.makespan / r1.makespan, ("that is the ratio of step times: the step gets longer, but it processes more "
                                         "samples -- compare samples per unit of time")),
            (Fraction(m2, m1), "M2/M1 ignores the bubble: the step grows too"),
            (r1.bubble_fraction / r2.bubble_fraction, "the ratio of bubble fractions is not a throughput ratio"),
            (1 / want, "the ratio is upside down: throughput at M2 over throughput at M1"),
        ]) or "samples per unit of time (M / makespan, fixed micro-batch size) at M2 over the same at M1"
        fail(f"throughput_gain({pp}, {m1}, {m2}) = {got:.4g} is not the gain in samples per unit of time: {why} "
             f"{FIXED_B}")


def _own_global_batch(global_batch, b, m, dp):
    """The student's own ``global_batch(b, M, dp)`` when it is a positive int, else None: an
    ``updates_per_epoch`` built on it is judged against it, so a wrong ``global_batch`` costs its own part only."""
    try:
        got = call(global_batch, b, m, dp, name="global_batch")
    except LabCheckFailed:
        return None
    return got if isinstance(got, int) and not isinstance(got, bool) and got > 0 else None


@check
def check_gbs(global_batch, updates_per_epoch, micro_batch_size, cases) -> None:
    """Three functions, one part each (micro_batch_size's part includes refusing a batch that does not split)."""
    parts = Parts()
    with parts.part():
        for b, m, dp, samples in cases:
            gbs = b * m * dp
            got = call(global_batch, b, m, dp, name="global_batch")
            if got != gbs:
                why = ("data-parallel replicas each run M microbatches too" if got == b * m
                       else "count the sequences one optimizer step consumes, over every replica")
                fail(f"global_batch(b={b}, M={m}, dp={dp}) = {describe(got)}: {why} {FIXED_B}")
    with parts.part():
        for b, m, dp, samples in cases:
            gbs = b * m * dp
            own = _own_global_batch(global_batch, b, m, dp)
            got = call(updates_per_epoch, samples, b, m, dp, name="updates_per_epoch")
            if got == samples // gbs or (own is not None and own != gbs and got == samples // own):
                continue  # right, or right on the student's own global_batch (its mistake is counted there)
            if got == -(-samples // gbs):
                why = "count full steps only (floor), a partial batch is dropped"
            elif got == samples // (b * m):
                why = "each update consumes a global batch, over every data-parallel replica"
            else:
                why = "each optimizer update consumes one global batch"
            fail(f"updates_per_epoch({samples}, b={b}, M={m}, dp={dp}) = {describe(got)}: {why} -- at a fixed "
                 "micro-batch size, more M means fewer, larger updates: a different training run")
    with parts.part():
        for b, m, dp, samples in cases:
            gbs = b * m * dp
            got = call(micro_batch_size, gbs, m, dp, name="micro_batch_size")
            if got != b:
                why = ("the data-parallel replicas share the global batch too" if got == gbs // m
                       else "which sizes multiply to the global batch?")
                fail(f"micro_batch_size(GBS={gbs}, M={m}, dp={dp}) = {describe(got)}: {why} {FIXED_B}")
        for gbs, m, dp in ((64, 3, 1), (96, 8, 8)):
            expect_raises(micro_batch_size, gbs, m, dp, name="micro_batch_size",
                          why=f"{gbs} sequences do not split into {m} x {dp} equal micro-batches (rounding would "
                              "change the global batch)")
    parts.done()


def expected_point(pp: int, gbs: int, m: int, alpha: float, beta: float) -> dict[str, float]:
    b = gbs / m
    f = alpha + beta * b
    r = _sim(pp, m, fwd=f, bwd=2 * f, activation_bytes=b)
    return {"step_time": r.makespan, "peak_sequences": max(r.peak_activation_bytes)}


@check
def check_fixed_gbs(fixed_gbs_point, cases) -> None:
    """Two properties, one part each: the step time and the peak memory, over every case."""
    results = []
    for pp, gbs, m, alpha, beta in cases:
        got = call(fixed_gbs_point, pp, gbs, m, alpha, beta, name="fixed_gbs_point")
        label = f"fixed_gbs_point({pp}, {gbs}, {m}, {alpha}, {beta})"
        if not isinstance(got, dict):
            fail(f"{label} must return a dict with the keys 'step_time' and 'peak_sequences' (numbers), got "
                 f"{type(got).__name__} {describe(got)}")
        expect_keys(got, ("step_time", "peak_sequences"), label)
        results.append(((pp, gbs, m, alpha, beta), label, got))
    parts = Parts()
    with parts.part():
        for (pp, gbs, m, alpha, beta), label, got in results:
            want = expected_point(pp, gbs, m, alpha, beta)
            b = gbs / m
            t = expect_number(got["step_time"], f"{label}['step_time']")
            if close(t, want["step_time"], rel=1e-6):
                continue
            why = first_match(t, [
                (_sim(pp, m, fwd=alpha + beta * gbs, bwd=2 * (alpha + beta * gbs)).makespan,
                 "each microbatch carries b = GBS/M sequences, not the whole global batch"),
                (_sim(pp, m, fwd=beta * b, bwd=2 * beta * b).makespan,
                 "the per-op overhead alpha is missing: it is what makes a very large M slow"),
                (_sim(pp, m, fwd=alpha + beta * b, bwd=alpha + 2 * beta * b).makespan,
                 "the backward costs 2x the whole forward, overhead included"),
            ]) or "simulate 1F1B with fwd = alpha + beta x b and bwd = 2 x fwd"
            fail(f"{label}['step_time'] = {t:.6g} is not the simulated step: {why}")
    with parts.part():
        for (pp, gbs, m, alpha, beta), label, got in results:
            want = expected_point(pp, gbs, m, alpha, beta)
            b = gbs / m
            peak = expect_number(got["peak_sequences"], f"{label}['peak_sequences']")
            if close(peak, want["peak_sequences"], rel=1e-6):
                continue
            why = first_match(peak, [
                (gbs, ("that is GPipe's peak (all M microbatches); in 1F1B a backward frees a microbatch before "
                       "rank 0 has forwarded them all")),
                (min(pp, m), "that counts microbatches; a microbatch holds b sequences"),
                (pp * b, "with M < pp rank 0 cannot keep pp microbatches"),
                ((pp - 1) * b, "that counts rank 0's warmup forwards only; one more is live before its first backward"),
            ]) or "the worst rank's live microbatches, in sequences (simulate with activation_bytes=b)"
            fail(f"{label}['peak_sequences'] = {peak:g} is not the worst rank's peak in sequences: {why} {FIXED_GBS}")
    parts.done()


STUDIED = ("microbatches", "micro_batch_size")


def expected_confounders(a: dict, b: dict) -> set[str]:
    out = {k for k in a if k not in STUDIED and a[k] != b.get(k)}
    if a["micro_batch_size"] * a["microbatches"] * a["dp"] != b["micro_batch_size"] * b["microbatches"] * b["dp"]:
        out.add("global_batch")
    return out


@check
def check_confounders(confounders, pairs) -> None:
    for a, b in pairs:
        got = call(confounders, a, b, name="confounders")
        expect_type(got, (set, frozenset), "confounders(...)")
        want = expected_confounders(a, b)
        if got == want:
            continue
        label = f"confounders(M={a['microbatches']} b={a['micro_batch_size']} ..., M={b['microbatches']} " \
                f"b={b['micro_batch_size']} ...)"
        if "microbatches" in got:
            fail(f"{label} lists 'microbatches': M is the variable under study, not a confounder")
        if "micro_batch_size" in got:
            fail(f"{label} lists 'micro_batch_size': at a fixed global batch b must change with M -- it is part of "
                 "the treatment")
        if "global_batch" in want - got:
            fail(f"{label} misses 'global_batch': the two runs do not consume the same global batch per update, so "
                 f"they optimise differently (compute it: it is not a key of the runs) {FIXED_GBS}")
        missing, extra = sorted(want - got), sorted(got - want)
        if missing:
            fail(f"{label} misses {missing}: they differ between the runs, so a difference in speed could come "
                 "from them")
        fail(f"{label} lists {extra}, which do not differ (or are not variables of the runs)")


# -- M045 follow-up -------------------------------------------------------------------------------
METHODS = ("fixed_b", "fixed_gbs", "simulate")


@check
def check_methods(method_for) -> None:
    expect_keys(method_for, ("mechanism", "production"), "method_for")
    for key in ("mechanism", "production"):
        if method_for[key] not in METHODS:
            fail(f"method_for[{key!r}] is {describe(method_for[key])}; choose one of {', '.join(METHODS)}")
    mech, prod = method_for["mechanism"], method_for["production"]
    if mech != "simulate":
        other = {"fixed_b": "fixed b lets the global batch grow, so per-step costs are amortised differently",
                 "fixed_gbs": "fixed GBS shrinks b, so GEMM efficiency (the per-op overhead) changes with M"}[mech]
        fail(f"method_for['mechanism'] is {mech!r}: {other}. Only simulating the schedule with measured service "
             "times changes M and nothing else")
    if prod != "fixed_gbs":
        other = {"fixed_b": "with a fixed b, a faster step at larger M trains with a larger global batch -- not the "
                            "same training run",
                 "simulate": "a production choice must be measured on the real system"}[prod]
        fail(f"method_for['production'] is {prod!r}: {other}. Hold the samples per optimizer update (GBS) fixed and "
             "choose b, M jointly")


def expected_scheme(pp, m, alpha, beta, overhead, b=None, gbs=None) -> float:
    b = gbs / m if b is None else b
    f = alpha + beta * b
    return m * b / (_sim(pp, m, fwd=f, bwd=2 * f).makespan + overhead)


@check
def check_schemes(scheme_throughput, cases) -> None:
    for pp, m, alpha, beta, overhead, kw in cases:
        got = expect_number(call(scheme_throughput, pp, m, alpha, beta, overhead, name="scheme_throughput", **kw),
                   "scheme_throughput(...)")
        options = ", ".join(f"{k}={v}" for k, v in kw.items())
        label = f"scheme_throughput({pp}, {m}, {alpha}, {beta}, {overhead}, {options})"
        want = expected_scheme(pp, m, alpha, beta, overhead, **kw)
        if close(got, want, rel=1e-6):
            continue
        b = kw.get("b") or kw["gbs"] / m
        f = alpha + beta * b
        span = _sim(pp, m, fwd=f, bwd=2 * f).makespan
        cands = [
            (m * b / span, ("the per-step overhead is missing: the step is the schedule plus the fixed cost after the "
                            "flush (gradient all-reduce, optimizer)")),
            (m / (span + overhead), "that counts microbatches; throughput counts samples, M x b"),
            (span + overhead, "that is the step time; throughput is samples per unit of time"),
        ]
        if "gbs" in kw:
            g = kw["gbs"]
            cands.append((m * g / (_sim(pp, m, fwd=alpha + beta * g, bwd=2 * (alpha + beta * g)).makespan + overhead),
                          "with gbs given, each microbatch holds b = gbs/M sequences"))
        why = first_match(got, cands) or "count samples per unit of time, the per-step overhead included"
        fail(f"{label} = {got:.6g} is not the scheme's throughput: {why} {FIXED_GBS}")


@functools.lru_cache(maxsize=1)
def _sweeps() -> tuple[dict, dict, dict]:
    p = M045
    fixed_b = {m: expected_scheme(p["pp"], m, p["alpha"], p["beta"], p["overhead"], b=p["b"]) for m in p["ms"]}
    bare = {m: expected_scheme(p["pp"], m, p["alpha"], p["beta"], 0, b=p["b"]) for m in p["ms"]}
    fixed_gbs = {m: expected_scheme(p["pp"], m, p["alpha"], p["beta"], p["overhead"], gbs=p["gbs"]) for m in p["ms"]}
    return fixed_b, bare, fixed_gbs


@check
def check_confounder(confounder, amortisation) -> None:
    options = ("bubble", "step_overhead", "per_op_overhead")
    if confounder not in options:
        fail(f"confounder is {describe(confounder)}; choose one of {', '.join(options)}")
    if confounder != "step_overhead":
        why = {"bubble": "the bubble is the mechanism under study, not the confounder",
               "per_op_overhead": "with a fixed b the per-op cost alpha + beta x b does not change with M"}[confounder]
        fail(f"confounder is {confounder!r}: {why}. Growing GBS with M spreads the fixed per-step cost over more "
             "samples -- a gain the bubble has nothing to do with")
    fixed_b, bare, _ = _sweeps()
    lo, hi = M045["ms"][0], M045["ms"][-1]
    total, schedule_only = fixed_b[hi] / fixed_b[lo], bare[hi] / bare[lo]
    got = expect_number(amortisation, "amortisation")
    want = total / schedule_only
    if not close(got, want, rel=1e-4):
        why = first_match(got, [
            (total, "that is the whole gain; divide out the part the schedule explains (the run without overhead)"),
            (schedule_only, "that is the part the schedule (bubble) explains; the confounder is the rest"),
            (schedule_only / total, "the ratio is upside down: total gain / schedule-only gain"),
        ]) or "compare the fixed-b sweep's gain from M=8 to M=64 with the overhead and without it"
        fail(f"amortisation = {got:.4g} is not the part of the gain the schedule does not explain: {why} {FIXED_B}")


@check
def check_conclusion(more_m_better, best_m_fixed_gbs) -> None:
    expect_keys(more_m_better, ("fixed_b", "fixed_gbs"), "more_m_better")
    fixed_b, _, fixed_gbs = _sweeps()
    lo, hi = M045["ms"][-2], M045["ms"][-1]
    for key, sweep in (("fixed_b", fixed_b), ("fixed_gbs", fixed_gbs)):
        got = more_m_better[key]
        expect_type(got, bool, f"more_m_better[{key!r}]")
        want = sweep[hi] > sweep[lo]
        if got != want:
            fail(f"more_m_better[{key!r}] is {got}: compare the {key} throughputs of your sweep at M={lo} and "
                 f"M={hi} -- the interview question bank's 'more M is better' holds in one scheme only")
    best = max(fixed_gbs, key=fixed_gbs.get)
    if best_m_fixed_gbs != best:
        fail(f"best_m_fixed_gbs is {describe(best_m_fixed_gbs)}, not the M of the highest fixed-GBS throughput of "
             "your sweep -- past the best M the per-op overhead of ever smaller micro-batches wins over the shrinking "
             f"bubble {FIXED_GBS}")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_gain_cases(rng) -> list:
    def make(r):
        m1 = r.randint(1, 12)
        return r.randint(2, 8), m1, m1 * r.choice([2, 3, 4])
    return drawn(rng, 3, make, fixed=[(2, 1, 2), (4, 2, 8)])


def hidden_gbs_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (r.randint(1, 8), r.randint(1, 64), r.randint(1, 8), r.randint(1, 200_000)),
                 fixed=[(8, 4, 2, 63)])


def hidden_fixed_gbs_cases(rng) -> list:
    def make(r):
        m = r.randint(1, 32)
        return r.randint(2, 8), m * r.randint(1, 8), m, r.choice([0.25, 0.5, 1.0]), r.choice([0.5, 1.0, 2.0])
    return drawn(rng, 2, make, fixed=[(2, 12, 3, 1.0, 0.5), (4, 6, 2, 0.5, 1.0)])


def hidden_scheme_cases(rng) -> list:
    def make(r):
        pp, m, b = r.randint(2, 8), r.randint(1, 32), r.randint(1, 8)
        kw = {"b": b} if r.random() < 0.5 else {"gbs": m * b}
        return pp, m, r.choice([0.0, 0.25, 1.0]), r.choice([0.5, 1.0, 2.0]), r.choice([0.0, 5.0, 10.0, 50.0]), kw
    return drawn(rng, 2, make, fixed=[(2, 3, 0.0, 1.0, 5.0, {"gbs": 12})])


def hidden_confounder_pairs(rng) -> list:
    """(run_a, run_b) pairs: M changes, b changes or not, and zero to two other knobs change with it.

    The fixed pairs come first: one changes dp so that b x M x dp stays the same (dp is a confounder, the global
    batch is not); one changes every other knob at the same global batch (a check of some keys only misses one).
    """
    knobs = {"pp": [2, 4, 8], "dp": [1, 2, 4], "seq_len": [1024, 2048, 4096], "layout": ["even", "Et*3|...", "E|tL"],
             "gpu": ["H100", "A100", "B200"]}

    def make(r):
        a = {k: r.choice(v) for k, v in knobs.items()}
        a.update(microbatches=r.choice([4, 8, 16]), micro_batch_size=r.choice([2, 4, 8]))
        b = {**a, "microbatches": a["microbatches"] * r.choice([2, 4])}
        b["micro_batch_size"] = r.choice([a["micro_batch_size"], max(1, a["micro_batch_size"] // 2), 1])
        for k in r.sample(sorted(knobs), r.randint(0, 2)):
            b[k] = r.choice([v for v in knobs[k] if v != a[k]])
        return (a, b) if r.random() < 0.5 else (b, a)
    base = {"pp": 8, "dp": 2, "microbatches": 16, "micro_batch_size": 4, "seq_len": 2048, "layout": "even",
            "gpu": "H100"}
    every = {**base, "microbatches": 32, "micro_batch_size": 2, "pp": 4, "seq_len": 4096, "layout": "E|tL",
             "gpu": "A100"}
    return drawn(rng, 3, make, fixed=[(base, {**base, "microbatches": 32, "micro_batch_size": 1, "dp": 4}),
                                      (every, base)])
