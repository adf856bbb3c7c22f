"""M048 (lab 6): where the loss lives -- the last stage computes it, scales it by 1/M, and the log needs its
own reduction.

Gradients are compared with the kit's ``reference_grads`` (one process, the whole model), the logged loss
with the kit's own computation and with what a real run printed.
"""

from __future__ import annotations

import math
import re

from ...schedules import build_schedule, select_schedule
from .common import (
    call,
    check,
    close,
    describe,
    expect_number,
    expect_type,
    fail,
)
from .m047 import cfg_from_run

PRODUCTION = {
    "broadcast_from_last_stage": None,
    "all_reduce_max": "the seeds' trick: wrong for a negative loss and, with DP > 1, it logs the largest replica",
    "all_reduce_sum_over_world": "with DP > 1 it logs the sum over replicas, not their mean",
    "all_gather_logits_to_rank0": "moves s*b*V logits per microbatch to compute a number the last stage already has",
}


# -- M048 ----------------------------------------------------------------------------------------
class _Received:
    """Wraps a stage: a non-first stage must get its input as P2P delivers it, with no graph behind it."""

    def __init__(self, module, first: bool):
        self.module, self.first = module, first
        self.calls = 0

    def __call__(self, x):
        from .common import LabCheckFailed
        self.calls += 1
        if not self.first and x.grad_fn is not None:
            raise LabCheckFailed(
                f"stage {self.module.stage} received a tensor still attached to the previous stage's graph; in a "
                "pipeline it arrives through P2P with no graph: detach it and call requires_grad_() so that "
                "backward leaves its gradient in .grad, then send that gradient back to the previous stage")
        return self.module(x)

    def parameters(self):
        return self.module.parameters()

    def named_parameters(self):
        return self.module.named_parameters()


def _pipeline_run(fn, cfg, n, m, mbs=2):
    import torch

    from ...runtime.grads import reference_grads
    from ...runtime.model import build_stage, make_batch
    tokens, targets = make_batch(cfg, m, mbs, 0)
    stages = [_Received(build_stage(cfg, s, n), s == 0) for s in range(n)]
    value = call(fn, stages, tokens, targets, name="pipeline_step")
    ref = reference_grads(cfg, tokens, targets)
    return stages, value, ref, tokens, targets, torch


@check
def check_last_stage(fn, cases) -> None:
    for cfg, n, m in cases:
        stages, _, ref, _, _, torch = _pipeline_run(fn, cfg, n, m)
        what = f"pipeline_step(<{n} stages>, {m} microbatches)"
        for s, st in enumerate(stages):
            if st.calls != m:
                fail(f"{what} ran stage {s} {st.calls} times; every stage runs once per microbatch ({m})")
        ratios = []
        for s, st in enumerate(stages):
            for name, p in st.named_parameters():
                if p.grad is None or not torch.any(p.grad != 0):
                    fail(f"{what}: stage {s}'s parameter {name} has no gradient -- backward starts from the loss on "
                         "the last stage; each earlier stage must run backward from the gradient of its output, "
                         "received from the next stage (output.backward(grad))")
                r = (p.grad * ref[name]).sum() / (ref[name] * ref[name]).sum()
                if not torch.allclose(p.grad, r * ref[name], rtol=1e-3, atol=1e-6 * float(ref[name].abs().max())):
                    fail(f"{what}: the gradient of {name} (stage {s}) does not follow the reference's direction: the "
                         "loss must be the cross-entropy of the last stage's logits with that microbatch's targets")
                ratios.append(float(r))
        if max(ratios) - min(ratios) > 1e-3 * max(abs(x) for x in ratios):
            fail(f"{what}: the stages' gradients are scaled differently ({min(ratios):.3g}x to {max(ratios):.3g}x the "
                 "reference): apply the loss and any scaling once, on the last stage, and send gradients back unchanged")


