"""M046 (lab 5): what crosses a stage boundary, how many bytes, and what changes it (encoder-decoder,
variable lengths, dtypes, TP/SP/CP layouts).

Every expected value comes from the kit: bytes from :mod:`pipeline_kit.layout`, transfers from the
simulator, the messages of a step from the runtime's ``message_plan``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace

from ...layout import PRESETS, ModelSpec, boundary_bytes, even_layout, p2p_volume
from ...schedules import build_schedule
from ...sim import simulate
from ...grading.parts import fail_choices, Parts, plural
from .common import (
    LabCheckFailed,
    book,
    call,
    check,
    describe,
    drawn,
    expect_choices,
    expect_keys,
    expect_number,
    expect_type,
    fail,
    plain,
)

ON_THE_WIRE = book("p2p", "What is on the wire")  # where the book teaches what these checks find
RUN = ("--schedule", "1f1b", "-m", "8", "--steps", "1", "--layers", "4", "--hidden", "32", "--p2p-timeout", "2")
"""The ``pipeline_kit.run`` arguments of the lab's real runs (each adds ``--inject FAULT``)."""

TENSORS = ("activation", "activation_grad", "weights", "weight_grads", "optimizer_state", "labels", "loss")
CROSSING_WHY = {
    "weights": "weights stay on the stage that owns them; only what flows between layers crosses",
    "weight_grads": "weight gradients are accumulated where the weights live (and reduced over data "
                    "parallelism, never over the pipeline)",
    "optimizer_state": "optimizer state lives with its weights on the owning stage",
    "labels": "the last stage reads the labels from its own data loader; they do not travel down the pipe",
    "loss": "the loss is computed and used on the last stage; backward starts there and sends gradients, "
            "not the loss",
}


# -- shared helpers ------------------------------------------------------------------------------
class Calls:
    """The student's results on a check's cases, each call made once: the check's parts (:class:`Parts`) walk
    the cases in order and each fails on its own first failing case, so a crash on a later (drawn) case never
    hides what a fixed case showed."""

    def __init__(self, run):
        self.run, self.done = run, {}

    def __call__(self, case):
        key = repr(case)
        if key not in self.done:
            try:
                self.done[key] = (True, self.run(case))
            except LabCheckFailed as exc:
                self.done[key] = (False, str(exc))
        ok, value = self.done[key]
        if not ok:
            fail(value)
        return value


def own_value(fn, *args):
    """What the student's own helper gives for ``args`` (None when it is missing or raises): an answer built on
    the student's helper is judged against it, so the helper's mistake costs its own check only."""
    if fn is None or not callable(fn):
        return None
    try:
        got = plain(fn(*args))
    except Exception:  # noqa: BLE001 -- a broken helper: judge against the kit's value alone
        return None
    return got if isinstance(got, (int, float)) and not isinstance(got, bool) else None


def element_bytes(dtype) -> int:
    import torch
    return torch.empty((), dtype=dtype).element_size()


def spec_for(seq, mbs, hidden, dtype) -> ModelSpec:
    return ModelSpec(seq_len=seq, micro_batch_size=mbs, hidden=hidden, dtype_bytes=element_bytes(dtype))


# -- M046 main ----------------------------------------------------------------------------------
@check
def check_crossing(crossing) -> None:
    """Each tensor on its own (``parts.fail_choices``): an empty answer, or every tensor, earns nothing."""
    got = expect_choices(crossing, TENSORS, "crossing")
    missed = []
    if "activation" not in got:
        missed.append("crossing misses 'activation': stage k+1 cannot start its forward without stage k's output")
    if "activation_grad" not in got:
        missed.append("crossing misses 'activation_grad': stage k cannot continue backward without the gradient of "
                      "its output, which the next stage computes")
    others = [name for name in TENSORS if name not in ("activation", "activation_grad")]
    fail_choices(missed, [f"crossing contains {name!r}: {CROSSING_WHY[name]}" for name in others if name in got], 2,
                 len(others))


