"""Lab 3's typical wrong answers (the bubble formula, profiles, the global batch, a fair comparison)."""

import re

from fairness import Wrong

FRAC = "m044_main_bubble_fraction"
SPAN = "m044_main_makespan"
PROFILE = "m044_main_profile"
PLAN = "m044_follow_plan"
GAIN = "m045_main_gain"
GBS = "m045_main_gbs"
MEMORY = "m045_main_memory"
DESIGN = "m045_main_design"

_PLAN = '''
def timeline_plan(trace):
    fwd, bwd, _ = stage_fwd_bwd(service_times(trace))
    chunks = trace["chunks"]
    sched = build_schedule(SCHEDULE, trace["pp"], trace["microbatches"], chunks if chunks > 1 else None)
    balanced = simulate(sched, fwd=FWD * chunks, bwd=BWD * chunks)
    return {"measured": trace["makespan"], "achievable": ACHIEVABLE, "balanced": balanced.makespan}
'''


def plan(schedule='trace["schedule"]', fwd="sum(fwd) / len(fwd)", bwd="sum(bwd) / len(bwd)",
         achievable="simulate_from_trace(trace).makespan"):
    return (_PLAN.replace("SCHEDULE", schedule).replace("FWD", fwd).replace("BWD", bwd)
            .replace("ACHIEVABLE", achievable))


_FIXED_GBS = '''
def fixed_gbs_point(pp, gbs, M, alpha, beta):
    b = gbs / M
    f = alpha + beta * b
    result = simulate(build_schedule("1f1b", pp, M), fwd=f, bwd=2 * f, activation_bytes=b)
    return {"step_time": STEP, "peak_sequences": PEAK}
'''

