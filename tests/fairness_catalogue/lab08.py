"""Lab 8's typical wrong answers (interleaved 1F1B and activation memory)."""

from fairness import Wrong

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

WRONG = [
    Wrong("stage_bytes-no-dtype", "determinants", NO_DTYPE, {"m052_main_determinants"}),
    Wrong("snapshot-strict", "follow_052", STRICT, {"m052_follow_snapshot"}),
]
REVEALS: dict = {}
