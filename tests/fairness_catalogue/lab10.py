"""Lab 10's typical wrong answers (planning a pipeline: memory per rank, the choice, its predictions, the factor)."""

from fairness import Wrong


def _terms(change: str) -> str:
    """memory_terms wrapping the model answer, with one term computed the wrong way."""
    return ("_right_terms = memory_terms\n\n\n"
            "def memory_terms(model, config):\n"
            "    out = _right_terms(model, config)\n"
            "    for rank in out:\n"
            f"        {change}\n"
            "    return out\n")


# -- memory: each term is a sixth of the cell; the choice's worst rank follows the student's own memory_terms ------
NO_OPTIMIZER = _terms('rank["optimizer"] = 0')
NO_MASTER_COPY = _terms('rank["optimizer"] = 8 * rank["weights"] / 2')
GRADS_BF16 = _terms('rank["gradients"] = rank["weights"]')
NO_WGRAD = _terms('rank["wgrad_kept"] = 0')
ONE_BUFFER = _terms('rank["p2p_buffers"] /= 2')

# -- the choice ----------------------------------------------------------------------------------------------------
# interleaving on one rank: the family refuses pp = 1 (Megatron needs a pipeline for a virtual one)
INTERLEAVED_REFUSED = ('my_config = {"schedule": "interleaved", "pp": 1, "chunks": 2, "microbatches": 4,\n'
                       '             "layout": str(even_split(model.layers, 2))}\n')
# the fastest design of all, without a look at the budget: DualPipe-V on the balanced split is just over it
FASTEST_OVER_BUDGET = '''
_items = item_times_from_flops(model, PROBLEM["tflops"])
_cuts = best_cuts([f + b for f, b in zip(_items.fwd, _items.bwd)], 16)
my_config = {"schedule": "dualpipev", "pp": 8, "chunks": 2, "microbatches": 32,
             "layout": str(layout_from_cuts(_cuts, model.layers))}
my_worst_bytes = max(sum(rank.values()) for rank in memory_terms(model, my_config))
my_step_time_s = sum(predict(my_config).values())
my_parts = predict(my_config)
'''
AVERAGE_RANK = ("totals = [sum(rank.values()) for rank in memory_terms(model, my_config)]\n"
                "my_worst_bytes = sum(totals) / len(totals)\n")
WORST_IN_GB = "my_worst_bytes = my_worst_bytes / 1e9\n"
ALL_RANKS = "my_worst_bytes = sum(sum(rank.values()) for rank in memory_terms(model, my_config))\n"
STEP_IN_MS = "my_step_time_s = 1e3 * my_step_time_s\n"
BUSIEST_RANK = "my_step_time_s = my_parts['compute'] + my_parts['imbalance']\n"

# -- follow-up -------------------------------------------------------------------------------------------------------
BALANCED_BASELINE = '''_items = item_times_from_flops(model, PROBLEM["tflops"])
_balanced = layout_from_cuts(best_cuts([f + b for f, b in zip(_items.fwd, _items.bwd)], my_config["pp"]), model.layers)
baseline_step_time_s = sum(predict({**baseline_config, "layout": str(_balanced)}).values())
'''
BASELINE_IN_MS = "baseline_step_time_s = 1e3 * baseline_step_time_s\n"
BASELINE_IS_MINE = "baseline_step_time_s = my_step_time_s\n"
UPSIDE_DOWN = '''def decide(winner, other):
    if other is None:
        return "memory"
    return min(lab10.FACTORS, key=lambda f: other[f] - winner[f])
'''
OTHERS_LARGEST = '''def decide(winner, other):
    if other is None:
        return "memory"
    return max(lab10.FACTORS, key=lambda f: other[f])
'''
NONE_IS_BUBBLE = '''def decide(winner, other):
    if other is None:
        return "bubble"
    return max(lab10.FACTORS, key=lambda f: other[f] - winner[f])
'''
FACTOR_MEMORY = 'my_factor = "memory"\n'
# the split backward's bubble is the famous saving, but the balanced layout saves more here
FACTOR_BUBBLE = 'my_factor = "bubble"\n'
FACTOR_LARGEST_PART = "my_factor = max(lab10.FACTORS, key=my_parts.__getitem__)\n"

