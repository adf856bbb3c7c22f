"""Lab 5's typical wrong answers (what crosses a boundary and its bytes; blocking orders; a real hang)."""

import re

from fairness import Wrong

T, BY, MU, VL = "m046_main_tensors", "m046_main_bytes", "m046_main_multi", "m046_main_varlen"
FB, FD, FBD, FL, FA = ("m046_follow_bytes", "m046_follow_directions", "m046_follow_boundaries", "m046_follow_layout",
                       "m046_follow_accounting")
PA, LI, FI, EX = "m053_main_pairing", "m053_main_lifetime", "m053_main_fields", "m053_main_exceptions"
ME, PR, FX, LF = "m053_follow_mechanism", "m053_follow_propagation", "m053_follow_fixes", "m053_follow_log_fields"

ONE_WAY = '''
def boundary_messages(pp, microbatches):
    return {("activation", m, s, s + 1) for m in range(microbatches) for s in range(pp - 1)}
'''
GRAD_DOWN = '''
def boundary_messages(pp, microbatches):
    return {(t, m, s, s + 1) for t in ("activation", "activation_grad") for m in range(microbatches)
            for s in range(pp - 1)}
'''
ALL_STAGES = '''
def boundary_messages(pp, microbatches):
    out = set()
    for m in range(microbatches):
        for s in range(pp):
            out.add(("activation", m, s, s + 1))
            out.add(("activation_grad", m, s + 1, s))
    return out
'''
DEC_ONLY = '''
def enc_dec_boundary(s_enc, s_dec, mbs, hidden, dtype):
    return {"forward": [(s_dec, mbs, hidden)], "backward": [(s_dec, mbs, hidden)],
            "bytes_per_microbatch": 2 * boundary_bytes(s_dec, mbs, hidden, dtype)}
'''
ONE_DIRECTION = '''
def enc_dec_boundary(s_enc, s_dec, mbs, hidden, dtype):
    shapes = [(s_dec, mbs, hidden), (s_enc, mbs, hidden)]
    return {"forward": shapes, "backward": shapes,
            "bytes_per_microbatch": sum(boundary_bytes(s, mbs, hidden, dtype) for s in (s_dec, s_enc))}
'''
BSH = '''
def enc_dec_boundary(s_enc, s_dec, mbs, hidden, dtype):
    shapes = [(mbs, s_dec, hidden), (mbs, s_enc, hidden)]
    return {"forward": shapes, "backward": list(shapes),
            "bytes_per_microbatch": 2 * sum(boundary_bytes(s, mbs, hidden, dtype) for s in (s_dec, s_enc))}
'''
BWD_DEC = '''
def enc_dec_boundary(s_enc, s_dec, mbs, hidden, dtype):
    shapes = [(s_dec, mbs, hidden), (s_enc, mbs, hidden)]
    return {"forward": shapes, "backward": [(s_dec, mbs, hidden)],
            "bytes_per_microbatch": 2 * sum(boundary_bytes(s, mbs, hidden, dtype) for s in (s_dec, s_enc))}
'''
PADDED = '''
def varlen_step_bytes(seq_lens, mbs, hidden, dtype, pp):
    return 2 * (pp - 1) * len(seq_lens) * boundary_bytes(max(seq_lens), mbs, hidden, dtype)
'''
FWD_ONLY = '''
def varlen_step_bytes(seq_lens, mbs, hidden, dtype, pp):
    return (pp - 1) * sum(boundary_bytes(s, mbs, hidden, dtype) for s in seq_lens)
'''
ONE_BOUNDARY = '''
def varlen_step_bytes(seq_lens, mbs, hidden, dtype, pp):
    return 2 * sum(boundary_bytes(s, mbs, hidden, dtype) for s in seq_lens)
'''
PADDING = '''
def recv_buffer(meta, dtype):
    return torch.empty(tuple(int(d) for d in meta[1:]), dtype=dtype)
'''
NO_DTYPE_BUF = '''
def recv_buffer(meta, dtype):
    return torch.empty(tuple(int(d) for d in meta[1:1 + int(meta[0])]))
'''
THREE_DIMS = '''
def recv_buffer(meta, dtype):
    return torch.empty(int(meta[1]), int(meta[2]), int(meta[3]), dtype=dtype)
'''
PER_LINK = '''
def step_p2p_bytes(pp, microbatches, spec, chunks=1):
    return 2 * microbatches * layout.boundary_bytes(spec)
'''
NO_CHUNKS = '''
def step_p2p_bytes(pp, microbatches, spec, chunks=1):
    return 2 * microbatches * (pp - 1) * layout.boundary_bytes(spec)
'''
STAGES = '''
def step_p2p_bytes(pp, microbatches, spec, chunks=1):
    return 2 * microbatches * pp * chunks * layout.boundary_bytes(spec)
'''
TP_ALWAYS = '''
def per_gpu_send_bytes(spec, tp, sp, cp):
    return spec.seq_len // cp // tp * spec.micro_batch_size * spec.hidden * spec.dtype_bytes
'''
NO_SP = '''
def per_gpu_send_bytes(spec, tp, sp, cp):
    return spec.seq_len // cp * spec.micro_batch_size * spec.hidden * spec.dtype_bytes
'''
NO_CP = '''
def per_gpu_send_bytes(spec, tp, sp, cp):
    return spec.seq_len // (tp if sp else 1) * spec.micro_batch_size * spec.hidden * spec.dtype_bytes
'''
ONE_COPY = '''
def accounting(pp, microbatches, spec, send_shapes, via_host):
    transfers = 2 * microbatches * (pp - 1)
    logical = transfers * layout.boundary_bytes(spec)
    return {"logical_bytes": logical, "messages": transfers * (2 if send_shapes else 1),
            "host_copy_bytes": logical if via_host else 0}
'''
NO_SHAPES = '''
def accounting(pp, microbatches, spec, send_shapes, via_host):
    transfers = 2 * microbatches * (pp - 1)
    logical = transfers * layout.boundary_bytes(spec)
    return {"logical_bytes": logical, "messages": transfers, "host_copy_bytes": 2 * logical if via_host else 0}
'''
PHYSICAL = '''
def accounting(pp, microbatches, spec, send_shapes, via_host):
    transfers = 2 * microbatches * (pp - 1)
    logical = transfers * layout.boundary_bytes(spec)
    return {"logical_bytes": logical * (3 if via_host else 1), "messages": transfers * (2 if send_shapes else 1),
            "host_copy_bytes": 2 * logical if via_host else 0}
'''
NAIVE = '''
def blocking_program(pp, microbatches, rank):
    return runtime_program(build_schedule("1f1b", pp, microbatches), rank, send="send")
'''
ISEND = '''
def blocking_program(pp, microbatches, rank):
    return runtime_program(build_schedule("1f1b", pp, microbatches), rank)
'''
GPIPE = '''
def blocking_program(pp, microbatches, rank):
    out = []
    for item in runtime_program(build_schedule("gpipe", pp, microbatches), rank, send="send"):
        follows_send = out and isinstance(out[-1], tuple) and out[-1][0] == "send"
        if isinstance(item, tuple) and item[0] == "recv" and follows_send:
            out[-1] = [out[-1], item]
        else:
            out.append(item)
    return out
'''
ZERO = "def deallocate_output(y):\n    y.data.zero_()\n"
RESIZE = "def deallocate_output(y):\n    y.untyped_storage().resize_(0)\n"
DETACH = "def deallocate_output(y):\n    y.detach_()\n"


