"""Lab 7's typical wrong answers (stage imbalance, custom layouts, the 2.59x decomposition)."""

import re

from fairness import Wrong

from pipeline_kit.course.labs import lab07

NO_TAIL = '''
def stage_metrics(trace):
    return [{"F_p50": s.p50("F") * 1e3, "B_p50": s.p50("B") * 1e3, "wait": s.p2p_wait * 1e3,
             "idle": s.p2p_wait * 1e3} for s in service_times(trace)]
'''
RAW = '''
def stage_metrics(trace):
    makespan = max(e["end"] for e in trace["timeline"])
    rows = []
    for s in service_times(trace):
        ops = [e for e in trace["timeline"] if e["stage"] == s.stage]
        raw = {k: [(e["end"] - e["start"]) * 1e3 for e in ops if e["kind"] == k] for k in "FB"}
        busy = sum(sum(times) for times in s.samples.values())
        rows.append({"F_p50": statistics.median(raw["F"]), "B_p50": statistics.median(raw["B"]),
                     "wait": s.p2p_wait * 1e3, "idle": (makespan - busy) * 1e3})
    return rows
'''
MEAN = '''
def stage_metrics(trace):
    makespan = max(e["end"] for e in trace["timeline"])
    rows = []
    for s in service_times(trace):
        busy = sum(sum(times) for times in s.samples.values())
        rows.append({"F_p50": s.mean("F") * 1e3, "B_p50": s.mean("B") * 1e3, "wait": s.p2p_wait * 1e3,
                     "idle": (makespan - busy) * 1e3})
    return rows
'''
NO_LATENCY = '''
def predict_step_ms(trace, fix_stage=None):
    rows = stage_metrics(trace)
    fwd, bwd = [r["F_p50"] for r in rows], [r["B_p50"] for r in rows]
    if fix_stage is not None:
        others = [k for k in range(len(rows)) if k != fix_stage]
        fwd[fix_stage] = statistics.median(fwd[k] for k in others)
        bwd[fix_stage] = statistics.median(bwd[k] for k in others)
    return simulate(build_schedule("1f1b", trace["pp"], trace["microbatches"]), fwd=fwd, bwd=bwd).makespan
'''
FORMULA = '''
def predict_step_ms(trace, fix_stage=None):
    rows = stage_metrics(trace)
    times = [r["F_p50"] + r["B_p50"] for r in rows]
    if fix_stage is not None:
        times[fix_stage] = statistics.median(t for k, t in enumerate(times) if k != fix_stage)
    return (trace["microbatches"] + trace["pp"] - 1) * max(times)
'''
MEDIAN_OF_ALL = '''
def predict_step_ms(trace, fix_stage=None):
    rows = stage_metrics(trace)
    fwd, bwd = [r["F_p50"] for r in rows], [r["B_p50"] for r in rows]
    if fix_stage is not None:
        fwd[fix_stage], bwd[fix_stage] = statistics.median(fwd), statistics.median(bwd)
    sched = build_schedule(trace["schedule"], trace["pp"], trace["microbatches"])
    return simulate(sched, fwd=fwd, bwd=bwd, p2p_latency=trace["p2p_latency"] * 1e3).makespan
'''
ALL_COMPUTE = '''
def root_cause(s):
    total = [x + y for x, y in zip(s["F_p50"], s["B_p50"])]
    return "compute", total.index(max(total))
'''
HOP_STAGE = '''
_right_cause = root_cause


def root_cause(s):
    cause, where = _right_cause(s)
    return (cause, where + 1) if cause == "communication" else (cause, where)
'''
BIG_BACKWARD = '''
def root_cause(s):
    f, p95, b, hops = s["F_p50"], s["F_p95"], s["B_p50"], s["hop_ms"]
    spread = [q / x for q, x in zip(p95, f)]
    if max(spread) > 1.3:
        return "dynamic", spread.index(max(spread))
    if hops and max(hops) > 3 * min(hops):
        return "communication", hops.index(max(hops))
    if max(b) > 1.3 * statistics.median(b):
        return "recompute", b.index(max(b))
    total = [x + y for x, y in zip(f, b)]
    return "compute", total.index(max(total))
'''
FASTER_IS_BETTER = '''
def verdict(before, after):
    return "better" if after["makespan"] < before["makespan"] else "not better"
'''
ONLY_M = '''
def verdict(before, after):
    if before["microbatches"] != after["microbatches"]:
        return "not comparable"

    def slowest(t):
        return max(r["F_p50"] + r["B_p50"] for r in stage_metrics(t))

    faster = after["makespan"] < (1 - lab07.STEP_NOISE) * before["makespan"]
    return "better" if faster and slowest(after) < slowest(before) else "not better"
'''
NOISE_SIGN = '''
def verdict(before, after):
    if any(before[k] != after[k] for k in ("schedule", "pp", "microbatches", "layers")):
        return "not comparable"

    def slowest(t):
        return max(r["F_p50"] + r["B_p50"] for r in stage_metrics(t))

    faster = after["makespan"] < (1 + lab07.STEP_NOISE) * before["makespan"]
    return "better" if faster and slowest(after) < slowest(before) else "not better"
'''
LOCAL_BUBBLE = 'local = {**local, "bubble": 7 / 16}'
LOCAL_PERCENT = 'local = {**local, "bubble": 100 * local["bubble"], "efficiency": 100 * local["efficiency"]}'
LOCAL_PARAMS = 'local = {**local, "slow_over_mean": local["param_ratio"]}'
LOSS_SPEEDUP = 'losses = {**losses, "p2p": rows["P2P"].speedup}'
LOSS_PARAMS = 'losses = {**losses, "imbalance": min(params) / max(params)}'
LOSS_SHARE = 'losses = {k: 1 - v for k, v in losses.items()}'

