"""Lab 7 (M049, M050, M054): typical wrong answers lose exactly their rubric points, with feedback that says why."""

import random
import statistics

import pytest
from lab_grading import assert_partial, grade_answers

from pipeline_kit.course.labs import lab07
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.layout import parse_layout, service_times

LAB = "lab07_imbalance"
MAIN = [("the lab's trace", lab07.lab_trace())]


# -- one whole notebook: each wrong answer costs its own check(s) only ----------------------------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """Idle without the tail, layers taken off the embedding stage (which the next experiment reuses), the bubble
    as Megatron's ratio, the naive M = 32 claim -- each in its own answer cell."""
    stage_metrics = '''def stage_metrics(trace):
    return [{"F_p50": s.p50("F") * 1e3, "B_p50": s.p50("B") * 1e3, "wait": s.p2p_wait * 1e3,
             "idle": s.p2p_wait * 1e3} for s in service_times(trace)]


def slowest_stage(trace):
    rows = stage_metrics(trace)
    return max(range(len(rows)), key=lambda k: rows[k]["F_p50"] + rows[k]["B_p50"])
'''
    local = '''rows = {r.name: r for r in decompose_speedup(8, 16, plan.stage_fwd, plan.stage_bwd, p2p_ms, 2.59)}
params = [c.params for c in stage_costs(parse_layout(even), spec, 8)]
local = {"bubble": 7 / 16, "bound": rows["bubble"].speedup, "efficiency": 2.59 / 8,
         "param_ratio": max(params) / min(params),
         "slow_over_mean": max(plan.stage_times) / (sum(plan.stage_times) / 8)}
'''
    m32 = '''rows32 = {r.name: r for r in decompose_speedup(8, 32, plan.stage_fwd, plan.stage_bwd, p2p_ms)}
naive = 2.59 * rows32["bubble"].speedup / rows["bubble"].speedup
m32 = {"bubble_only": rows32["bubble"].speedup, "naive": naive, "modelled": naive, "gbs_factor": 2}
'''
    answers = {"stage_metrics": stage_metrics, "my_layout": 'my_layout = "E|t*3|t*2|t*2|t*2|t*2|t*3|t*2L"',
               "local": local, "m32": m32}
    report = grade_answers(tmp_path, LAB, answers)
    assert_partial(report, {"m049_main_metrics": "is only the P2P wait; a rank is also idle after its last op",
                            "m050_main_profile": "the embedding is a lookup with no FLOPs",
                            "m054_main_next_experiment": "the embedding is a lookup with no FLOPs",
                            "m054_main_local_numbers": "Megatron's ratio",
                            "m054_main_more_m": "the imbalance factor falls as M grows"})


# -- the check functions directly (milliseconds) --------------------------------------------------------------
def _metrics(trace):
    return lab07.expected_metrics(trace)


def test_metrics_right_answer_and_idle_without_tail():
    lab07.check_metrics(_metrics, lab07.expected_slowest, MAIN)

    def no_tail(trace):
        return [{**r, "idle": r["wait"]} for r in _metrics(trace)]

    with pytest.raises(LabCheckFailed, match="is only the P2P wait"):
        lab07.check_metrics(no_tail, lab07.expected_slowest, MAIN)

    def mean(trace):
        return [{**r, "F_p50": s.mean("F") * 1e3} for r, s in zip(_metrics(trace), service_times(trace))]

    with pytest.raises(LabCheckFailed, match="is the mean; use the median"):
        lab07.check_metrics(mean, lab07.expected_slowest, lab07.hidden_stage_traces(random.Random(0)))


def test_slowest_by_raw_durations_names_the_wait():
    def raw_slowest(trace):
        stages = trace["pp"]
        raw = [sum(e["end"] - e["start"] for e in trace["timeline"] if e["stage"] == k and e["microbatch"] == 0)
               for k in range(stages)]
        return raw.index(max(raw))

    with pytest.raises(LabCheckFailed, match="ranks the stages by raw op durations"):
        lab07.check_metrics(_metrics, raw_slowest, MAIN)


def test_root_causes():
    for seed in range(20):  # any grade's hidden scenarios are built so that their numbers show the cause
        lab07.check_root_causes(lab07.expected_cause, lab07.hidden_cause_cases(random.Random(seed)))
    with pytest.raises(LabCheckFailed, match="a static compute cause grows a stage.s forward and backward together"):
        lab07.check_root_causes(lambda s: ("compute", 1), ["A"])
    with pytest.raises(LabCheckFailed, match="an index into hop_ms"):
        lab07.check_root_causes(lambda s: ("communication", 3), ["B"])
    assert all(c not in repr(lab07.LAB_CASES) for c in lab07.CAUSES), "printing LAB_CASES must not give answers"