def _field(change: str) -> str:
    return f'''
_parse_timeout = parse_timeout
def parse_timeout(line):
    d = _parse_timeout(line)
    {change}
    return d
'''


WITH_CRASHED = '''
_stranded = stranded
def stranded(pp, microbatches, crash_rank, crash_mb):
    return {**_stranded(pp, microbatches, crash_rank, crash_mb), crash_rank: ("forward", crash_mb, crash_rank - 1)}
'''
NEIGHBOURS = '''
_stranded = stranded
def stranded(pp, microbatches, crash_rank, crash_mb):
    return {r: w for r, w in _stranded(pp, microbatches, crash_rank, crash_mb).items() if abs(r - crash_rank) == 1}
'''
SAME_MB = '''
_stranded = stranded
def stranded(pp, microbatches, crash_rank, crash_mb):
    return {r: (d, crash_mb, p) for r, (d, m, p) in _stranded(pp, microbatches, crash_rank, crash_mb).items()}
'''
VICTIM = '''
def diagnose(stderr_text):
    good = diagnose_ok(stderr_text)
    waits = [parse_timeout(ln) for ln in stderr_text.splitlines() if "P2P TIMEOUT" in ln]
    victim = next(w for w in waits if w["peer"] == good["rank"] and w["microbatch"] == good["microbatch"])
    return {**good, "rank": victim["rank"]}
'''
EARLIEST = '''
def diagnose(stderr_text):
    waits = [parse_timeout(ln) for ln in stderr_text.splitlines() if "P2P TIMEOUT" in ln]
    w = min(waits, key=lambda w: w["began"])
    return {"rank": w["peer"], "microbatch": w["microbatch"], "direction": w["direction"]}
'''
OWN_WAIT = '''
def diagnose(stderr_text):
    good = diagnose_ok(stderr_text)
    mine = next(parse_timeout(ln) for ln in stderr_text.splitlines()
                if "P2P TIMEOUT" in ln and ln.startswith(f"[rank {good['rank']}]"))
    return {"rank": good["rank"], "microbatch": mine["microbatch"], "direction": good["direction"]}
'''
FIRST_LINE = '''
def diagnose(stderr_text):
    w = next(parse_timeout(ln) for ln in stderr_text.splitlines() if "P2P TIMEOUT" in ln)
    return {"rank": w["peer"], "microbatch": w["microbatch"], "direction": w["direction"]}
'''
ONLY_VICTIM = '''
def predict_timeouts(pp, microbatches, skip_rank, skip_mb):
    return {skip_rank + 1: ("forward", skip_mb, skip_rank)}
'''
PRED_SAME_MB = '''
_predict = predict_timeouts
def predict_timeouts(pp, microbatches, skip_rank, skip_mb):
    return {r: (d, skip_mb, p) for r, (d, m, p) in _predict(pp, microbatches, skip_rank, skip_mb).items()}
'''
PRED_CRASH = '''
def predict_timeouts(pp, microbatches, skip_rank, skip_mb):
    return stranded(pp, microbatches, skip_rank, skip_mb)
'''