METRICS, CRITICAL, CAUSES = "m049_main_metrics", "m049_main_critical_path", "m049_main_root_causes"
SUCCESS, LOCAL, LOSSES = "m049_follow_success", "m054_main_local_numbers", "m054_main_losses"
# stage_metrics and predict_step_ms are called by verdict and trace_check too: those cells pay again (not yet
# judged against the student's own rows)
TRACE = "m054_follow_trace"
WRONG = [
    Wrong("idle-without-tail", "stage_metrics", NO_TAIL, {METRICS}, points={METRICS: 0.75}),
    Wrong("p50-of-raw-durations", "stage_metrics", RAW, {METRICS, CRITICAL, SUCCESS, TRACE}, points={METRICS: 0.75}),
    Wrong("mean-not-median", "stage_metrics", MEAN, {METRICS, CRITICAL, TRACE}, points={METRICS: 0.75}),
    Wrong("step-without-latency", "predict_step_ms", NO_LATENCY, {CRITICAL, TRACE}, points={CRITICAL: 1.0}),
    Wrong("step-by-formula", "predict_step_ms", FORMULA, {CRITICAL, TRACE}),
    Wrong("fix-with-median-of-all", "predict_step_ms", MEDIAN_OF_ALL, {CRITICAL}, points={CRITICAL: 1.0}),
    Wrong("every-cause-is-compute", "root_cause", ALL_COMPUTE, {CAUSES}),
    Wrong("boundary-as-next-stage", "root_cause", HOP_STAGE, {CAUSES}),
    Wrong("recompute-as-largest-backward", "root_cause", BIG_BACKWARD, {CAUSES}),
    Wrong("faster-is-better", "follow_up_a", FASTER_IS_BETTER, {SUCCESS}),
    Wrong("comparable-if-same-M", "follow_up_a", ONLY_M, {SUCCESS}),
    Wrong("noise-the-wrong-way", "follow_up_a", NOISE_SIGN, {SUCCESS}),
    Wrong("bubble-over-ideal", "local", LOCAL_BUBBLE, {LOCAL}, points={LOCAL: 3.0 - 2.4}),
    Wrong("percentages", "local", LOCAL_PERCENT, {LOCAL}, points={LOCAL: 3.0 - 1.8}),
    Wrong("imbalance-as-parameters", "local", LOCAL_PARAMS, {LOCAL}, points={LOCAL: 3.0 - 2.4}),
    Wrong("p2p-speedup-not-factor", "losses", LOSS_SPEEDUP, {LOSSES}, points={LOSSES: 1.0}),
    Wrong("imbalance-parameter-ratio", "losses", LOSS_PARAMS, {LOSSES}, points={LOSSES: 1.0}),
    Wrong("share-lost-not-factor", "losses", LOSS_SHARE, {LOSSES}),
]