def test_critical_path():
    def good(trace, fix_stage=None):
        return lab07.expected_step(trace, fix_stage)

    lab07.check_critical_path(good, MAIN)
    with pytest.raises(LabCheckFailed, match="leaves out the P2P latency"):
        lab07.check_critical_path(lambda t, fix_stage=None: lab07.expected_step(t, fix_stage, latency=False), MAIN)
    with pytest.raises(LabCheckFailed, match="charges fill and drain at the slow stage's pace"):
        lab07.check_critical_path(
            lambda t, fix_stage=None: (t["microbatches"] + t["pp"] - 1)
            * max(r["F_p50"] + r["B_p50"] for r in _metrics(t)), MAIN)
    with pytest.raises(LabCheckFailed, match="unchanged prediction"):
        lab07.check_critical_path(lambda t, fix_stage=None: lab07.expected_step(t), MAIN)


def test_experiment_holds_everything_but_the_layout():
    base = lab07.main_run_args()
    trace = lab07.lab_trace()

    def with_layout(args, layout):
        args = list(args)
        args[args.index("--layout") + 1] = layout
        return args

    lab07.check_experiment(with_layout(base, "Et*3|t*2|t*4|t*3L") + ["--trace", "x.json"], base, trace)
    with pytest.raises(LabCheckFailed, match="changes the global batch"):
        m = with_layout(base, "Et*4|t*2|t*3|t*3L")
        m[m.index("--microbatches") + 1] = "16"
        lab07.check_experiment(m, base, trace)
    with pytest.raises(LabCheckFailed, match="the trace says stage 1 is slower"):
        lab07.check_experiment(with_layout(base, "Et*3|t*3|t*4|t*2L"), base, trace)
    with pytest.raises(LabCheckFailed, match="parameters are not time"):
        lab07.check_experiment(with_layout(base, "Et*2|t*4|t*3|t*3L"), base, trace)


def test_follow_up_a_checks():
    moe = [("moe", lab07.moe_trace())]
    lab07.check_per_microbatch(lab07.expected_per_microbatch, moe + lab07.hidden_stage_traces(random.Random(0)))

    def forward_only(trace, stage):
        return [lab07.expected_metrics_op(trace, stage, m, "F") for m in range(trace["microbatches"])]

    with pytest.raises(LabCheckFailed, match="is only the F op"):
        lab07.check_per_microbatch(forward_only, moe)
    lab07.check_dynamic(lab07.expected_dynamic, moe + MAIN + lab07.hidden_stage_traces(random.Random(0)))
    with pytest.raises(LabCheckFailed, match="is static, not dynamic"):
        lab07.check_dynamic(lab07.expected_slowest, MAIN)
    def move(text, src, dst):
        out = lab07.expected_move(text, src, dst)
        if out is None:
            raise ValueError("impossible move")
        return out

    lab07.check_move_layer(move, lab07.MOVE_CASES + lab07.hidden_move_cases(random.Random(0)))
    with pytest.raises(LabCheckFailed, match="must raise ValueError: stage 1 would be empty"):
        lab07.check_move_layer(lambda t, s, d: t, [("Et*3|t|t*3L", 1, 2)])
    with pytest.raises(LabCheckFailed, match="must raise ValueError: no stage 4"):
        lab07.check_move_layer(lambda t, s, d: t, [("Et*3|t*3|t*3|t*3L", 3, 4)])
    lab07.check_verdict(lab07.expected_verdict, lab07.hidden_verdict_pairs(random.Random(0)))

    def faster_is_better(before, after):
        return "better" if after["makespan"] < before["makespan"] else "not better"

    with pytest.raises(LabCheckFailed, match="do not compare step for step"):
        lab07.check_verdict(faster_is_better, lab07.verdict_pairs()[3:])
    with pytest.raises(LabCheckFailed, match="within the 2% run-to-run noise"):
        lab07.check_verdict(lambda b, a: "not comparable" if b["microbatches"] != a["microbatches"]
                            else faster_is_better(b, a), lab07.verdict_pairs())


