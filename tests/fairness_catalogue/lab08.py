"""Lab 8's typical wrong answers (interleaved 1F1B and activation memory).

Each is appended to the solution's answer cell (it redefines one function the wrong way).  The later answers of
section M052 reuse ``stage_bytes``, ``resident_bytes`` and ``alive`` (``memory_terms``, then ``fullest``): a
mistake in one of those costs its own test cell only, so ``m052_follow_terms`` is run for them and must not lose.
"""

import re

from fairness import Wrong

# -- M051: the mapping ---------------------------------------------------------------------------------
OWNER_CONTIGUOUS = '''
def owner(stage, pp):
    return stage // 2, stage % 2
'''
LAYERS_UNSORTED = '''
def rank_layers(rank, pp, v, layers):
    layout = even_layout(layers, pp * v)
    return sorted((i for k, st in enumerate(layout.stages) if owner(k, pp)[0] == rank for i in st.layers),
                  reverse=True)
'''
LAYERS_CONTIGUOUS = '''
def rank_layers(rank, pp, v, layers):
    per_rank = layers // pp
    return list(range(rank * per_rank, (rank + 1) * per_rank))
'''

# -- M051: the bubble ----------------------------------------------------------------------------------
BUBBLE_BANK = '''
def interleaved_bubble(pp, M, v):
    return Fraction(1, v) * Fraction(pp - 1, M + pp - 1)
'''
BUBBLE_IDEAL = '''
def interleaved_bubble(pp, M, v):
    return Fraction(pp - 1, v * M)
'''
BUBBLE_PLAIN = '''
def interleaved_bubble(pp, M, v):
    return Fraction(pp - 1, M + pp - 1)
'''

# -- M051: the costs -----------------------------------------------------------------------------------
WARMUP_NO_CAP = '''
def warmup(pp, rank, M, v):
    return 2 * (pp - rank - 1) + (v - 1) * pp
'''
MESSAGES_V_PP = '''
def p2p_messages(pp, M, v):
    return 2 * M * v * (pp - 1)
'''
PEAK_CHUNKS = '''
peak_share = {v: simulate(schedule_for(4, 8, v)).peak_activations[0] for v in (1, 2, 4)}
'''

# -- M052: bytes per microbatch ------------------------------------------------------------------------
NO_DTYPE = '''
def stage_bytes(spec, n_layers, embedding, loss):
    s, b, h, a, V, d = spec.seq_len, spec.micro_batch_size, spec.hidden, spec.heads, spec.vocab, spec.dtype_bytes
    total = n_layers * s * b * h * (34 + 5 * a * s / h)
    if embedding:
        total += s * b * h * d
    if loss:
        total += s * b * V * 4 + s * b * h * d
    return total
'''
NO_SCORES = '''
def stage_bytes(spec, n_layers, embedding, loss):
    s, b, h, a, V, d = spec.seq_len, spec.micro_batch_size, spec.hidden, spec.heads, spec.vocab, spec.dtype_bytes
    total = n_layers * s * b * h * 34 * d / 2
    if embedding:
        total += s * b * h * d
    if loss:
        total += s * b * V * 4 + s * b * h * d
    return total
'''
LOGITS_IN_D = '''
def stage_bytes(spec, n_layers, embedding, loss):
    s, b, h, a, V, d = spec.seq_len, spec.micro_batch_size, spec.hidden, spec.heads, spec.vocab, spec.dtype_bytes
    total = n_layers * s * b * h * (34 + 5 * a * s / h) * d / 2
    if embedding:
        total += s * b * h * d
    if loss:
        total += s * b * V * d + s * b * h * d
    return total
'''

# -- M052: resident bytes ------------------------------------------------------------------------------
NO_POSITIONS = '''
def resident_bytes(spec, pp, bytes_per_param):
    h, f, V = spec.hidden, spec.ffn_mult, spec.vocab
    layer = (4 + 2 * f) * h * h + (9 + f) * h
    params = [spec.layers // pp * layer for _ in range(pp)]
    params[0] += V * h
    params[-1] += V * h + 2 * h
    return [p * bytes_per_param for p in params]
'''
PARAMS_OVER_PP = '''
def resident_bytes(spec, pp, bytes_per_param):
    h, f, V, s = spec.hidden, spec.ffn_mult, spec.vocab, spec.seq_len
    layer = (4 + 2 * f) * h * h + (9 + f) * h
    total = spec.layers * layer + V * h + s * h + V * h + 2 * h
    return [total * bytes_per_param / pp] * pp
'''
LAYERS_ONLY = '''
def resident_bytes(spec, pp, bytes_per_param):
    h, f = spec.hidden, spec.ffn_mult
    layer = (4 + 2 * f) * h * h + (9 + f) * h
    return [spec.layers // pp * layer * bytes_per_param for _ in range(pp)]
'''

# -- M052: the measurement -----------------------------------------------------------------------------
RUN_TUPLE = '''
_right_predict_run = predict_run


def predict_run(summary):
    got = _right_predict_run(summary)
    return got["peak_activations"], got["deallocated_output_bytes"]
'''
RUN_LAST_FREES_NOTHING = '''
def predict_run(summary):
    pp, M, v = summary["pp"], summary["microbatches"], summary["chunks"]
    sched = build_schedule(summary["schedule"], pp, M, v if v > 1 else None)
    cfg = summary["config"]
    one = cfg["seq_len"] * summary["micro_batch_size"] * cfg["hidden"] * 4
    return {"peak_activations": simulate(sched).peak_activations,
            "deallocated_output_bytes": [v * M * one if r < pp - 1 else 0 for r in range(pp)]}
'''
RUN_SCHEDULE_BLIND = '''
def predict_run(summary):
    pp, M, v = summary["pp"], summary["microbatches"], summary["chunks"]
    cfg = summary["config"]
    one = cfg["seq_len"] * summary["micro_batch_size"] * cfg["hidden"] * 4
    last = pp * v - 1
    sending = [sum(1 for c in range(v) if c * pp + r != last) for r in range(pp)]
    return {"peak_activations": simulate(schedule_for(pp, M, v)).peak_activations,
            "deallocated_output_bytes": [n * M * one for n in sending]}
'''
STEPS_RESET_FIRST = '''
measurement_steps = ["reset", "warmup", "measure", "read", "gather"]
'''