MEM, FEAS, WORST, STEP = "plan_main_memory", "plan_main_feasible", "plan_main_worst", "plan_main_step_time"
BASE, RULE, FACTOR = "plan_follow_baseline", "plan_follow_rule", "plan_follow_factor"

WRONG = [
    Wrong("memory-no-optimizer", "memory", NO_OPTIMIZER, {MEM}, points={MEM: 0.5}),
    Wrong("memory-adam-without-master-copy", "memory", NO_MASTER_COPY, {MEM}, points={MEM: 0.5}),
    Wrong("memory-bf16-gradients", "memory", GRADS_BF16, {MEM}, points={MEM: 0.5}),
    Wrong("memory-no-wgrad-kept", "memory", NO_WGRAD, {MEM}, points={MEM: 0.5}),
    Wrong("memory-one-p2p-buffer", "memory", ONE_BUFFER, {MEM}, points={MEM: 0.5}),
    Wrong("choice-interleaved-M-refused", "choice", INTERLEAVED_REFUSED, {FEAS, WORST, STEP, FACTOR},
          points={FEAS: 2, WORST: 2, STEP: 3, FACTOR: 2}),
    Wrong("choice-M-not-from-the-batch", "choice", 'my_config = {**my_config, "microbatches": 16}\n',
          {FEAS, WORST, STEP, FACTOR, BASE}, points={FEAS: 2, WORST: 2, STEP: 3, FACTOR: 2, BASE: 1}),
    Wrong("choice-fastest-over-budget", "choice", FASTEST_OVER_BUDGET, {FEAS}, points={FEAS: 1}),
    # plain 1F1B itself: one decision, charged once (the choice's share of the step time's check)
    Wrong("choice-slow-but-fits", "choice", 'my_config = {"schedule": "1f1b", "pp": 8, "chunks": 1, '
          '"microbatches": 32, "layout": str(even_split(model.layers, 8))}\n'
          'my_worst_bytes = max(sum(rank.values()) for rank in memory_terms(model, my_config))\n'
          'my_step_time_s = sum(predict(my_config).values())\n', {STEP}, points={STEP: 1.5}),
    Wrong("worst-average-rank", "choice", AVERAGE_RANK, {WORST}),
    Wrong("worst-in-GB", "choice", WORST_IN_GB, {WORST}),
    Wrong("worst-all-ranks", "choice", ALL_RANKS, {WORST}),
    Wrong("step-in-ms", "choice", STEP_IN_MS, {STEP}, points={STEP: 1.5}),
    Wrong("step-compute-only", "choice", "my_step_time_s = my_parts['compute']\n", {STEP}, points={STEP: 1.5}),
    Wrong("step-busiest-rank", "choice", BUSIEST_RANK, {STEP}, points={STEP: 1.5}),
    Wrong("baseline-balanced-layout", "baseline", BALANCED_BASELINE, {BASE}),
    Wrong("baseline-in-ms", "baseline", BASELINE_IN_MS, {BASE}),
    Wrong("baseline-is-my-choice", "baseline", BASELINE_IS_MINE, {BASE}),
    Wrong("decide-upside-down", "rule", UPSIDE_DOWN, {RULE}, replace=True),
    Wrong("decide-others-largest-part", "rule", OTHERS_LARGEST, {RULE}, replace=True),
    Wrong("decide-no-memory", "rule", NONE_IS_BUBBLE, {RULE}, replace=True),
    Wrong("factor-memory", "factor", FACTOR_MEMORY, {FACTOR}),
    Wrong("factor-bubble", "factor", FACTOR_BUBBLE, {FACTOR}),
    Wrong("factor-largest-part", "factor", FACTOR_LARGEST_PART, {FACTOR}),
]

REVEALS = {
    STEP: ["Et*2|t|t*2|t|t|t|t|t|t*2|t*2|t*2|t*2|t*2|t*2|t*2|L", "'dualpipev'"],
    RULE: ["other[f] - winner[f]"],
}