def test_layout_semantics_and_legality():
    def blocked(text, pp, layer):
        lay = parse_layout(text, pp=pp)
        stage = next(k for k, s in enumerate(lay.stages) if layer in s.layers)
        v = lay.chunks(pp)
        return stage, stage // v, stage % v

    with pytest.raises(LabCheckFailed, match="round-robin"):
        lab07.check_where_is_layer(blocked, lab07.hidden_where_cases(random.Random(0)))
    with pytest.raises(LabCheckFailed, match=r"4 stages with \[2, 3, 3, 0\] decoder layers; a layout of counts"):
        lab07.check_layout_string(lambda c: "Et*2|t*3|t*3|L", [[2, 3, 3]])
    lab07.check_legality(lab07.rule_of, lab07.LEGAL_CASES + lab07.hidden_legal_cases(random.Random(0)))
    with pytest.raises(LabCheckFailed, match="is None, not the rule the layout breaks -- parse_layout says: .*divide"):
        lab07.check_legality(lambda t, pp, n: None if lab07.rule_of(t, pp, n) == "stages" else lab07.rule_of(t, pp, n),
                             lab07.LEGAL_CASES)


def test_layout_metrics_mistakes():
    lab07.check_layout_metrics(lab07.expected_layout_metrics, ["Et*3|t*3|t*2|t*2|t*2|t*2|t*2|L"])
    with pytest.raises(LabCheckFailed, match="one microbatch's activations"):
        def one_microbatch(text):
            out = lab07.expected_layout_metrics(text)
            costs = lab07.stage_costs(parse_layout(text), lab07.BANK, 8)
            return {**out, "peak_act_mib": max(c.activation_bytes for c in costs) / 2**20}
        lab07.check_layout_metrics(one_microbatch, ["Et*3|t*3|t*2|t*2|t*2|t*2|t*2|L"])
    with pytest.raises(LabCheckFailed, match="counts one direction"):
        lab07.check_layout_metrics(lambda t: {**lab07.expected_layout_metrics(t),
                                              "p2p_mib": lab07.expected_layout_metrics(t)["p2p_mib"] / 2},
                                   ["Et*3|t*3|t*2|t*2|t*2|t*2|t*2|L"])


def test_follow_up_b_checks():
    layouts = lab07.endpoint_layouts()
    steps = {k: lab07.bank_plan(t).makespan for k, t in layouts.items()}
    lab07.check_endpoints(steps, {"first": False, "last": True})
    with pytest.raises(LabCheckFailed, match="has the parameters"):
        lab07.check_endpoints(steps, {"first": True, "last": True})
    good = {"pp": 8, "microbatches": 16, "micro_batch_size": 1, "seq_len": 512, "global_batch": 16}
    lab07.check_controls(good)
    with pytest.raises(LabCheckFailed, match="pipeline stages do not multiply the batch"):
        lab07.check_controls({**good, "global_batch": 128})
    with pytest.raises(LabCheckFailed, match="the one thing the experiment varies"):
        lab07.check_controls({**good, "layout": "Et*3|t*3|t*2|t*2|t*2|t*2|t*2|L"})
    with pytest.raises(LabCheckFailed, match="busy time"):
        lab07.check_rank_idle(lambda t: [lab07.bank_plan(t).makespan - i for i in lab07.expected_rank_idle(t)],
                              [layouts["even"]])
    lab07.check_grad_args(["--layout", lab07.GRAD_LAYOUT, "--check-grads"])
    with pytest.raises(LabCheckFailed, match="add --check-grads"):
        lab07.check_grad_args(["--layout", lab07.GRAD_LAYOUT])
    with pytest.raises(LabCheckFailed, match="timed waits compute no gradients"):
        lab07.check_grad_args(["--layout", lab07.GRAD_LAYOUT, "--check-grads", "--synthetic-compute", "1,2"])
    with pytest.raises(LabCheckFailed, match="does not fit"):
        lab07.check_grad_args(["--layout", lab07.GRAD_LAYOUT, "--check-grads", "--layers", "16"])


