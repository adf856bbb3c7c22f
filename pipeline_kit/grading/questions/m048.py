"""M048 (lab 6): where the loss lives -- the last stage computes it, scales it by 1/M, and the log needs its
own reduction.

Gradients are compared with the kit's ``reference_grads`` (one process, the whole model), the logged loss
with the kit's own computation and with what a real run printed.
"""

from __future__ import annotations

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
from ..labs import grader_runs
from ..labs.live import (  # noqa: F401 -- live-object checks (live.py)
    check_last_stage,
    check_log_tensor,
    check_scaling,
    check_vocab_parallel,
)

PRODUCTION = {
    "broadcast_from_last_stage": None,
    "all_reduce_max": "the seeds' trick: wrong for a negative loss and, with DP > 1, it logs the largest replica",
    "all_reduce_sum_over_world": "with DP > 1 it logs the sum over replicas, not their mean",
    "all_gather_logits_to_rank0": "moves s*b*V logits per microbatch to compute a number the last stage already has",
}


# -- M048 ----------------------------------------------------------------------------------------
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
    if run_args is not None:  # the notebook's run; while grading, the grader's own run of GRAD_RUN
        run = grader_runs.logged_loss_run(run)
        todo.insert(0, cfg_from_run(grader_runs.GRAD_RUN))
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
                fail(f"{what} is {got:g}: the other ranks' zeros take part in the reduction too, and "
                     f"0 > {max(dp_losses):g}")
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
        interleaved = bool(vpp and vpp > 1)
        sched = build_schedule("interleaved" if interleaved else "1f1b", pp, 2 * pp, vpp if interleaved else None)
        assert want == sched.rank_of(sched.stages - 1)
        if got != want:
            fail(f"production_log_rank({pp}, {vpp}) is {describe(got)}: log (or broadcast from) the rank holding the "
                 f"last virtual stage, rank {want}")
    if choice not in PRODUCTION:
        fail(f"production_op is {describe(choice)}; choose from {sorted(PRODUCTION)}")
    if PRODUCTION[choice]:
        fail(f"production_op {choice!r}: {PRODUCTION[choice]}")