def expected_messages(pp: int, m: int) -> set:
    out = set()
    for t in simulate(build_schedule("1f1b", pp, m), fwd=1, bwd=2).transfers:
        if t.direction == "forward":
            out.add(("activation", t.microbatch, t.boundary, t.boundary + 1))
        else:
            out.add(("activation_grad", t.microbatch, t.boundary + 1, t.boundary))
    return out


def _messages(fn, pp, m):
    what = f"boundary_messages({pp}, {m})"
    got = call(fn, pp, m, name="boundary_messages")
    expect_type(got, (set, frozenset, list, tuple), what)
    got_list = [tuple(x) if isinstance(x, (list, tuple)) else x for x in got]
    bad = [x for x in got_list if not (isinstance(x, tuple) and len(x) == 4)]
    if bad:
        fail(f"{what}: each item is a tuple (tensor, microbatch, src_stage, dst_stage), got {describe(bad[0])}")
    if len(set(got_list)) != len(got_list):
        fail(f"{what} lists some messages twice: each crosses once per step")
    return set(got_list)


@check
def check_boundary_messages(fn, cases) -> None:
    """Two parts: the forward activations and the backward gradients, each on every case in order."""
    results = Calls(lambda case: _messages(fn, *case))
    parts = Parts()
    for tensor in ("activation", "activation_grad"):
        with parts.part():
            for pp, m in cases:
                what = f"boundary_messages({pp}, {m})"
                got = {x for x in results((pp, m)) if x[0] == tensor}
                want = {x for x in expected_messages(pp, m) if x[0] == tensor}
                if got == want:
                    continue
                if not got:
                    why = ("forward sends every boundary activation on, once per microbatch" if tensor == "activation"
                           else "backward sends the gradient of every boundary activation back, once per microbatch")
                    fail(f"{what} has no {tensor!r} messages: {why}")
                if tensor == "activation_grad" and any(x[2] < x[3] for x in got):
                    x = min(x for x in got if x[2] < x[3])
                    fail(f"{what}: {x} sends a gradient from stage {x[2]} to {x[3]}; gradients flow backward, from "
                         "the stage that used the activation to the one that produced it")
                if tensor == "activation" and any(x[3] >= pp for x in got):
                    fail(f"{what}: the last stage (stage {pp - 1}) sends no activation: it computes the loss")
                missing, extra = want - got, got - want
                if missing:
                    fail(f"{what} misses {plural(len(missing), repr(tensor) + ' message')}: there is one per "
                         f"microbatch and boundary {ON_THE_WIRE}")
                fail(f"{what} has {plural(len(extra), repr(tensor) + ' message')} that "
                     f"{'does' if len(extra) == 1 else 'do'} not exist, e.g. {min(extra, key=str)}")
    parts.done()


@check
def check_boundary_bytes(fn, cases) -> None:
    for seq, mbs, hidden, dtype in cases:
        got = expect_number(call(fn, seq, mbs, hidden, dtype, name="boundary_bytes"),
                            f"boundary_bytes({seq}, {mbs}, {hidden}, {dtype})")
        want = boundary_bytes(spec_for(seq, mbs, hidden, dtype))
        if got == want:
            continue
        size = element_bytes(dtype)
        what = f"boundary_bytes({seq}, {mbs}, {hidden}, {dtype}) = {got:,.0f}"
        elems = seq * mbs * hidden
        if got == elems and size != 1:
            fail(f"{what} is the number of elements; multiply by the bytes per element ({size} for {dtype})")
        if got == elems * 4 and size != 4:
            also = " (or it counts both directions: one send is one direction)" if size == 2 else ""
            fail(f"{what} uses float32's 4 bytes per element; {dtype} has {size}{also}")
        if got == 2 * want:
            fail(f"{what} is twice one send: the forward activation and the backward gradient are two "
                 "transfers; count one")
        if got == elems * 2 and size != 2:
            fail(f"{what} uses 2 bytes per element for every dtype; {dtype} has {size} "
                 "(torch.empty((), dtype=dtype).element_size())")
        fail(f"{what}: one send is s*b*h elements of {size} bytes each ({dtype} has {size} bytes per element)")