@check
def check_scaling(fn, cases) -> None:
    for cfg, n, m in cases:
        stages, value, ref, tokens, targets, torch = _pipeline_run(fn, cfg, n, m)
        what = f"pipeline_step(<{n} stages>, {m} microbatches)"
        name, p = next(iter(stages[-1].named_parameters()))
        if p.grad is None:
            fail(f"{what} left no gradient on the last stage")
        r = float((p.grad * ref[name]).sum() / (ref[name] * ref[name]).sum())
        if not close(r, 1.0, rel=1e-4):
            if close(r, m, rel=1e-3):
                fail(f"{what}: the gradients are {r:.2f}x the full-batch mean's: divide each microbatch's loss by M = "
                     f"{m} before backward, so the accumulated gradient is the mean over microbatches")
            if close(r, 1 / m, rel=1e-3):
                fail(f"{what}: the gradients are 1/{m} of the full-batch mean's: the loss is divided by M twice")
            fail(f"{what}: the gradients are {r:.3g}x the full-batch mean's, expected exactly 1x")
        from ...runtime.model import GPT, lm_loss
        with torch.no_grad():
            gpt = GPT(cfg)
            want = float(sum(lm_loss(gpt(x), y) for x, y in zip(tokens, targets)) / m)
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                fail(f"{what} returns the loss with its graph; return a plain number for the log (loss.item())")
            value = float(value)
        got = expect_number(value, f"the value {what} returns")
        if close(got, want, rel=1e-4):
            continue
        if close(got, want * m, rel=1e-4):
            fail(f"{what} returns {got:.4f}, the sum of the microbatch losses; log their mean ({want:.4f})")
        if close(got, want / m, rel=1e-4):
            fail(f"{what} returns {got:.4f}: the mean of the 1/M-scaled losses; the scaled losses add up to the mean")
        fail(f"{what} returns {got:.4f}, expected the mean microbatch loss {want:.4f}")


def kit_logged_loss(cfg, m, mbs) -> float:
    import torch

    from ...runtime.model import GPT, lm_loss, make_batch
    tokens, targets = make_batch(cfg, m, mbs, 0)
    with torch.no_grad():
        gpt = GPT(cfg)
        return float(sum(lm_loss(gpt(x), y) / m for x, y in zip(tokens, targets)))


@check
def check_logged_loss(fn, run=None, run_args=None, cases=()) -> None:
    todo = list(cases)
    if run_args is not None:
        todo.insert(0, cfg_from_run(run_args))
    for i, (cfg, mbs, m) in enumerate(todo):
        what = f"logged_loss(<cfg layers={cfg.layers}, hidden={cfg.hidden}>, {m}, {mbs})"
        got = expect_number(call(fn, cfg, m, mbs, name="logged_loss"), what)
        want = kit_logged_loss(cfg, m, mbs)
        if close(got, want, rel=1e-5):
            if i == 0 and run is not None and getattr(run, "returncode", 1) == 0:
                printed = re.search(r"step 1/\d+ .*?loss ([\d.]+)", run.stdout)
                if printed and abs(got - float(printed.group(1))) > 5.1e-5:
                    fail(f"{what} is {got:.4f} but the real run logged {printed.group(1)}")
            continue
        if close(got, want * m, rel=1e-5):
            fail(f"{what} is {got:.4f}, the sum over microbatches; the run logs the mean (the 1/M-scaled losses "
                 "added up)")
        if close(got, want / m, rel=1e-5):
            fail(f"{what} is {got:.4f}: divided by M twice")
        fail(f"{what} is {got:.4f}; the run logs the mean cross-entropy of step 1 over its {m} microbatches, "
             "computed with the initial weights on make_batch(cfg, M, mbs, step=0)")


@check
def check_dp_log(fn, cases) -> None:
    import torch
    for replicas in cases:
        what = f"dp_logged_loss({replicas})"
        got = expect_number(call(fn, [list(r) for r in replicas], name="dp_logged_loss"), what)
        want = float(torch.tensor(replicas, dtype=torch.float64).mean())
        if close(got, want, rel=1e-9):
            continue
        if close(got, sum(replicas[0]) / len(replicas[0]), rel=1e-9):
            fail(f"{what} is {got:.4f}, the first replica only; every data-parallel replica trains on other data, "
                 "and the log shows their mean")
        if close(got, want * len(replicas), rel=1e-9):
            fail(f"{what} is {got:.4f}, the sum over replicas; average them")
        fail(f"{what} is {got:.4f}, expected {want:.4f}")