# -- M049: the experiment and follow-up A ----------------------------------------------------------------
EXPERIMENT = "m049_main_experiment"
SET_ARG = 'candidate_args = list(candidate_args)\ncandidate_args[candidate_args.index("{}") + 1] = "{}"'
ARGS_M = SET_ARG.format("--microbatches", "16")
ARGS_LAST = SET_ARG.format("--layout", "Et*3|t*3|t*4|t*2L")
ARGS_FIRST = SET_ARG.format("--layout", "Et*2|t*4|t*3|t*3L")
PER_MB, DYNAMIC, RESPLIT = "m049_follow_per_microbatch", "m049_follow_dynamic", "m049_follow_resplit"
PER_MB_RAW = """
def per_microbatch(trace, stage):
    out = [0.0] * trace["microbatches"]
    for e in trace["timeline"]:
        if e["stage"] == stage:
            out[e["microbatch"]] += (e["end"] - e["start"]) * 1e3
    return out
"""
PER_MB_F = """
def per_microbatch(trace, stage):
    s = service_times(trace)[stage]
    mbs = [e["microbatch"] for e in trace["timeline"] if e["stage"] == stage and e["kind"] == "F"]
    out = [0.0] * trace["microbatches"]
    for m, t in zip(mbs, s.samples["F"]):
        out[m] += t * 1e3
    return out
"""
PER_MB_S = """
_right_per_microbatch = per_microbatch


def per_microbatch(trace, stage):
    return [x / 1e3 for x in _right_per_microbatch(trace, stage)]
"""
DYN_SLOWEST = """
def dynamic_stage(trace):
    return slowest_stage(trace)
"""
DYN_NO_THRESHOLD = """
def dynamic_stage(trace):
    ratios = [np.percentile(per_microbatch(trace, k), 95) / np.percentile(per_microbatch(trace, k), 50)
              for k in range(trace["pp"] * trace["chunks"])]
    return int(np.argmax(ratios))
"""
DYN_MAX = """
def dynamic_stage(trace):
    ratios = [max(per_microbatch(trace, k)) / min(per_microbatch(trace, k))
              for k in range(trace["pp"] * trace["chunks"])]
    k = int(np.argmax(ratios))
    return k if ratios[k] > lab07.DYNAMIC_THRESHOLD else None
"""
MOVE_NO_CHECKS = """
def move_layer(text, src, dst):
    stages = parse_layout(text).stages
    counts = [len(s.layers) for s in stages]
    counts[src] -= 1
    counts[dst] += 1
    return "|".join(("E" if s.embedding else "") + ("" if n == 0 else "t" if n == 1 else f"t*{n}")
                    + ("L" if s.loss else "") for s, n in zip(stages, counts))
"""
MOVE_SWAPPED = """
_right_move = move_layer


def move_layer(text, src, dst):
    return _right_move(text, dst, src)
"""
MOVE_ANY_DISTANCE = """
def move_layer(text, src, dst):
    stages = parse_layout(text).stages
    counts = [len(s.layers) for s in stages]
    if counts[src] == 0 or (counts[src] == 1 and not (stages[src].embedding or stages[src].loss)):
        raise ValueError(f"stage {src} has no layer to give away")
    counts[src] -= 1
    counts[dst] += 1
    return "|".join(("E" if s.embedding else "") + ("" if n == 0 else "t" if n == 1 else f"t*{n}")
                    + ("L" if s.loss else "") for s, n in zip(stages, counts))
"""