WRONG = [
    Wrong("fraction-over-ideal", "formula",
          "def bubble_fraction(pp, microbatches):\n    return (pp - 1) / microbatches",
          {FRAC}),
    Wrong("fraction-pp", "formula", "def bubble_fraction(pp, microbatches):\n    return pp / (microbatches + pp - 1)",
          {FRAC}),
    Wrong("fraction-percent", "formula",
          "def bubble_fraction(pp, microbatches):\n    return 100 * (pp - 1) / (microbatches + pp - 1)", {FRAC}),
    Wrong("makespan-b-is-2f", "formula",
          "def makespan(pp, microbatches, f, b):\n    return (microbatches + pp - 1) * 3 * f",
          {SPAN}),
    Wrong("makespan-no-drain", "formula",
          "def makespan(pp, microbatches, f, b):\n    return microbatches * (f + b) + (pp - 1) * f", {SPAN}),
    Wrong("makespan-m-plus-pp", "formula",
          "def makespan(pp, microbatches, f, b):\n    return (microbatches + pp) * (f + b)",
          {SPAN}),
    Wrong("profile-formula", "measured_bubble", '''
def measured_bubble(trace):
    pp, m = trace["pp"], trace["microbatches"]
    return (pp - 1) / (m + pp - 1)
''', {PROFILE}),
    Wrong("profile-waits-busy", "measured_bubble", '''
def measured_bubble(trace):
    ops = trace["timeline"]
    end = max(o["end"] for o in ops)
    return 1 - sum(o["end"] - o["start"] for o in ops) / (trace["pp"] * end)
''', {PROFILE}),
    Wrong("profile-over-makespan", "measured_bubble", '''
def measured_bubble(trace):
    tl = Timeline.from_trace(trace)
    return sum(end - start for rank in range(tl.pp) for start, end in tl.idle_gaps(rank)) / tl.makespan
''', {PROFILE}),
    Wrong("plan-measured-as-achievable", "timeline_plan", plan(achievable='trace["makespan"]'), {PLAN}),
    Wrong("plan-slowest-stage", "timeline_plan", plan(fwd="max(fwd)", bwd="max(bwd)"), {PLAN}),
    Wrong("plan-balanced-per-chunk", "timeline_plan", plan(fwd="sum(fwd) / len(fwd) / chunks",
                                                           bwd="sum(bwd) / len(bwd) / chunks"), {PLAN}),
    Wrong("gain-m-ratio", "gain", "def throughput_gain(pp, m_from, m_to):\n    return m_to / m_from", {GAIN}),
    Wrong("gain-step-ratio", "gain", '''
def throughput_gain(pp, m_from, m_to):
    def span(m):
        return simulate(build_schedule("1f1b", pp, m), fwd=Fraction(1), bwd=Fraction(2)).makespan
    return span(m_to) / span(m_from)
''', {GAIN}),
    Wrong("gain-upside-down", "gain", '''
def throughput_gain(pp, m_from, m_to):
    def rate(m):
        return m / simulate(build_schedule("1f1b", pp, m), fwd=Fraction(1), bwd=Fraction(2)).makespan
    return rate(m_from) / rate(m_to)
''', {GAIN}),
    # updates_per_epoch calls this global_batch: its mistake costs global_batch's third only
    Wrong("gbs-no-dp", "gbs", "def global_batch(b, M, dp):\n    return b * M", {GBS}, points={GBS: 1.0}),
    Wrong("gbs-ceil-updates", "gbs",
          "def updates_per_epoch(samples, b, M, dp):\n    return -(-samples // global_batch(b, M, dp))",
          {GBS}, points={GBS: 1.0}),
    Wrong("gbs-rounds-micro-batch", "gbs", "def micro_batch_size(gbs, M, dp):\n    return round(gbs / (M * dp))",
          {GBS}, points={GBS: 1.0}),
    Wrong("memory-gpipe-peak", "fixed_gbs", _FIXED_GBS.replace("STEP", "result.makespan").replace("PEAK", "M * b"),
          {MEMORY}, replace=True, points={MEMORY: 1.0}),
    Wrong("memory-microbatches", "fixed_gbs", _FIXED_GBS.replace("STEP", "result.makespan")
          .replace("PEAK", "max(result.peak_activations)"), {MEMORY}, replace=True, points={MEMORY: 1.0}),
    Wrong("memory-no-alpha", "fixed_gbs", _FIXED_GBS.replace("f = alpha + beta * b", "f = beta * b")
          .replace("STEP", "result.makespan").replace("PEAK", "max(result.peak_activation_bytes)"),
          {MEMORY}, replace=True, points={MEMORY: 1.0}),
    Wrong("design-lists-b", "confounders", '''
def confounders(run_a, run_b):
    return {k for k in run_a if k != "microbatches" and run_a[k] != run_b[k]}
''', {DESIGN}),
    Wrong("design-no-global-batch", "confounders", '''
def confounders(run_a, run_b):
    return {k for k in run_a if k not in ("microbatches", "micro_batch_size") and run_a[k] != run_b[k]}
''', {DESIGN}),
    Wrong("design-some-keys", "confounders", '''
def confounders(run_a, run_b):
    out = {k for k in ("pp", "dp", "seq_len") if run_a[k] != run_b[k]}
    if run_a["micro_batch_size"] * run_a["microbatches"] * run_a["dp"] != \\
            run_b["micro_batch_size"] * run_b["microbatches"] * run_b["dp"]:
        out.add("global_batch")
    return out
''', {DESIGN}),
]
REVEALS = {
    "m044_main_bubble_over_ideal": ["(pp-1)/M"],
    # the step time's formula, or its terms ("M+pp-1 slots", "(pp-1)b of drain")
    SPAN: ["(M+pp-1)(f+b)", "(M+pp-1) x (f+b)", "M+pp-1", "(pp-1)(f+b)", "(pp-1)b", "(pp-1)f"],
    FRAC: ["(pp-1)/(M+pp-1)", "M/(M+pp-1)", re.compile(r"\(pp ?- ?1\) ?/ ?\(M ?\+ ?pp ?- ?1\)")],
    GAIN: [re.compile(r"grows too, by \d")],
    GBS: [re.compile(r"b x M x dp"), "micro-batch size x microbatches x data-parallel size", "GBS / (M x dp)",
          "GBS/(M x dp)", "multiply by dp"],
    MEMORY: ["min(pp, M)", "pp - 1 warmup forwards plus"],
}