@check
def check_vocab_parallel(fn, cases) -> None:
    import torch
    import torch.nn.functional as F

    from .common import LabCheckFailed

    joins = (torch.cat, torch.stack, torch.concat, torch.hstack, torch.vstack, torch.column_stack,
             torch.concatenate, torch.dstack)

    class Shard(torch.Tensor):
        """A logits shard of one TP rank: joining shards into the full [N, V] logits is refused (joining
        per-token results, as an all-reduce of [N] vectors would, is fine)."""

        full = 0

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            out = super().__torch_function__(func, types, args, kwargs or {})
            if func in joins and isinstance(out, torch.Tensor) and out.numel() >= cls.full:
                raise LabCheckFailed("vocab_parallel_ce gathered the shards into the full [N, V] logits: on a real "
                                     "TP group that is the all-gather vocabulary parallelism exists to avoid. Reduce "
                                     "per-token numbers (max, sum of exps, the target's logit) across shards instead")
            return out

    for n, vocab, tp, scale, seed in cases:
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn(n, vocab, generator=gen, dtype=torch.float32) * scale
        targets = torch.randint(0, vocab, (n,), generator=gen)
        want = F.cross_entropy(logits, targets)
        Shard.full = n * vocab if tp > 1 else n * vocab + 1  # one shard is the whole vocabulary already
        shards = [s.clone().as_subclass(Shard) for s in logits.chunk(tp, dim=1)]
        what = f"vocab_parallel_ce(<{tp} shards of [{n}, {vocab // tp}]>, targets)"
        got = call(fn, shards, targets.clone(), name="vocab_parallel_ce")
        if isinstance(got, torch.Tensor):
            got = got.as_subclass(torch.Tensor)
            if got.numel() != 1:
                fail(f"{what} returned shape {tuple(got.shape)}; return the mean loss over the {n} tokens (a scalar)")
            got = float(got)
        if isinstance(got, float) and not math.isfinite(got):
            fail(f"{what} is {got} for logits of size ~{scale:g}: exp overflows. Subtract the max over the whole "
                 "vocabulary first -- an all-reduce(MAX) of the shards' maxima -- as Megatron's "
                 "vocab_parallel_cross_entropy does")
        got = expect_number(got, what)
        if close(got, float(want), rel=1e-4, abs_=1e-5):
            continue
        local = sum(float(F.cross_entropy(s.as_subclass(torch.Tensor), (targets - k * (vocab // tp)).clamp(0, vocab // tp - 1)))
                    for k, s in enumerate(logits.chunk(tp, dim=1))) / tp
        if close(got, local, rel=1e-3):
            fail(f"{what} is {got:.4f}, the average of per-shard cross-entropies; a shard's softmax normalises over "
                 f"its {vocab // tp} words only: all-reduce(SUM) the sums of exps over the TP group")
        fail(f"{what} is {got:.4f}, cross-entropy over the full vocabulary is {float(want):.4f}: the target's logit "
             "comes from the shard that owns the target id (shard k owns ids k*V/t .. (k+1)*V/t - 1)")


@check
def check_contributions(fn, cases) -> None:
    for pp, loss in cases:
        what = f"contributions({pp}, {loss})"
        got = call(fn, pp, loss, name="contributions")
        expect_type(got, (list, tuple), what)
        owner = select_schedule(pp).loss_rank
        want = [loss if r == owner else 0.0 for r in range(pp)]
        if len(got) != pp:
            fail(f"{what} has {len(got)} values; one per pipeline rank ({pp})")
        if [float(x) for x in got] == want:
            continue
        if float(got[0]) == loss and owner != 0:
            fail(f"{what}: rank 0 has no loss -- it holds the embedding, not the output layer. Only rank {owner}, "
                 "the last stage, has a non-zero value")
        fail(f"{what} is {describe(list(got))}: the last stage (rank {owner}) contributes the loss, every other rank 0")


@check
def check_log_tensor(fn) -> None:
    import torch
    torch.manual_seed(3)
    w = torch.randn(4, 5, requires_grad=True)
    x, y = torch.randn(6, 4), torch.randint(0, 5, (6,))
    want_grad = torch.autograd.grad(torch.nn.functional.cross_entropy(x @ w, y), w)[0]
    loss = torch.nn.functional.cross_entropy(x @ w, y)
    value = loss.detach().item()
    t = call(fn, loss, name="loss_for_logging")
    if not isinstance(t, torch.Tensor):
        fail(f"loss_for_logging must return a tensor (all_reduce works in place on a tensor), got {type(t).__name__}")
    if t.requires_grad:
        fail("loss_for_logging returned a tensor that is part of the autograd graph: the logging collective must run "
             "on a detached value, never on a graph node")
    if t.numel() != 1 or not close(float(t), value, rel=1e-6):
        fail(f"loss_for_logging returned {describe(t.tolist())}; it must hold the loss value {value:.6f}")
    if t.untyped_storage().data_ptr() == loss.untyped_storage().data_ptr():
        fail("loss_for_logging returned a tensor sharing the loss's storage (detach() alone does): the in-place "
             "all_reduce would overwrite the loss the last stage still uses. Make a new tensor (detach().clone())")
    t.add_(100.0)  # what an in-place all_reduce does to it
    loss.backward()
    if not close(loss.detach().item(), value, rel=1e-6) or w.grad is None or not torch.allclose(w.grad, want_grad):
        fail("after the logging reduction the loss or its gradient changed: keep logging outside autograd")


def max_trick(dp_losses, pp, op):
    """What rank 0 logs after all_reduce(op) over the world: pp ranks per replica, only last stages non-zero."""
    import torch
    values = torch.tensor([0.0] * ((pp - 1) * len(dp_losses)) + list(dp_losses), dtype=torch.float64)
    return float(values.max() if op == "max" else values.sum())


@check
def check_max_trick(logged_by, max_ok, cases, pp=4) -> None:
    for dp_losses in cases:
        for op in ("max", "sum"):
            what = f"logged_by({op!r}, {dp_losses}, {pp})"
            got = expect_number(call(logged_by, op, list(dp_losses), pp, name="logged_by"), what)
            want = max_trick(dp_losses, pp, op)
            if close(got, want, rel=1e-9, abs_=1e-12):
                continue
            if op == "max" and close(got, max(dp_losses), rel=1e-9):
                fail(f"{what} is {got:g}: the other ranks' zeros take part in the reduction too, and 0 > {max(dp_losses):g}")
            fail(f"{what} is {got:g}, expected {want:g} (every rank's value enters the all-reduce)")
        mean = sum(dp_losses) / len(dp_losses)
        want_ok = close(max_trick(dp_losses, pp, "max"), mean, rel=1e-12, abs_=1e-12)
        got_ok = call(max_ok, list(dp_losses), name="max_trick_ok")
        if got_ok is not want_ok:
            why = ("a negative loss loses to the other ranks' zeros" if min(dp_losses) < 0 else
                   "with several data-parallel replicas MAX logs the largest, not the mean" if len(set(dp_losses)) > 1
                   else "one non-negative value and zeros: MAX returns it")
            fail(f"max_trick_ok({list(dp_losses)}) is {describe(got_ok)}, expected {want_ok}: {why}")


@check
def check_production(log_rank, choice, cases) -> None:
    for pp, vpp in cases:
        got = call(log_rank, pp, vpp, name="production_log_rank")
        want = select_schedule(pp, vpp).loss_rank
        sched = build_schedule("interleaved" if vpp and vpp > 1 else "1f1b", pp, 2 * pp, vpp if vpp and vpp > 1 else None)
        assert want == (sched.stages - 1) % pp
        if got != want:
            fail(f"production_log_rank({pp}, {vpp}) is {describe(got)}: log (or broadcast from) the rank holding the "
                 f"last virtual stage, rank {want}")
    if choice not in PRODUCTION:
        fail(f"production_op is {describe(choice)}; choose from {sorted(PRODUCTION)}")
    if PRODUCTION[choice]:
        fail(f"production_op {choice!r}: {PRODUCTION[choice]}")