# -- M050 ------------------------------------------------------------------------------------------------
SEMANTICS, PROFILE, LEGALITY = "m050_main_semantics", "m050_main_profile", "m050_main_legality"
METRICS_RISK, ENDPOINTS, CONTROLS = "m050_main_metrics_risk", "m050_follow_endpoints", "m050_follow_controls"
TIME_IDLE, CORRECTNESS = "m050_follow_time_idle", "m050_follow_correctness"
WHERE_BLOCKED = """
def where_is_layer(text, pp, layer):
    lay = parse_layout(text, pp=pp)
    stage = next(k for k, s in enumerate(lay.stages) if layer in s.layers)
    v = lay.chunks(pp)
    return stage, stage // v, stage % v
"""
WHERE_ONE_BASED = """
def where_is_layer(text, pp, layer):
    lay = parse_layout(text, pp=pp)
    stage = next(k for k, s in enumerate(lay.stages) if layer + 1 in s.layers)
    return stage, stage % pp, stage // pp
"""
STRING_OWN_STAGES = """
def layout_string(counts):
    return "|".join(["E", *("t" if n == 1 else f"t*{n}" for n in counts), "L"])
"""
LEGAL_NO_PP = """
_right_legality = legality


def legality(text, pp, layers):
    return _right_legality(text, 1, layers)
"""
LEGAL_NO_REPEAT = r"""
def legality(text, pp, layers):
    stages = [re.findall(r"t\*\d+|.", s.replace(" ", "")) for s in text.split("|")]
    if any(not tokens for tokens in stages):
        return "empty"
    flat = [(k, i, tok) for k, tokens in enumerate(stages) for i, tok in enumerate(tokens)]
    if [(k, i) for k, i, tok in flat if tok == "E"] != [(0, 0)]:
        return "E"
    if [(k, i) for k, i, tok in flat if tok == "L"] != [(len(stages) - 1, len(stages[-1]) - 1)]:
        return "L"
    if sum(1 for _, _, tok in flat if tok[0] == "t") != layers:
        return "layers"
    return "stages" if len(stages) % pp else None
"""
LEGAL_NO_SYNTAX = """
_right_legality = legality


def legality(text, pp, layers):
    rule = _right_legality(text, pp, layers)
    return None if rule == "syntax" else rule
"""
METRIC_WRAP = """
_right_metrics = layout_metrics


def layout_metrics(text):
    out = _right_metrics(text)
    lay = parse_layout(text, pp=8, layers=spec.layers)
    plan = plan_for(lay, items, 8, 16)
    {body}
    return out
"""
IDLE_OVER_IDEAL = METRIC_WRAP.format(body='out["idle_fraction"] = simulate(build_schedule("1f1b", 8, 16), '
                                          'fwd=plan.stage_fwd, bwd=plan.stage_bwd).bubble_over_ideal')
PEAK_ONE_MB = METRIC_WRAP.format(
    body='out["peak_act_mib"] = max(c.activation_bytes for c in stage_costs(lay, spec, 8)) / 2**20')
P2P_ONE_WAY = METRIC_WRAP.format(body='out["p2p_mib"] = p2p_volume(lay, spec, 16)["total_per_step"] / 2**21')
STEPS_SLOWEST = ('endpoint_steps = {k: plan_for(parse_layout(t), items, 8, 16).slowest_stage '
                 'for k, t in endpoint_layouts.items()}')
STEPS_ROUNDED = 'endpoint_steps = {k: round(v, 1) for k, v in endpoint_steps.items()}'
WORTH_PARAMS = 'worth_it = {"first": True, "last": True}'
WORTH_SAVED = 'worth_it = {end: endpoint_steps["even"] - endpoint_steps[end] for end in ("first", "last")}'
GBS_TIMES_PP = 'controls = {**controls, "global_batch": 8 * controls["global_batch"]}'
CONTROLS_LAYOUT = 'controls = {**controls, "layout": even}'
CONTROLS_LAB_M = 'controls = {**controls, "microbatches": 8}'
IDLE_WRAP = """
_right_rank_idle = rank_idle


def rank_idle(text):
    mk = plan_for(parse_layout(text), items, 8, 16).makespan
    return [{expr} for i in _right_rank_idle(text)]
"""
IDLE_BUSY = IDLE_WRAP.format(expr="mk - i")
IDLE_FRACTION = IDLE_WRAP.format(expr="i / mk")
DROP_LEAST = "idle_drop_rank = drops.index(min(drops))"
GRAD_NO_CHECK = 'grad_check_args = ["--layout", "Et*3|t*2|t*2|tL", "--layers", "8", "--steps", "1"]'
GRAD_SYNTHETIC = 'grad_check_args = grad_check_args + ["--synthetic-compute", "1,2"]'
GRAD_LAYERS = 'grad_check_args = ["--layout", "Et*3|t*2|t*2|tL", "--layers", "16", "--check-grads", "--steps", "1"]'