def test_m054_checks():
    lab07.check_local(lab07.expected_local())
    with pytest.raises(LabCheckFailed, match="rounded: compute it with the kit"):
        lab07.check_local({**lab07.expected_local(), "bound": 5.57})  # the question bank's figure, typed
    with pytest.raises(LabCheckFailed, match="is the parameter ratio"):
        lab07.check_local({**lab07.expected_local(), "slow_over_mean": lab07.expected_local()["param_ratio"]})
    f = lab07.bank_factors()
    right = {"imbalance": f["stage imbalance"].factor, "p2p": f["P2P"].factor, "remainder": f["remainder"].factor}
    lab07.check_losses(right)
    with pytest.raises(LabCheckFailed, match="is the inverse of the parameter ratio"):
        params = [c.params for c in lab07.stage_costs(parse_layout(lab07.endpoint_layouts()["even"]), lab07.BANK, 8)]
        lab07.check_losses({**right, "imbalance": min(params) / max(params)})
    with pytest.raises(LabCheckFailed, match="speedup left after this loss"):
        lab07.check_losses({**right, "p2p": f["P2P"].speedup})
    lab07.check_m32(lab07.expected_m32())
    with pytest.raises(LabCheckFailed, match="imbalance factor falls as M"):
        lab07.check_m32({**lab07.expected_m32(), "modelled": lab07.expected_m32()["naive"]})
    with pytest.raises(LabCheckFailed, match="doubles the global batch"):
        lab07.check_m32({**lab07.expected_m32(), "gbs_factor": 1})
    best = str(lab07.bank_balance().best.layout)
    nxt = {"layout": best, "microbatches": 16, "micro_batch_size": 1,
           "predicted_speedup": lab07.bank_factors(layout=best, measured=None)["P2P"].speedup}
    lab07.check_next(nxt)
    with pytest.raises(LabCheckFailed, match="must keep both"):
        lab07.check_next({**nxt, "microbatches": 32})


def test_m054_follow_up_checks():
    lab07.check_single(lab07.expected_single_ms())
    with pytest.raises(LabCheckFailed, match="is one microbatch"):
        lab07.check_single(lab07.expected_single_ms() / 16)
    bank8 = lab07.bank_trace()
    lab07.check_trace_check(lab07.expected_trace_check(bank8), bank8)
    with pytest.raises(LabCheckFailed, match="FLOPs model's factor"):
        lab07.check_trace_check({**lab07.expected_trace_check(bank8),
                                 "imbalance": lab07.bank_factors()["stage imbalance"].factor}, bank8)
    lab07.check_resplit(lab07.expected_resplit())
    with pytest.raises(LabCheckFailed, match="leaves out P2P"):
        lab07.check_resplit({**lab07.expected_resplit(),
                             "even": lab07.bank_factors(measured=None)["stage imbalance"].speedup})

    def split(lat, gbps):
        f = lab07.bank_factors(latency_us=lat, gbps=gbps)
        return f["P2P"].factor, f["remainder"].factor

    lab07.check_split(split, lab07.SPLIT_CASES + lab07.hidden_split_cases(random.Random(0)))
    with pytest.raises(LabCheckFailed, match="treats GB/s as Gbit/s"):
        lab07.check_split(lambda lat, g: split(lat, g * 8), lab07.SPLIT_CASES)
    with pytest.raises(LabCheckFailed, match="the product must stay|their product must stay"):
        lab07.check_split(lambda lat, g: (split(lat, g)[0], 1.0), lab07.SPLIT_CASES)
    lab07.check_sweep(lambda g, ms: [(m, g // m) for m in ms if g % m == 0], lab07.hidden_sweep_cases(random.Random(0)))
    with pytest.raises(LabCheckFailed, match="has no integer micro-batch size"):
        lab07.check_sweep(lambda g, ms: [(m, g / m) for m in ms if g / m >= 1], [(48, [4, 32])])
    with pytest.raises(LabCheckFailed, match="not the global batch 32"):
        lab07.check_sweep(lambda g, ms: [(m, 1) for m in ms], lab07.SWEEP_CASES)


def test_traces_are_deterministic_and_consistent():
    a, b = lab07.lab_trace(), lab07.lab_trace()
    assert a == b
    # the slow stage is hidden from parameters and FLOPs, and raw durations point elsewhere
    assert lab07.expected_slowest(a) == lab07.SLOW_RANK
    raw = [statistics.median((e["end"] - e["start"]) for e in a["timeline"] if e["stage"] == k and e["kind"] == "B")
           for k in range(a["pp"])]
    assert raw.index(max(raw)) != lab07.SLOW_RANK
    # the simulator fed with the trace's service times lands within 1% of its makespan
    assert abs(lab07.expected_step(a) / (a["makespan"] * 1e3) - 1) < 0.01