@check
def check_real_send(real_send_bytes, run_args, own=None) -> None:
    """``own``: the student's ``boundary_bytes``; a value it gives for the run's tensor is the helper's mistake,
    charged to its own check."""
    from ...run import build_parser
    from ...runtime.p2p import P2P
    args = build_parser().parse_args(list(run_args))
    dtype = inspect.signature(P2P.__init__).parameters["dtype"].default  # what the runtime sends
    size = element_bytes(dtype)
    want = boundary_bytes(spec_for(args.seq_len, args.micro_batch_size, args.hidden, dtype))
    got = expect_number(real_send_bytes, "real_send_bytes")
    if got == want or got == own_value(own, args.seq_len, args.micro_batch_size, args.hidden, dtype):
        return
    if got == want // size * 2:
        fail(f"real_send_bytes is {got:,.0f}: the CPU runtime sends {str(dtype).replace('torch.', '')} "
             f"({size} bytes per element), not 16-bit values -- the timeout line prints the dtype")
    if got == want // size:
        fail(f"real_send_bytes is {got:,.0f}, the number of elements; multiply by the element size ({size})")
    fail(f"real_send_bytes is {got:,.0f}, not the bytes of one send of the run's boundary tensor [b, s, h]: take "
         "b, s, h from RUN and, for the options RUN leaves out, from `python -m pipeline_kit.run --help`")


def _shape_list(value, what):
    expect_type(value, (list, tuple), what)
    out = []
    for s in value:
        if not isinstance(s, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in s):
            fail(f"{what} must hold shapes as tuples of ints, got {describe(s)}")
        out.append(tuple(s))
    return sorted(out)