# -- M054: M = 32, the next experiment and follow-up C ----------------------------------------------------
MORE_M, NEXT = "m054_main_more_m", "m054_main_next_experiment"
BASELINE, TRACE, RESPLIT_C = "m054_follow_baseline", "m054_follow_trace", "m054_follow_resplit"
P2P_KERNEL, GBS = "m054_follow_p2p_kernel", "m054_follow_gbs"
M32_NAIVE = 'm32 = {**m32, "modelled": m32["naive"]}'
M32_SAME_GBS = 'm32 = {**m32, "gbs_factor": 1}'
M32_NAIVE_BOUND = 'm32 = {**m32, "naive": m32["bubble_only"]}'
NEXT_M32 = 'next_experiment = {**next_experiment, "microbatches": 32}'
NEXT_NO_P2P = 'next_experiment = {**next_experiment, "predicted_speedup": new_rows["stage imbalance"].speedup}'
NEXT_EVEN = 'next_experiment = {**next_experiment, "layout": even}'
SINGLE_ONE_MB = "single_device_ms = sum(plan.stage_times)"
SINGLE_FORWARD = "single_device_ms = 16 * sum(plan.stage_fwd)"
SINGLE_SECONDS = "single_device_ms = 16 * sum(plan.stage_times) / 1e3"
TRACE_FLOPS = 'trace_check = {**trace_check, "imbalance": rows["stage imbalance"].factor}'
TRACE_STAGE0 = 'trace_check = {**trace_check, "slowest_stage": 0}'
TRACE_MEASURED = 'trace_check = {**trace_check, "predicted_ms": bank8["makespan"] * 1e3}'
RESPLIT_NO_P2P_EVEN = 'resplit = {**resplit, "even": rows["stage imbalance"].speedup}'
RESPLIT_MEASURED = 'resplit = {**resplit, "balanced": 2.59}'
RESPLIT_NO_P2P = """
resplit = {name: {r.name: r for r in decompose_speedup(8, 16, p.stage_fwd, p.stage_bwd, 0.0)}["stage imbalance"].speedup
           for name, p in (("even", plan), ("balanced", best_plan))}
"""
SPLIT_WRAP = """
def split_p2p(latency_us, gbps):
    per_transfer = {per}
    r = {{x.name: x for x in decompose_speedup(8, 16, plan.stage_fwd, plan.stage_bwd, per_transfer, 2.59)}}
    return r["P2P"].factor, {rest}
"""
SPLIT_BITS = SPLIT_WRAP.format(per="latency_us * 1e-3 + boundary_bytes(spec) / (gbps * 8e9) * 1e3",
                               rest='r["remainder"].factor')
SPLIT_LATENCY = SPLIT_WRAP.format(per="latency_us * 1e-3", rest='r["remainder"].factor')
SPLIT_FIXED_REST = SPLIT_WRAP.format(per="latency_us * 1e-3 + boundary_bytes(spec) / (gbps * 1e9) * 1e3",
                                     rest='rows["remainder"].factor')
SWEEP_FLOAT = """
def fair_m_sweep(gbs, ms):
    return [(m, gbs / m) for m in ms if gbs % m == 0]
"""
SWEEP_ALL = """
def fair_m_sweep(gbs, ms):
    return [(m, gbs // m) for m in ms]
"""
SWEEP_SORTED = """
def fair_m_sweep(gbs, ms):
    return [(m, gbs // m) for m in sorted(ms) if gbs % m == 0]
"""

