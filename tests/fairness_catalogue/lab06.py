"""Lab 6's typical wrong answers (building stages, the last stage, logging).

Each entry redefines one answer after the solution's answer cell, as a student's slip would.  A wrong helper that a
later answer reuses is redefined only where the later answer's test cell does not read it (see ``tests/fairness.py``),
so each entry names the cells that must lose for the mistake itself.
"""

import re

from fairness import Wrong

LOCAL_NUMBERS = '''
def stage_parts(stage, num_stages, layers):
    base, extra = divmod(layers, num_stages)
    count = base + (1 if stage < extra else 0)
    return {"embedding": stage == 0, "layers": list(range(count)), "head": stage == num_stages - 1}
'''
EMBED_EVERYWHERE = '''
def stage_parts(stage, num_stages, layers):
    base, extra = divmod(layers, num_stages)
    start = stage * base + min(stage, extra)
    count = base + (1 if stage < extra else 0)
    return {"embedding": True, "layers": list(range(start, start + count)), "head": stage == num_stages - 1}
'''
EXTRA_LAST = '''
def stage_parts(stage, num_stages, layers):
    base, extra = divmod(layers, num_stages)
    first_big = num_stages - extra
    start = stage * base + max(0, stage - first_big)
    count = base + (1 if stage >= first_big else 0)
    return {"embedding": stage == 0, "layers": list(range(start, start + count)), "head": stage == num_stages - 1}
'''
KIT_STAGE = '''
def build_my_stage(cfg, stage, num_stages):
    return build_stage(cfg, stage, num_stages)
'''
FLOAT_TOKENS = '''
def stage_io(cfg, stage, num_stages, mbs):
    hidden = ((mbs, cfg.seq_len, cfg.hidden), torch.float32)
    out = ((mbs, cfg.seq_len, cfg.vocab), torch.float32) if stage == num_stages - 1 else hidden
    return {"input": hidden, "output": out}
'''
NO_LOGITS = '''
def stage_io(cfg, stage, num_stages, mbs):
    hidden = ((mbs, cfg.seq_len, cfg.hidden), torch.float32)
    inp = ((mbs, cfg.seq_len), torch.int64) if stage == 0 else hidden
    return {"input": inp, "output": hidden}
'''
SEQ_FIRST = '''
def stage_io(cfg, stage, num_stages, mbs):
    hidden = ((cfg.seq_len, mbs, cfg.hidden), torch.float32)
    inp = ((cfg.seq_len, mbs), torch.int64) if stage == 0 else hidden
    out = ((cfg.seq_len, mbs, cfg.vocab), torch.float32) if stage == num_stages - 1 else hidden
    return {"input": inp, "output": out}
'''
LAST_STAGE_OF_FOUR = '''
def stage_io(cfg, stage, num_stages, mbs):
    hidden = ((mbs, cfg.seq_len, cfg.hidden), torch.float32)
    inp = ((mbs, cfg.seq_len), torch.int64) if stage == 0 else hidden
    out = ((mbs, cfg.seq_len, cfg.vocab), torch.float32) if stage == 3 else hidden
    return {"input": inp, "output": out}
'''
BLOCKS_ONLY = '''
def stage_param_counts(cfg, num_stages):
    with torch.device("meta"):
        return [sum(p.numel() for p in build_my_stage(cfg, s, num_stages).blocks.parameters())
                for s in range(num_stages)]
'''
EVEN_ONLY = '''
def stage_param_counts(cfg, num_stages):
    spec = ModelSpec(vocab=cfg.vocab, seq_len=cfg.seq_len, hidden=cfg.hidden, heads=cfg.heads, layers=cfg.layers)
    return [c.params for c in stage_costs(even_layout(cfg.layers, num_stages), spec, num_stages)]
'''
BACKWARD_FLOPS = '''
_right_cost_table = cost_table
def cost_table(spec, pp):
    t = _right_cost_table(spec, pp)
    return {**t, "fwd_flops": [2 * f for f in t["fwd_flops"]]}
'''
PER_TOKEN = '''
_right_cost_table = cost_table
def cost_table(spec, pp):
    t = _right_cost_table(spec, pp)
    tokens = spec.seq_len * spec.micro_batch_size
    return {**t, "fwd_flops": [f // tokens for f in t["fwd_flops"]]}
'''
TWO_BYTES = '''
_right_cost_table = cost_table
def cost_table(spec, pp):
    t = _right_cost_table(spec, pp)
    return {**t, "activation_bytes": [b * 2 // spec.dtype_bytes for b in t["activation_bytes"]]}
'''
HEAVY_ENDS = '''
my_layout = "Et*2|t|t|t*2L"
my_layout_params = [c.params for c in stage_costs(parse_layout(my_layout), run_model, 4)]
'''
NO_POSITION = '''
def endpoint_extra(spec):
    return {"first": spec.vocab * spec.hidden, "last": spec.vocab * spec.hidden + 2 * spec.hidden}
'''
NO_FINAL_NORM = '''
def endpoint_extra(spec):
    return {"first": spec.vocab * spec.hidden + spec.seq_len * spec.hidden, "last": spec.vocab * spec.hidden}
'''
HEAD_BIAS = '''
def endpoint_extra(spec):
    v, h, s = spec.vocab, spec.hidden, spec.seq_len
    return {"first": v * h + s * h, "last": v * h + 2 * h + v}
'''
OWN_COPY = '''
_right_tied = tied_counts
def tied_counts(cfg, num_stages):
    per, unique = _right_tied(cfg, num_stages)
    return per[:-1] + [per[-1] - cfg.vocab * cfg.hidden], unique
'''
SUM_UNIQUE = '''
_right_tied = tied_counts
def tied_counts(cfg, num_stages):
    per, unique = _right_tied(cfg, num_stages)
    return per, sum(per)
'''
MINUS_ONE_COPY = '''
_right_tied = tied_counts
def tied_counts(cfg, num_stages):
    per, unique = _right_tied(cfg, num_stages)
    return per, sum(per) - cfg.vocab * cfg.hidden
'''
TIME_BY_PARAMS = '''
_right_decide = decide_by_time
def decide_by_time(spec, pp, microbatches):
    d = _right_decide(spec, pp, microbatches)
    return {**d, "by_time": d["by_params"]}
'''
RATIO_INVERTED = '''
_right_decide = decide_by_time
def decide_by_time(spec, pp, microbatches):
    d = _right_decide(spec, pp, microbatches)
    return {**d, "makespan_ratio": 1 / d["makespan_ratio"]}
'''
BWD_EQUALS_FWD = '''
def decide_by_time(spec, pp, microbatches):
    t = cost_table(spec, pp)
    params, flops = t["params"], t["fwd_flops"]
    schedule = build_schedule("1f1b", pp, microbatches)
    w = [f / min(flops) for f in flops]
    slow = simulate(schedule, fwd=w, bwd=w).makespan
    equal = simulate(schedule, fwd=1, bwd=2).makespan
    return {"by_params": params.index(max(params)), "by_time": flops.index(max(flops)), "makespan_ratio": slow / equal}
'''
ATTACHED = '''
def pipeline_step(stages, tokens, targets):
    logged = 0.0
    for x, y in zip(tokens, targets):
        for stage in stages:
            x = stage(x)
        loss = lm_loss(x, y) / len(tokens)
        logged += loss.item()
        loss.backward()
    return logged
'''
LAST_ONLY = '''
def pipeline_step(stages, tokens, targets):
    logged = 0.0
    for x, y in zip(tokens, targets):
        for s, stage in enumerate(stages):
            x = stage(x.detach().requires_grad_() if s else x)
        loss = lm_loss(x, y) / len(tokens)
        logged += loss.item()
        loss.backward()
    return logged
'''
FORWARD_TWICE = '''
_right_step = pipeline_step
def pipeline_step(stages, tokens, targets):
    with torch.no_grad():
        for x in tokens:
            for s, stage in enumerate(stages):
                x = stage(x.detach() if s else x)
    return _right_step(stages, tokens, targets)
'''
NOT_SCALED = '''
def pipeline_step(stages, tokens, targets):
    logged = 0.0
    for x, y in zip(tokens, targets):
        inputs, outputs = [], []
        for s, stage in enumerate(stages):
            if s > 0:
                x = x.detach().requires_grad_()
            inputs.append(x)
            x = stage(x)
            outputs.append(x)
        loss = lm_loss(x, y)
        logged += loss.item() / len(tokens)
        loss.backward()
        for s in range(len(stages) - 2, -1, -1):
            outputs[s].backward(inputs[s + 1].grad)
    return logged
'''
SCALED_TWICE = '''
def pipeline_step(stages, tokens, targets):
    M = len(tokens)
    logged = 0.0
    for x, y in zip(tokens, targets):
        inputs, outputs = [], []
        for s, stage in enumerate(stages):
            if s > 0:
                x = x.detach().requires_grad_()
            inputs.append(x)
            x = stage(x)
            outputs.append(x)
        loss = lm_loss(x, y) / M / M
        logged += loss.item() * M
        loss.backward()
        for s in range(len(stages) - 2, -1, -1):
            outputs[s].backward(inputs[s + 1].grad)
    return logged
'''
GRAPH_RETURNED = '''
def pipeline_step(stages, tokens, targets):
    M = len(tokens)
    logged = 0.0
    for x, y in zip(tokens, targets):
        inputs, outputs = [], []
        for s, stage in enumerate(stages):
            if s > 0:
                x = x.detach().requires_grad_()
            inputs.append(x)
            x = stage(x)
            outputs.append(x)
        loss = lm_loss(x, y) / M
        logged = logged + loss
        loss.backward(retain_graph=True)
        for s in range(len(stages) - 2, -1, -1):
            outputs[s].backward(inputs[s + 1].grad)
    return logged
'''
LOSS_SUMMED = '''
_right_logged = logged_loss
def logged_loss(cfg, microbatches, mbs):
    return _right_logged(cfg, microbatches, mbs) * microbatches
'''
FIRST_REPLICA = '''
def dp_logged_loss(replica_losses):
    return sum(replica_losses[0]) / len(replica_losses[0])
'''
REPLICAS_SUMMED = '''
def dp_logged_loss(replica_losses):
    return sum(sum(r) / len(r) for r in replica_losses)
'''
GATHERED = '''
def vocab_parallel_ce(shards, targets):
    return F.cross_entropy(torch.cat(shards, dim=1), targets)
'''
OVERFLOWS = '''
def vocab_parallel_ce(shards, targets):
    part = shards[0].shape[1]
    sum_exp = sum(s.exp().sum(dim=1) for s in shards)
    target_logit = 0
    for k, s in enumerate(shards):
        local = targets - k * part
        owned = (local >= 0) & (local < part)
        picked = s.gather(1, local.clamp(0, part - 1)[:, None])[:, 0]
        target_logit = target_logit + torch.where(owned, picked, torch.zeros_like(picked))
    return (sum_exp.log() - target_logit).mean()
'''
PER_TOKEN_CE = '''
_right_ce = vocab_parallel_ce
def vocab_parallel_ce(shards, targets):
    return _right_ce(shards, targets) + torch.zeros(targets.shape[0])
'''
RANK_ZERO = '''
def contributions(pp, loss):
    return [loss] + [0.0] * (pp - 1)
'''
EVERY_RANK = '''
def contributions(pp, loss):
    return [loss] * pp
'''
ONE_TOO_MANY = '''
def contributions(pp, loss):
    return [0.0] * pp + [loss]
'''
WHOLE_LOSS = '''
def loss_for_logging(loss):
    return loss
'''
DETACH_ONLY = '''
def loss_for_logging(loss):
    return loss.detach()
'''
ITEM = '''
def loss_for_logging(loss):
    return loss.item()
'''
NO_ZEROS = '''
def logged_by(op, dp_losses, pp):
    return max(dp_losses) if op == "max" else sum(dp_losses)
'''
ALWAYS_OK = '''
def max_trick_ok(dp_losses):
    return True
'''
SIGN_ONLY = '''
def max_trick_ok(dp_losses):
    return min(dp_losses) >= 0
'''
STRICTLY_POSITIVE = '''
def max_trick_ok(dp_losses):
    return len(set(dp_losses)) == 1 and dp_losses[0] > 0
'''
RANK_ZERO_LOGS = '''
def production_log_rank(pp, vpp=None):
    return 0
'''
VIRTUAL_INDEX = '''
def production_log_rank(pp, vpp=None):
    return pp * (vpp or 1) - 1
'''
MAX_IN_PRODUCTION = '''
production_op = "all_reduce_max"
'''