@check
def check_enc_dec(fn, cases, own=None) -> None:
    """Three parts: the forward shapes, the backward shapes, the bytes (judged against the student's own
    ``boundary_bytes`` too, ``own``: its mistake costs its own check)."""
    keys = ("forward", "backward", "bytes_per_microbatch")

    def run(case):
        got = call(fn, *case, name="enc_dec_boundary")
        expect_keys(got, keys, f"enc_dec_boundary{case}")
        return got
    results = Calls(run)
    parts = Parts()
    with parts.part():
        for case in cases:
            s_enc, s_dec, mbs, hidden, _ = case
            what = f"enc_dec_boundary{case}"
            fwd = _shape_list(results(case)["forward"], f"{what}['forward']")
            if fwd == sorted([(mbs, s_dec, hidden), (mbs, s_enc, hidden)]):
                fail(f"{what}['forward']: give shapes in Megatron's (s, b, h) order, as the question asks")
            if fwd == [(s_dec, mbs, hidden)]:
                fail(f"{what}['forward'] has only the decoder activation; every decoder stage's cross-attention "
                     "needs the encoder output too, so it crosses the cut as a second tensor")
            if (s_dec, mbs, hidden) in fwd and (s_enc, mbs, hidden) not in fwd and len(fwd) == 2:
                fail(f"{what}['forward']: the encoder output has the encoder's sequence length {s_enc}, not {s_dec}")
            if fwd != sorted([(s_dec, mbs, hidden), (s_enc, mbs, hidden)]):
                fail(f"{what}['forward'] is {fwd}: it is a list of (s, b, h) shapes, one per tensor that crosses "
                     "the cut")
    with parts.part():
        for case in cases:
            s_enc, s_dec, mbs, hidden, _ = case
            what = f"enc_dec_boundary{case}"
            bwd = _shape_list(results(case)["backward"], f"{what}['backward']")
            if bwd == [(s_dec, mbs, hidden)]:
                fail(f"{what}['backward'] returns only the decoder gradient; the loss also depends on the encoder "
                     "output (through cross-attention), so its gradient goes back too")
            if bwd != sorted([(s_dec, mbs, hidden), (s_enc, mbs, hidden)]):
                fail(f"{what}['backward'] is {bwd}; backward sends the gradient of each forward tensor, in the same "
                     "(s, b, h) shapes")
    with parts.part():
        for case in cases:
            s_enc, s_dec, mbs, hidden, dtype = case
            what = f"enc_dec_boundary{case}"
            want = 2 * sum(boundary_bytes(spec_for(s, mbs, hidden, dtype)) for s in (s_dec, s_enc))
            mine = [own_value(own, s, mbs, hidden, dtype) for s in (s_dec, s_enc)]
            theirs = 2 * sum(mine) if None not in mine else None
            got_b = expect_number(results(case)["bytes_per_microbatch"], f"{what}['bytes_per_microbatch']")
            if got_b in (want, theirs):
                continue
            if got_b in (want // 2, theirs and theirs / 2):
                fail(f"{what}['bytes_per_microbatch'] counts one direction; the gradients go back too")
            if got_b in (2 * boundary_bytes(spec_for(s_dec, mbs, hidden, dtype)), theirs and 2 * mine[0]):
                fail(f"{what}['bytes_per_microbatch'] counts the decoder activation only; the encoder output crosses "
                     "too")
            fail(f"{what}['bytes_per_microbatch'] is {got_b:,.0f}: count both tensors, both directions, at the "
                 "dtype's element size")
    parts.done()


@check
def check_varlen(fn, cases, own=None) -> None:
    """``own``: the student's ``boundary_bytes``; an answer right with its values is the helper's mistake."""
    for seq_lens, mbs, hidden, dtype, pp in cases:
        what = f"varlen_step_bytes({seq_lens}, {mbs}, {hidden}, {dtype}, {pp})"
        got = expect_number(call(fn, list(seq_lens), mbs, hidden, dtype, pp, name="varlen_step_bytes"), what)
        layout = even_layout(pp, pp)
        want = sum(p2p_volume(layout, spec_for(s, mbs, hidden, dtype), 1)["total_per_step"] for s in seq_lens)
        mine = [own_value(own, s, mbs, hidden, dtype) for s in seq_lens]
        if got == want or (None not in mine and got == 2 * (pp - 1) * sum(mine)):
            continue
        padded = p2p_volume(layout, spec_for(max(seq_lens), mbs, hidden, dtype), len(seq_lens))["total_per_step"]
        if got == padded:
            fail(f"{what} = {got:,.0f} pads every microbatch to the longest ({max(seq_lens)}); with variable "
                 "lengths each microbatch sends its own s")
        if got == want / 2:
            fail(f"{what} = {got:,.0f} counts only the forward activations; gradients go back too")
        if got == want / (pp - 1):
            fail(f"{what} = {got:,.0f} is one boundary; count every boundary of the pipeline {ON_THE_WIRE}")
        fail(f"{what} = {got:,.0f}: each microbatch's activation crosses each of the (pp - 1) boundaries forward "
             "and its gradient comes back, at that microbatch's own s")


def _meta(shape):
    """The shape message the runtime sends with --send-shapes: [ndim, d0, d1, d2, d3], zero-padded (p2p.py)."""
    import torch
    return torch.tensor([len(shape), *shape, *[0] * (4 - len(shape))], dtype=torch.int64)


@check
def check_recv_buffer(fn, cases) -> None:
    """Two parts: the buffer's shape and its dtype, each on every case in order."""
    import torch

    def run(case):
        shape, dtype = case
        buf = call(fn, _meta(shape), dtype, name="recv_buffer")
        expect_type(buf, torch.Tensor, f"recv_buffer({_meta(shape).tolist()}, {dtype})")
        return buf
    results = Calls(run)
    parts = Parts()
    with parts.part():
        for shape, dtype in cases:
            meta = _meta(shape)
            what = f"recv_buffer({meta.tolist()}, {dtype})"
            got = tuple(results((shape, dtype)).shape)
            if got == tuple(shape):
                continue
            if got == tuple(meta[1:].tolist()):
                fail(f"{what} has shape {got}: the trailing zeros are padding; only the first meta[0] = "
                     f"{len(shape)} dimensions are real")
            if got == tuple(meta.tolist()):
                fail(f"{what} has shape {got}: meta[0] is the number of dimensions, not a dimension")
            fail(f"{what} has shape {got}, not the shape the meta describes: meta[0] dimensions follow it")
    with parts.part():
        for shape, dtype in cases:
            buf = results((shape, dtype))
            if buf.dtype != dtype:
                fail(f"recv_buffer({_meta(shape).tolist()}, {dtype}) has dtype {buf.dtype}: the receiver must "
                     f"allocate the sender's dtype ({dtype}, {element_bytes(dtype)} bytes per element), or the bytes "
                     "do not fit")
    parts.done()


# -- M046 follow-up ------------------------------------------------------------------------------
def _bank_model():
    return PRESETS["bank-pp8"][0]


@check
def check_bank_send(value, own=None) -> None:
    """``own``: the student's ``boundary_bytes``; a value it gives for the question bank's model is the helper's
    mistake."""
    import torch
    spec = _bank_model()
    want = boundary_bytes(spec)
    got = expect_number(value, "bank_send_bytes")
    if got == want or got == own_value(own, spec.seq_len, spec.micro_batch_size, spec.hidden, torch.float16):
        return
    elems = spec.seq_len * spec.micro_batch_size * spec.hidden
    if got == elems * 4:
        fail(f"bank_send_bytes is {got:,.0f}: that is fp32; the boundary is fp16 (2 bytes per element)")
    if got == elems:
        fail(f"bank_send_bytes is {got:,.0f}, the number of elements s*b*h; multiply by 2 bytes (fp16)")
    if got == 2 * want:
        fail(f"bank_send_bytes is {got:,.0f}: that counts both directions; one send is one direction")
    fail(f"bank_send_bytes is {got:,.0f}, not s*b*h elements of 2 bytes: use s, b, h of PRESETS['bank-pp8'][0]")


@check
def check_bank_link(value, send=None, pp: int = 8, microbatches: int = 16) -> None:
    """``send``: the student's ``bank_send_bytes``; a link figure right for it is that answer's mistake."""
    spec = _bank_model()
    vol = p2p_volume(even_layout(spec.layers, pp), spec, microbatches)
    sends = {vol["total_per_step"] // vol["boundaries"] // (2 * microbatches)}
    if isinstance(send, (int, float)) and not isinstance(send, bool) and send > 0:
        sends.add(send)
    got = expect_number(value, "bank_link_bytes")
    if any(got == 2 * microbatches * one for one in sends):
        return
    if any(got == microbatches * one for one in sends):
        fail(f"bank_link_bytes is {got:,.0f}: that is only the activations; each microbatch's gradient comes "
             "back over the same link")
    if any(got == 2 * microbatches * (pp - 1) * one for one in sends):
        fail("bank_link_bytes is what the whole pipeline carries; the question asks for one boundary link")
    if any(got == 2 * pp * one for one in sends):
        fail(f"bank_link_bytes is {got:,.0f}: that counts per stage; a link carries every microbatch's activation "
             f"one way and its gradient back {ON_THE_WIRE}")
    fail(f"bank_link_bytes is {got:,.0f}, not what one boundary link carries in a step: every microbatch's "
         f"activation one way and its gradient back {ON_THE_WIRE}")


@check
def check_step_bytes(fn, cases) -> None:
    for pp, m, preset, chunks in cases:
        spec = PRESETS[preset][0]
        what = f"step_p2p_bytes({pp}, {m}, PRESETS[{preset!r}][0], chunks={chunks})"
        got = expect_number(call(fn, pp, m, spec, chunks=chunks, name="step_p2p_bytes"), what)
        vol = p2p_volume(even_layout(spec.layers, pp * chunks), spec, m)
        want = vol["total_per_step"]
        schedule = build_schedule("interleaved" if chunks > 1 else "1f1b", pp, m, chunks if chunks > 1 else None)
        assert len(simulate(schedule, fwd=1, bwd=2).transfers) * boundary_bytes(spec) == want  # kit agrees with itself
        if got == want:
            continue
        one = boundary_bytes(spec)
        if got == 2 * m * one:
            fail(f"{what} is what one boundary link carries (the interview question bank's 2*m*B*S*H*2); the "
                 f"question asks for the whole pipeline, every boundary {ON_THE_WIRE}")
        if got == want / 2:
            fail(f"{what} = {got:,.0f} counts one direction; every activation's gradient comes back")
        if chunks > 1 and got == 2 * m * (pp - 1) * one:
            fail(f"{what} = {got:,.0f} uses (pp - 1) boundaries; with {chunks} chunks per rank every virtual-stage "
                 "boundary crosses ranks, the wrap-arounds from the last rank back to rank 0 included")
        if got == 2 * m * pp * chunks * one:
            fail(f"{what} = {got:,.0f} counts one boundary per stage; the last stage sends nothing on")
        fail(f"{what} = {got:,.0f} is not the step's P2P bytes: count every boundary's transfers, both directions "
             f"{ON_THE_WIRE}")


@check
def check_per_gpu(fn, cases) -> None:
    spec = _bank_model()
    for tp, sp, cp in cases:
        what = f"per_gpu_send_bytes(bank_model, tp={tp}, sp={sp}, cp={cp})"
        got = expect_number(call(fn, spec, tp, sp, cp, name="per_gpu_send_bytes"), what)
        local = spec.seq_len // cp // (tp if sp else 1)
        want = boundary_bytes(replace(spec, seq_len=local))
        if got == want:
            continue
        if not sp and got == want // tp:
            fail(f"{what} = {got:,.0f} divides by TP without sequence parallelism: then every TP rank holds the "
                 "full activation")
        if sp and got == want * tp:
            fail(f"{what} does not divide by TP: with SP the activation at a layer boundary is sharded along s over "
                 f"the {tp} TP ranks")
        if cp > 1 and got == want * cp:
            fail(f"{what} = {got:,.0f}: each context-parallel rank sends only its s/cp tokens")
        fail(f"{what} = {got:,.0f}, not the bytes of one [s_local, b, h] fp16 tensor with the local sequence "
             f"s_local = {local}")


@check
def check_accounting(fn, cases) -> None:
    """Three parts, one per key, each on every case in order; host copies are judged against the student's own
    logical bytes too (a wrong payload costs its own part)."""
    keys = ("logical_bytes", "messages", "host_copy_bytes")
    spec = _bank_model()

    def run(case):
        pp, m, send_shapes, via_host = case
        what = f"accounting({pp}, {m}, bank_model, send_shapes={send_shapes}, via_host={via_host})"
        got = call(fn, pp, m, spec, send_shapes, via_host, name="accounting")
        expect_keys(got, keys, what)
        return {key: expect_number(got[key], f"{what}[{key!r}]") for key in keys}
    results = Calls(run)
    parts = Parts()
    for key in keys:
        with parts.part():
            for case in cases:
                pp, m, send_shapes, via_host = case
                what = f"accounting({pp}, {m}, bank_model, send_shapes={send_shapes}, via_host={via_host})[{key!r}]"
                got = results(case)
                g = got[key]
                transfers = len(simulate(build_schedule("1f1b", pp, m), fwd=1, bwd=2).transfers)
                logical = p2p_volume(even_layout(spec.layers, pp), spec, m)["total_per_step"]
                if key == "logical_bytes" and g != logical:
                    fail(f"{what} is not the payload: the activations and gradients of one step over "
                         "the (pp - 1) boundaries; how they are carried (shape messages, host copies) does not "
                         "change it")
                if key == "messages" and g != transfers * (2 if send_shapes else 1):
                    if send_shapes and g == transfers:
                        fail(f"{what} = {g:,.0f}: with --send-shapes every transfer is preceded by its shape "
                             "message, a second message on the wire")
                    if not send_shapes and g == 2 * transfers:
                        fail(f"{what} = {g:,.0f}: without --send-shapes each transfer is one message")
                    fail(f"{what} = {g:,.0f} is not the step's messages: one transfer per microbatch, boundary and "
                         f"direction{', each with its shape message' if send_shapes else ''}")
                if key == "host_copy_bytes":
                    ok = {2 * logical, 2 * got["logical_bytes"]} if via_host else {0}
                    if g in ok:
                        continue
                    if via_host and g in (logical, got["logical_bytes"]):
                        fail(f"{what} counts one copy: the sender copies the tensor to host memory and the "
                             "receiver copies it back to its GPU: two copies per transfer")
                    if not via_host:
                        fail(f"{what} = {g:,.0f}: without via_host the tensors go GPU to GPU, with no host copy")
                    fail(f"{what} = {g:,.0f}: with via_host every payload byte is copied twice (to host memory "
                         "and back)")
    parts.done()


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_message_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (r.randint(2, 8), r.randint(1, 16)), fixed=[(5, 2)])


def _dtype(r):
    import torch
    return r.choice([torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn])


def hidden_bytes_cases(rng) -> list:
    import torch
    return drawn(rng, 2, lambda r: (r.randint(1, 4096), r.randint(1, 8), r.randint(8, 8192), _dtype(r)),
                 fixed=[(128, 4, 256, torch.float8_e4m3fn), (3, 5, 7, torch.float64)])


def hidden_enc_dec_cases(rng) -> list:
    import torch
    return drawn(rng, 1, lambda r: (r.randint(16, 2048), r.randint(16, 512), r.randint(1, 8), r.randint(8, 2048),
                                    _dtype(r)), fixed=[(64, 64, 2, 32, torch.float32)])


def hidden_varlen_cases(rng) -> list:
    import torch
    return drawn(rng, 1, lambda r: ([r.randint(1, 4096) for _ in range(r.randint(2, 6))], r.randint(1, 4),
                                    r.randint(8, 1024), _dtype(r), r.randint(2, 8)),
                 fixed=[([7, 1, 30], 2, 64, torch.float32, 2)])


BUFFER_ELEMENTS = 2**16
"""The most elements of a drawn receive buffer: an uninitialised buffer (``torch.empty``) may hold NaNs, about
30 bytes each on the wire, and the reply must stay well under ``wire.MAX_BYTES`` (16 MiB)."""


def hidden_recv_buffer_cases(rng) -> list:
    """(shape, dtype): one to four real dimensions (the rest of the meta tensor is padding), any dtype.

    The student's buffer comes back to the grader over the wire, element by element, so a shape has at most
    ``BUFFER_ELEMENTS``: four dimensions of up to 64 could reach 16.8 million, and the model answer's own
    buffer was refused (CI, seed 721020450: 43 x 45 x 58 x 14 = 1,571,220 elements, over ``wire.MAX_TENSOR``).
    """
    import torch

    def make(r):
        shape: list[int] = []
        for _ in range(r.randint(1, 4)):
            shape.append(r.randint(1, min(64, BUFFER_ELEMENTS // math.prod(shape))))
        return tuple(shape), r.choice([torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32])
    return drawn(rng, 2, make, fixed=[((1, 2, 3, 4), torch.float16), ((9,), torch.int64)])


def hidden_step_cases(rng) -> list:
    """(pp, M, preset, chunks) Megatron runs: pp x chunks divides the layers, M a multiple of pp when interleaved."""
    def make(r):
        preset = r.choice(sorted(PRESETS))
        layers = PRESETS[preset][0].layers
        pp, chunks = r.choice([(p, v) for p in range(2, 9) for v in range(1, 5) if layers % (p * v) == 0])
        return pp, pp * r.randint(1, 4) if chunks > 1 else r.randint(1, 32), preset, chunks
    return drawn(rng, 2, make, fixed=[(2, 4, "tiny", 4)])


def hidden_per_gpu_cases(rng) -> list:
    """(tp, sp, cp) for the question bank's model: the 512-token sequence splits evenly by cp and, with sp, by tp."""
    return drawn(rng, 2, lambda r: (r.choice([1, 2, 4, 8]), r.random() < 0.5, r.choice([1, 2, 4, 8])),
                 fixed=[(2, True, 4), (4, False, 2)])


def hidden_accounting_cases(rng) -> list:
    """(pp, M, send_shapes, via_host) for the question bank's model: pp divides its 16 layers (the kit splits
    evenly)."""
    return drawn(rng, 2, lambda r: (r.choice([2, 4, 8, 16]), r.randint(1, 32), r.random() < 0.5, r.random() < 0.5),
                 fixed=[(2, 3, False, True)])