WRONG += [
    Wrong("experiment-changes-M", "candidate_args", ARGS_M, {EXPERIMENT}),
    Wrong("experiment-unloads-last-stage", "candidate_args", ARGS_LAST, {EXPERIMENT}),
    Wrong("experiment-unloads-stage-0", "candidate_args", ARGS_FIRST, {EXPERIMENT}),
    Wrong("per-microbatch-raw-durations", "follow_up_a", PER_MB_RAW, {PER_MB, DYNAMIC}),
    Wrong("per-microbatch-forward-only", "follow_up_a", PER_MB_F, {PER_MB, DYNAMIC}),
    Wrong("per-microbatch-seconds", "follow_up_a", PER_MB_S, {PER_MB}),
    Wrong("dynamic-is-slowest", "follow_up_a", DYN_SLOWEST, {DYNAMIC}),
    Wrong("dynamic-without-threshold", "follow_up_a", DYN_NO_THRESHOLD, {DYNAMIC}),
    Wrong("dynamic-max-over-min", "follow_up_a", DYN_MAX, {DYNAMIC}),
    Wrong("move-without-checks", "follow_up_a", MOVE_NO_CHECKS, {RESPLIT}),
    Wrong("move-the-other-way", "follow_up_a", MOVE_SWAPPED, {RESPLIT, ENDPOINTS}, points={ENDPOINTS: 0.5}),
    Wrong("move-to-any-stage", "follow_up_a", MOVE_ANY_DISTANCE, {RESPLIT}),
    Wrong("where-blocked-not-round-robin", "semantics", WHERE_BLOCKED, {SEMANTICS}, points={SEMANTICS: 0.75}),
    Wrong("where-one-based-layers", "semantics", WHERE_ONE_BASED, {SEMANTICS}, points={SEMANTICS: 1.5}),
    Wrong("string-E-and-L-own-stages", "semantics", STRING_OWN_STAGES, {SEMANTICS}, points={SEMANTICS: 1.5}),
    # next_experiment runs my_layout: its layout part pays for the same slow layout
    Wrong("profile-even-split", "my_layout", "my_layout = even", {PROFILE, NEXT}, points={NEXT: 0.67}),
    Wrong("profile-unloads-stage-0", "my_layout", 'my_layout = "Et|t*3|t*2|t*2|t*2|t*2|t*2|t*2L"', {PROFILE, NEXT},
          points={NEXT: 0.67}),
    Wrong("profile-one-layer-off-the-end", "my_layout", 'my_layout = "Et*2|t*2|t*2|t*2|t*2|t*2|t*3|tL"',
          {PROFILE, NEXT}, points={NEXT: 0.67}),
    Wrong("legality-ignores-pp", "legality", LEGAL_NO_PP, {LEGALITY}),
    Wrong("legality-t-star-n-is-one", "legality", LEGAL_NO_REPEAT, {LEGALITY}),
    Wrong("legality-no-syntax-rule", "legality", LEGAL_NO_SYNTAX, {LEGALITY}),
    Wrong("idle-over-ideal", "layout_metrics", IDLE_OVER_IDEAL, {METRICS_RISK}, points={METRICS_RISK: 0.6}),
    Wrong("peak-of-one-microbatch", "layout_metrics", PEAK_ONE_MB, {METRICS_RISK}, points={METRICS_RISK: 0.6}),
    Wrong("p2p-one-direction", "layout_metrics", P2P_ONE_WAY, {METRICS_RISK}, points={METRICS_RISK: 0.6}),
    Wrong("endpoint-slowest-stage", "follow_up_b", STEPS_SLOWEST, {ENDPOINTS}, points={ENDPOINTS: 0.5}),
    Wrong("endpoint-rounded", "follow_up_b", STEPS_ROUNDED, {ENDPOINTS}, points={ENDPOINTS: 0.5}),
    Wrong("worth-it-by-parameters", "follow_up_b", WORTH_PARAMS, {ENDPOINTS}, points={ENDPOINTS: 0.5}),
    Wrong("worth-it-as-ms-saved", "follow_up_b", WORTH_SAVED, {ENDPOINTS}, points={ENDPOINTS: 0.5}),
    Wrong("gbs-times-pp", "follow_up_b", GBS_TIMES_PP, {CONTROLS}, points={CONTROLS: 0.2}),
    Wrong("controls-hold-the-layout", "follow_up_b", CONTROLS_LAYOUT, {CONTROLS}),
    Wrong("controls-lab-trace-M", "follow_up_b", CONTROLS_LAB_M, {CONTROLS}, points={CONTROLS: 0.2}),
    Wrong("rank-idle-is-busy", "follow_up_b", IDLE_BUSY, {TIME_IDLE}, points={TIME_IDLE: 1.0}),
    Wrong("rank-idle-fraction", "follow_up_b", IDLE_FRACTION, {TIME_IDLE}, points={TIME_IDLE: 1.0}),
    Wrong("idle-drop-least", "follow_up_b", DROP_LEAST, {TIME_IDLE}, points={TIME_IDLE: 1.0}),
    Wrong("grads-not-checked", "follow_up_b", GRAD_NO_CHECK, {CORRECTNESS}),
    Wrong("grads-with-timed-waits", "follow_up_b", GRAD_SYNTHETIC, {CORRECTNESS}),
    Wrong("grads-bank-model-layers", "follow_up_b", GRAD_LAYERS, {CORRECTNESS}),
    Wrong("m32-naive-as-modelled", "m32", M32_NAIVE, {MORE_M}, points={MORE_M: 0.5}),
    Wrong("m32-same-gbs", "m32", M32_SAME_GBS, {MORE_M}, points={MORE_M: 0.5}),
    Wrong("m32-naive-is-bound", "m32", M32_NAIVE_BOUND, {MORE_M}, points={MORE_M: 0.5}),
    Wrong("next-at-M32", "next_experiment", NEXT_M32, {NEXT}, points={NEXT: 0.67}),
    Wrong("next-without-p2p", "next_experiment", NEXT_NO_P2P, {NEXT}, points={NEXT: 0.67}),
    Wrong("next-even-layout", "next_experiment", NEXT_EVEN, {NEXT}, points={NEXT: 1.33}),
    Wrong("single-one-microbatch", "follow_up_c", SINGLE_ONE_MB, {BASELINE}),
    Wrong("single-forward-only", "follow_up_c", SINGLE_FORWARD, {BASELINE}),
    Wrong("single-seconds", "follow_up_c", SINGLE_SECONDS, {BASELINE}),
    Wrong("trace-flops-imbalance", "follow_up_c", TRACE_FLOPS, {TRACE}, points={TRACE: 0.33}),
    Wrong("trace-slowest-is-stage-0", "follow_up_c", TRACE_STAGE0, {TRACE}, points={TRACE: 0.33}),
    Wrong("trace-measured-not-predicted", "follow_up_c", TRACE_MEASURED, {TRACE}, points={TRACE: 0.33}),
    Wrong("resplit-even-without-p2p", "follow_up_c", RESPLIT_NO_P2P_EVEN, {RESPLIT_C}, points={RESPLIT_C: 0.5}),
    Wrong("resplit-balanced-measured", "follow_up_c", RESPLIT_MEASURED, {RESPLIT_C}, points={RESPLIT_C: 0.5}),
    Wrong("resplit-without-p2p", "follow_up_c", RESPLIT_NO_P2P, {RESPLIT_C}, points={RESPLIT_C: 1.0}),
    Wrong("split-gbit", "follow_up_c", SPLIT_BITS, {P2P_KERNEL}),
    Wrong("split-latency-only", "follow_up_c", SPLIT_LATENCY, {P2P_KERNEL}),
    Wrong("split-fixed-remainder", "follow_up_c", SPLIT_FIXED_REST, {P2P_KERNEL}),
    Wrong("sweep-float-sizes", "follow_up_c", SWEEP_FLOAT, {GBS}),
    Wrong("sweep-keeps-every-M", "follow_up_c", SWEEP_ALL, {GBS}),
    Wrong("sweep-sorted", "follow_up_c", SWEEP_SORTED, {GBS}),
]