def _diagnose(code: str) -> str:
    return "diagnose_ok = diagnose\n" + code


WRONG = [
    Wrong("crossing-labels", "tensors", 'crossing = {"activation", "activation_grad", "labels"}', {T}),
    Wrong("crossing-forward-only", "tensors", 'crossing = {"activation"}', {T}),
    Wrong("crossing-weights", "tensors", 'crossing = {"activation", "activation_grad", "weight_grads"}', {T}),
    Wrong("messages-one-way", "tensors", ONE_WAY, {T}),
    Wrong("messages-gradients-downstream", "tensors", GRAD_DOWN, {T}),
    Wrong("messages-last-stage-sends", "tensors", ALL_STAGES, {T}),
    Wrong("bytes-elements", "bytes", "def boundary_bytes(seq, mbs, hidden, dtype):\n    return seq * mbs * hidden\n",
          {BY}),
    Wrong("bytes-fp32", "bytes", "def boundary_bytes(seq, mbs, hidden, dtype):\n    return seq * mbs * hidden * 4\n",
          {BY}),
    Wrong("bytes-2-always", "bytes",
          "def boundary_bytes(seq, mbs, hidden, dtype):\n    return seq * mbs * hidden * 2\n", {BY}),
    Wrong("real-send-default-hidden", "bytes", "real_send_bytes = boundary_bytes(32, 2, 64, torch.float32)", {BY}),
    Wrong("real-send-fp16", "bytes", "real_send_bytes = boundary_bytes(32, 2, 32, torch.float16)", {BY}),
    Wrong("enc-dec-decoder-only", "multi", DEC_ONLY, {MU}),
    Wrong("enc-dec-one-direction", "multi", ONE_DIRECTION, {MU}),
    Wrong("enc-dec-bsh", "multi", BSH, {MU}),
    Wrong("enc-dec-backward-decoder-only", "multi", BWD_DEC, {MU}),
    Wrong("varlen-padded", "varlen", PADDED, {VL}),
    Wrong("varlen-forward-only", "varlen", FWD_ONLY, {VL}),
    Wrong("varlen-one-boundary", "varlen", ONE_BOUNDARY, {VL}),
    Wrong("buffer-padding", "varlen", PADDING, {VL}),
    Wrong("buffer-default-dtype", "varlen", NO_DTYPE_BUF, {VL}),
    Wrong("buffer-three-dims", "varlen", THREE_DIMS, {VL}),
    Wrong("bank-send-fp32", "follow_bytes",
          "bank_send_bytes = bank_model.seq_len * bank_model.micro_batch_size * bank_model.hidden * 4", {FB}),
    Wrong("bank-send-elements", "follow_bytes",
          "bank_send_bytes = bank_model.seq_len * bank_model.micro_batch_size * bank_model.hidden", {FB}),
    Wrong("bank-send-both-ways", "follow_bytes", "bank_send_bytes = 2 * boundary_bytes(bank_model.seq_len, "
          "bank_model.micro_batch_size, bank_model.hidden, torch.float16)", {FB}),
    Wrong("bank-link-activations", "follow_bytes", "bank_link_bytes = 16 * bank_send_bytes", {FD}),
    Wrong("bank-link-pipeline", "follow_bytes", "bank_link_bytes = 2 * 16 * 7 * bank_send_bytes", {FD}),
    Wrong("bank-link-pp", "follow_bytes", "bank_link_bytes = 2 * 8 * bank_send_bytes", {FD}),
    Wrong("step-per-link", "follow_bytes", PER_LINK, {FBD}),
    Wrong("step-no-chunks", "follow_bytes", NO_CHUNKS, {FBD}),
    Wrong("step-stages", "follow_bytes", STAGES, {FBD}),
    Wrong("per-gpu-tp-always", "follow_bytes", TP_ALWAYS, {FL}),
    Wrong("per-gpu-no-sp", "follow_bytes", NO_SP, {FL}),
    Wrong("per-gpu-no-cp", "follow_bytes", NO_CP, {FL}),
    Wrong("accounting-one-copy", "follow_bytes", ONE_COPY, {FA}),
    Wrong("accounting-no-shape-messages", "follow_bytes", NO_SHAPES, {FA}),
    Wrong("accounting-physical-bytes", "follow_bytes", PHYSICAL, {FA}),
    Wrong("pairing-naive", "pairing", NAIVE, {PA}),
    Wrong("pairing-isend", "pairing", ISEND, {PA}),
    Wrong("pairing-gpipe", "pairing", GPIPE, {PA}),
    Wrong("dealloc-zero", "lifetime", ZERO, {LI}),
    Wrong("dealloc-resize", "lifetime", RESIZE, {LI}),
    Wrong("dealloc-detach", "lifetime", DETACH, {LI}),
    Wrong("parse-swapped-counts", "fields", _field('d["received"], d["sent"] = d["sent"], d["received"]'), {FI}),
    Wrong("parse-chunk-zero", "fields", _field('d["chunk"], d["stage"] = 0, d["rank"]'), {FI}),
    Wrong("parse-shape-list", "fields", _field('d["shape"] = list(d["shape"])'), {FI}),
    Wrong("parse-torch-dtype", "fields", _field('d["dtype"] = "torch." + d["dtype"]'), {FI}),
    Wrong("stranded-with-crashed", "exceptions", WITH_CRASHED, {EX}),
    Wrong("stranded-neighbours-only", "exceptions", NEIGHBOURS, {EX}),
    Wrong("stranded-same-microbatch", "exceptions", SAME_MB, {EX}),
    Wrong("diagnose-victim", "follow_hang", _diagnose(VICTIM), {ME}),
    Wrong("diagnose-earliest", "follow_hang", _diagnose(EARLIEST), {ME}),
    Wrong("diagnose-own-wait", "follow_hang", _diagnose(OWN_WAIT), {ME}),
    Wrong("diagnose-first-line", "follow_hang", _diagnose(FIRST_LINE), {ME}),
    Wrong("predict-only-victim", "follow_hang", ONLY_VICTIM, {PR}),
    Wrong("predict-same-microbatch", "follow_hang", PRED_SAME_MB, {PR}),
    Wrong("predict-crash", "follow_hang", PRED_CRASH, {PR}),
    Wrong("fixes-longer-timeout", "follow_hang", 'fixes = {"agree_before_schedule", "longer_timeout"}', {FX}),
    Wrong("fixes-one", "follow_hang", 'fixes = {"agree_before_schedule"}', {FX}),
    Wrong("fixes-local", "follow_hang", 'fixes = {"skip_receive_locally", "send_placeholder"}', {FX}),
    Wrong("log-no-tag", "follow_hang", 'log_fields = log_fields - {"tag"}', {LF}),
    Wrong("log-loss", "follow_hang", 'log_fields = log_fields | {"loss"}', {LF}),
    Wrong("log-no-counts", "follow_hang", 'log_fields = log_fields - {"sent_count", "received_count"}', {LF}),
]
WAITS = [re.compile(r"waits for the (?:forward|backward) message of microbatch \d"),
         re.compile(r"that is microbatch \d")]
REVEALS = {
    BY: ["8,192"],  # real_send_bytes: 32 * 2 * 32 float32 elements
    FB: ["786,432"],  # bank_send_bytes
    FD: ["25,165,824", "25165824", re.compile(r"2 x M = \d"), "a link carries 2 x M"],  # bank_link_bytes
    FBD: ["176,160,768", re.compile(r"pp\*(?:chunks|v) - 1 = \d")],  # step_p2p_bytes(8, 16, bank_model)
    # what a rank waits for, spelled out (the wait the dict must hold)
    EX: WAITS,
    PR: WAITS + [re.compile(r"timed out waiting for \(")],
    # the root cause's rank, or the missing message, named
    ME: [re.compile(r"message rank \d+ never sent"), re.compile(r"own text gave \d"),
         re.compile(r"rank \d+ waits for from rank \d"), re.compile(r"the missing message is a (?:forward|backward)")],
    VL: [re.compile(r"pp - 1 = \d")],
    T: [re.compile(r"misses [^;]*e\.g\. \('activation")],
    PA: [re.compile(r"1F1B on rank \d+ runs [FB]\d"), re.compile(r"expected \d+ \(")],
}