C, IO, P, K = "m047_main_construction", "m047_main_inputs", "m047_main_imbalance", "m047_main_costs"
WRONG = [
    Wrong("stage_parts-local-numbers", "construction", LOCAL_NUMBERS, {C}),
    # MyStage and stage_param_counts reuse stage_parts: these two cost the counts too (see the lab's report)
    Wrong("stage_parts-embedding-everywhere", "construction", EMBED_EVERYWHERE, {C, P}),
    Wrong("stage_parts-extra-on-last", "construction", EXTRA_LAST, {C, P}),
    Wrong("build_my_stage-kit", "construction", KIT_STAGE, {C}),
    Wrong("stage_io-float-tokens", "inputs", FLOAT_TOKENS, {IO}),
    Wrong("stage_io-no-logits", "inputs", NO_LOGITS, {IO}),
    Wrong("stage_io-seq-first", "inputs", SEQ_FIRST, {IO}),
    Wrong("stage_io-last-is-stage-3", "inputs", LAST_STAGE_OF_FOUR, {IO}),
    Wrong("needs_input_grad-always", "inputs", "def needs_input_grad(stage, num_stages):\n    return True\n", {IO}),
    Wrong("param_counts-blocks-only", "imbalance", BLOCKS_ONLY, {P}, points={P: 1.0}),
    Wrong("param_counts-even-split-only", "imbalance", EVEN_ONLY, {P}, points={P: 1.0}),
    Wrong("imbalance-rounded", "imbalance", "bank_imbalance = 39.1 / 14.2\n", {P}, points={P: 1.0}),
    Wrong("imbalance-last-over-middle", "imbalance", "bank_imbalance = bank_counts[-1] / bank_counts[1]\n", {P}),
    Wrong("cost_table-backward-flops", "costs", BACKWARD_FLOPS, {K}),
    Wrong("cost_table-per-token", "costs", PER_TOKEN, {K}),
    Wrong("cost_table-two-bytes", "costs", TWO_BYTES, {K}),
    Wrong("layout-heavy-ends", "costs", HEAVY_ENDS, {K}),
    Wrong("baseline-one-layer", "follow_stages", "baseline_params = baseline_params // 2\n",
          {"m047_follow_baseline"}, points={"m047_follow_baseline": 0.5}),
    Wrong("baseline-all-layers", "follow_stages", "baseline_layers = bank_spec.layers\n",
          {"m047_follow_baseline"}, points={"m047_follow_baseline": 0.5}),
    Wrong("baseline-millions", "follow_stages", "baseline_params = round(baseline_params / 1e6, 2)\n",
          {"m047_follow_baseline"}, points={"m047_follow_baseline": 0.5}),
    Wrong("endpoint-no-position", "follow_stages", NO_POSITION, {"m047_follow_ends"},
          points={"m047_follow_ends": 1.0}),
    Wrong("endpoint-no-final-norm", "follow_stages", NO_FINAL_NORM, {"m047_follow_ends"},
          points={"m047_follow_ends": 1.0}),
    Wrong("endpoint-head-bias", "follow_stages", HEAD_BIAS, {"m047_follow_ends"}, points={"m047_follow_ends": 1.0}),
    Wrong("tied-own-copy", "follow_stages", OWN_COPY, {"m047_follow_config"}, points={"m047_follow_config": 0.5}),
    Wrong("tied-sum-unique", "follow_stages", SUM_UNIQUE, {"m047_follow_config"}, points={"m047_follow_config": 0.5}),
    Wrong("tied-minus-one-copy", "follow_stages", MINUS_ONE_COPY, {"m047_follow_config"},
          points={"m047_follow_config": 0.5}),
    Wrong("time-by-params", "follow_stages", TIME_BY_PARAMS, {"m047_follow_time"}),
    Wrong("time-ratio-inverted", "follow_stages", RATIO_INVERTED, {"m047_follow_time"}),
    Wrong("time-bwd-equals-fwd", "follow_stages", BWD_EQUALS_FWD, {"m047_follow_time"}),
    Wrong("step-attached", "last_stage", ATTACHED, {"m048_main_last_stage", "m048_main_scaling"}),
    Wrong("step-last-stage-only", "last_stage", LAST_ONLY, {"m048_main_last_stage"}),
    Wrong("step-forward-twice", "last_stage", FORWARD_TWICE, {"m048_main_last_stage"}),
    Wrong("step-not-scaled", "last_stage", NOT_SCALED, {"m048_main_scaling"}),
    Wrong("step-scaled-twice", "last_stage", SCALED_TWICE, {"m048_main_scaling"}),
    Wrong("step-returns-graph", "last_stage", GRAPH_RETURNED, {"m048_main_scaling"}),
    Wrong("logged-sum", "logging", LOSS_SUMMED, {"m048_main_logging"}, points={"m048_main_logging": 1.5}),
    Wrong("dp-first-replica", "logging", FIRST_REPLICA, {"m048_main_logging"}, points={"m048_main_logging": 1.5}),
    Wrong("dp-sum-of-replicas", "logging", REPLICAS_SUMMED, {"m048_main_logging"}, points={"m048_main_logging": 1.5}),
    Wrong("vocab-gathered", "vocab", GATHERED, {"m048_main_vocab"}),
    Wrong("vocab-overflows", "vocab", OVERFLOWS, {"m048_main_vocab"}),
    Wrong("vocab-per-token", "vocab", PER_TOKEN_CE, {"m048_main_vocab"}),
    Wrong("owner-rank-zero", "follow_loss", RANK_ZERO, {"m048_follow_owner"}),
    # logged_by reuses contributions: [loss] * pp makes its SUM wrong too (see the lab's report)
    Wrong("owner-every-rank", "follow_loss", EVERY_RANK, {"m048_follow_owner", "m048_follow_max"}),
    Wrong("owner-one-too-many", "follow_loss", ONE_TOO_MANY, {"m048_follow_owner"}),
    Wrong("log-tensor-graph", "follow_loss", WHOLE_LOSS, {"m048_follow_autograd"}),
    Wrong("log-tensor-detach-only", "follow_loss", DETACH_ONLY, {"m048_follow_autograd"}),
    Wrong("log-tensor-item", "follow_loss", ITEM, {"m048_follow_autograd"}),
    Wrong("logged_by-no-zeros", "follow_loss", NO_ZEROS, {"m048_follow_max"}, points={"m048_follow_max": 0.5}),
    Wrong("max_ok-always", "follow_loss", ALWAYS_OK, {"m048_follow_max"}, points={"m048_follow_max": 0.5}),
    Wrong("max_ok-sign-only", "follow_loss", SIGN_ONLY, {"m048_follow_max"}, points={"m048_follow_max": 0.5}),
    Wrong("max_ok-strictly-positive", "follow_loss", STRICTLY_POSITIVE, {"m048_follow_max"},
          points={"m048_follow_max": 0.5}),
    Wrong("production-rank-zero", "follow_loss", RANK_ZERO_LOGS, {"m048_follow_production"},
          points={"m048_follow_production": 0.5}),
    Wrong("production-virtual-index", "follow_loss", VIRTUAL_INDEX, {"m048_follow_production"},
          points={"m048_follow_production": 0.5}),
    Wrong("production-max", "follow_loss", MAX_IN_PRODUCTION, {"m048_follow_production"},
          points={"m048_follow_production": 0.5}),
]

# Text that gives a check's answer away (bank-pp8's exact counts, the stage that holds most, the exact ratio):
# no other check's feedback may contain it.
REVEALS = {
    "m047_follow_baseline": ["14,175,744", "14175744", re.compile(r"is \d+ per stage"),
                             re.compile(r"middle stage holds \d")],
    "m047_main_imbalance": ["2.7614", "2.761404"],
    "m047_follow_time": ["the largest stage is stage 0", "heaviest is stage"],
    "m047_follow_ends": [re.compile(r"s\*h = \d")],
    "m047_main_inputs": [re.compile(r"token ids \(torch\.int64\)")],
    # the rank that holds the loss, named (contributions' and the production log's answer)
    "m048_follow_owner": [re.compile(r"[Oo]nly rank \d"), re.compile(r"\(rank \d+\) contributes")],
    "m048_follow_production": [re.compile(r"last virtual stage, rank \d")],
    "m048_follow_max": [re.compile(r"0 > -?\d")],
}