_f = lab07.bank_factors()
_resplit = lab07.expected_resplit()
REVEALS = {
    # the factors are split_p2p(20, 10)'s answer too: no feedback may print them
    LOSSES: [f"{_f[name].factor:.4g}" for name in ("stage imbalance", "P2P", "remainder")],
    "m054_follow_resplit": [f"{_resplit['balanced']:.4g}"],
    "m054_main_next_experiment": [f"{_resplit['balanced']:.4g}"],
    CAUSES: ["recompute', 1", "communication', 2"],
    # a stage's measured value, or the stage that is the answer, spelled out
    METRICS: [re.compile(r"p50 service: \d"), re.compile(r"add up to \d"), re.compile(r"the largest is \d")],
    DYNAMIC: [re.compile(r"stage \d+ spreads most"), re.compile(r"the largest is \d")],
    PER_MB: [re.compile(r"in all\)"), re.compile(r"costs \d[\d.]* ms\)"), re.compile(r"on stage \d+ is \d")],
    SUCCESS: [re.compile(r": '(?:better|not better|not comparable)'$"), "-- 'not comparable'"],
    SEMANTICS: [re.compile(r"so stage \d+ is rank \d"), re.compile(r"is on stage \d+, not")],
    "m050_follow_time_idle": [re.compile(r"rank \d+'s idle falls most"), re.compile(r"makespan - busy = \d"),
                              re.compile(r"idle for \d")],
    LOCAL: ["(pp-1)/(M+pp-1)", "2.59 / 8", "pp times it", "M/(M+pp-1)"],
    MORE_M: ["pp times that", "M/(M+pp-1)"],
    BASELINE: ["M x the sum of every stage"],
    CONTROLS: [re.compile(r"GBS = M x micro-batch size = \d")],
    "m049_follow_resplit": [re.compile(r"expected \[")],
}