# -- M052: the snapshot --------------------------------------------------------------------------------
STRICT = '''
def snapshot(result, t):
    counts = []
    for rank in range(result.schedule.pp):
        events = result.rank_events(rank)
        started = sum(1 for e in events if e.op.kind == "F" and e.start < t)
        freed = sum(1 for e in events if e.op.kind == "B" and e.end <= t)
        counts.append(started - freed)
    return counts
'''
BY_FORWARD_END = '''
def snapshot(result, t):
    counts = []
    for rank in range(result.schedule.pp):
        events = result.rank_events(rank)
        done = sum(1 for e in events if e.op.kind == "F" and e.end <= t)
        freed = sum(1 for e in events if e.op.kind == "B" and e.end <= t)
        counts.append(done - freed)
    return counts
'''
FREED_AT_BACKWARD_START = '''
def snapshot(result, t):
    counts = []
    for rank in range(result.schedule.pp):
        events = result.rank_events(rank)
        started = sum(1 for e in events if e.op.kind == "F" and e.start <= t)
        freed = sum(1 for e in events if e.op.kind == "B" and e.start <= t)
        counts.append(started - freed)
    return counts
'''

DEF, MECH, COSTS = "m051_main_definition", "m051_main_mechanism", "m051_main_costs"
BYTES, RESIDENT, MEASURE, SNAP = ("m052_main_determinants", "m052_main_endpoints", "m052_main_measurement",
                                  "m052_follow_snapshot")

WRONG = [
    Wrong("owner-contiguous", "definition", OWNER_CONTIGUOUS, {DEF}),
    Wrong("rank_layers-unsorted", "definition", LAYERS_UNSORTED, {DEF}),
    Wrong("rank_layers-contiguous", "definition", LAYERS_CONTIGUOUS, {DEF}),
    Wrong("bubble-bank-1/v", "mechanism", BUBBLE_BANK, {MECH}),
    Wrong("bubble-ideal-time", "mechanism", BUBBLE_IDEAL, {MECH}),
    Wrong("bubble-no-v", "mechanism", BUBBLE_PLAIN, {MECH}),
    Wrong("warmup-no-cap", "costs", WARMUP_NO_CAP, {COSTS}, points={COSTS: 1.0}),
    Wrong("messages-v(pp-1)", "costs", MESSAGES_V_PP, {COSTS}, points={COSTS: 1.0}),
    Wrong("peak_share-chunks", "costs", PEAK_CHUNKS, {COSTS}, points={COSTS: 1.0}),
    Wrong("stage_bytes-no-dtype", "determinants", NO_DTYPE, {BYTES}),
    Wrong("stage_bytes-no-scores", "determinants", NO_SCORES, {BYTES}),
    Wrong("stage_bytes-logits-in-dtype", "determinants", LOGITS_IN_D, {BYTES}),
    Wrong("resident-no-positions", "endpoints", NO_POSITIONS, {RESIDENT}),
    Wrong("resident-params-over-pp", "endpoints", PARAMS_OVER_PP, {RESIDENT}),
    Wrong("resident-layers-only", "endpoints", LAYERS_ONLY, {RESIDENT}),
    Wrong("predict_run-tuple", "measurement", RUN_TUPLE, {MEASURE}, points={MEASURE: 1.5}),
    Wrong("predict_run-last-frees-nothing", "measurement", RUN_LAST_FREES_NOTHING, {MEASURE},
          points={MEASURE: 0.75}),
    Wrong("predict_run-schedule-blind", "measurement", RUN_SCHEDULE_BLIND, {MEASURE}, points={MEASURE: 0.75}),
    Wrong("steps-reset-first", "measurement", STEPS_RESET_FIRST, {MEASURE}, points={MEASURE: 0.5}),
    Wrong("snapshot-strict", "follow_052", STRICT, {SNAP}),
    Wrong("snapshot-by-forward-end", "follow_052", BY_FORWARD_END, {SNAP}),
    Wrong("snapshot-freed-at-backward-start", "follow_052", FREED_AT_BACKWARD_START, {SNAP}),
]

# Text that gives a test cell's answer away: no other cell's feedback may contain it.
REVEALS: dict = {
    # the alive counts of 1F1B (section 6), as an earlier memory_terms feedback spelled them out
    "m052_main_warmup": ["min(pp - r, M)"],
    # stage_bytes' formula (section 5)
    "m052_main_determinants": ["34 + 5as/h)*dtype/2", "activation_bytes (the last includes"],
    # the correct bubble (section 2)
    "m051_main_mechanism": ["(pp-1)/(vM+pp-1)"],
    # where a virtual stage lives, as a formula or spelled out for a rank
    DEF: ["stage k on rank k % pp", "on rank k % pp as that rank's chunk k // pp",
          re.compile(r"rank \d+ holds virtual stages \d")],
    # the warmup's and the message count's formulas, or their values
    COSTS: ["2(pp - r - 1) + (v - 1)", re.compile(r"pp\*v - 1 = \d"), re.compile(r"M x v = \d"),
            "(number of boundaries between virtual stages)"],
    SNAP: [re.compile(r"holds \d+ live chunk")],
}
