"""M048 (lab 6): where the loss lives -- the last stage computes it, scales it by 1/M, and the log needs its
own reduction.

Gradients are compared with the kit's ``reference_grads`` (one process, the whole model), the logged loss
with the kit's own computation and with what a real run printed.
"""

from __future__ import annotations

import re

from ...schedules import build_schedule, select_schedule
from .common import (
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_number,
    expect_type,
    fail,
)
from .m047 import cfg_from_run, draw_cfg, small_cfg
from . import grader_runs
from ...grading.parts import Parts
from .live import (  # noqa: F401 -- live-object checks (live.py)
    check_last_stage,
    check_log_tensor,
    check_scaling,
    check_vocab_parallel,
)

MAX_TRICK = book("stages", "Getting the loss to the log: the question bank's MAX trick")  # where the book teaches it
THREE_PATHS = book("stages", "Three paths that must not be confused")
PRODUCTION = {
    "broadcast_from_last_stage": None,
    "all_reduce_max": "the interview question bank's trick: wrong for a negative loss and, with DP > 1, it logs "
                      "the largest replica",
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
        fail(f"{what} is {got:.4f}, not the mean over every replica's microbatches {MAX_TRICK}")


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
            fail(f"{what}: rank 0 has no loss -- it holds the embedding, not the output layer. Which rank holds "
                 f"the last stage? {THREE_PATHS}")
        fail(f"{what} is {describe(list(got))}: only the rank that holds the last stage has a loss to contribute "
             f"{THREE_PATHS}")


def max_trick(dp_losses, pp, op):
    """What rank 0 logs after all_reduce(op) over the world: pp ranks per replica, only last stages non-zero."""
    import torch
    values = torch.tensor([0.0] * ((pp - 1) * len(dp_losses)) + list(dp_losses), dtype=torch.float64)
    return float(values.max() if op == "max" else values.sum())


@check
def check_max_trick(logged_by, max_ok, cases, pp=4) -> None:
    """Two answers, each its own share: ``logged_by``, and ``max_trick_ok`` -- judged against the student's own
    ``logged_by`` where that one is wrong, so a mistake there costs its points once."""
    parts = Parts()
    own_max = {}  # the student's logged_by("max", ...) on each case, where it is wrong
    with parts.part():
        wrong = None
        for dp_losses in cases:
            for op in ("max", "sum"):
                what = f"logged_by({op!r}, {dp_losses}, {pp})"
                got = expect_number(call(logged_by, op, list(dp_losses), pp, name="logged_by"), what)
                want = max_trick(dp_losses, pp, op)
                if close(got, want, rel=1e-9, abs_=1e-12):
                    continue
                if op == "max":
                    own_max[tuple(dp_losses)] = got
                if wrong is not None:
                    continue
                if op == "max" and close(got, max(dp_losses), rel=1e-9):
                    wrong = (f"{what} is {got:g}: the other ranks' zeros take part in the reduction too -- which "
                             f"value wins? {MAX_TRICK}")
                elif op == "sum" and close(got, sum(dp_losses) * pp, rel=1e-9) and any(dp_losses):
                    wrong = f"{what} is {got:g}: only the last stage of each replica puts its loss in, the others 0"
                else:
                    wrong = f"{what} is {got:g}, not what rank 0 gets (every rank's value enters the all-reduce)"
        if wrong is not None:
            fail(wrong)
    with parts.part():
        for dp_losses in cases:
            mean = sum(dp_losses) / len(dp_losses)
            want_ok = close(max_trick(dp_losses, pp, "max"), mean, rel=1e-12, abs_=1e-12)
            got_ok = call(max_ok, list(dp_losses), name="max_trick_ok")
            if not isinstance(got_ok, bool):
                fail(f"max_trick_ok({list(dp_losses)}) is {describe(got_ok)}; give a bool")
            own = own_max.get(tuple(dp_losses))
            if got_ok is want_ok or (own is not None and got_ok is close(own, mean, rel=1e-12, abs_=1e-12)):
                continue
            why = ("a negative loss loses to the other ranks' zeros" if min(dp_losses) < 0 else
                   "with several data-parallel replicas MAX logs the largest, not the mean" if len(set(dp_losses)) > 1
                   else "one non-negative value and zeros: MAX returns it")
            fail(f"max_trick_ok({list(dp_losses)}) is {describe(got_ok)}: {why} {MAX_TRICK}")
    parts.done()


@check
def check_production(log_rank, choice, cases) -> None:
    """Two answers, each its own share: the logging rank, and the production operation."""
    parts = Parts()
    with parts.part():
        for pp, vpp in cases:
            got = call(log_rank, pp, vpp, name="production_log_rank")
            want = select_schedule(pp, vpp).loss_rank
            interleaved = bool(vpp and vpp > 1)
            sched = build_schedule("interleaved" if interleaved else "1f1b", pp, 2 * pp, vpp if interleaved else None)
            assert want == sched.rank_of(sched.stages - 1)
            if got != want:
                why = (" (that is the last virtual stage's index; give the pipeline rank that holds it)"
                       if vpp and got == pp * vpp - 1 else "")
                fail(f"production_log_rank({pp}, {vpp}) is {describe(got)}: log (or broadcast from) the rank holding "
                     f"the last virtual stage{why} {MAX_TRICK}")
    with parts.part():
        if choice not in PRODUCTION:
            fail(f"production_op is {describe(choice)}; give one key of PRODUCTION, a str: {sorted(PRODUCTION)}")
        if PRODUCTION[choice]:
            fail(f"production_op {choice!r}: {PRODUCTION[choice]}")
    parts.done()


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_pipeline_cases(rng) -> list:
    """(cfg, stages, M) for the pipeline step: a tiny model on one to three stages.  Fixed first: one stage (no
    P2P at all: a step that assumes a next stage fails here)."""
    def make(r):
        cfg = draw_cfg(r, r.randint(1, 3))
        return cfg, r.randint(1, cfg.layers), r.randint(1, 4)
    return drawn(rng, 2, make, fixed=[(small_cfg(layers=2), 1, 2)])


def hidden_logged_cases(rng) -> list:
    """(cfg, mbs, M).  Fixed first: one sequence per microbatch over three microbatches."""
    return drawn(rng, 1, lambda r: (draw_cfg(r, r.randint(1, 4)), r.randint(1, 3), r.randint(1, 4)),
                 fixed=[(small_cfg(layers=2, seed=3), 1, 3)])


def _losses(r, n: int) -> list[float]:
    """Losses in halves, so that sums and means are exact (the checks compare a max with a mean)."""
    return [r.randint(-4, 16) / 2 for _ in range(n)]


def hidden_dp_cases(rng) -> list:
    """Per-replica microbatch losses (same M everywhere); the fixed case has three replicas of one microbatch."""
    return drawn(rng, 2, lambda r: [_losses(r, m) for m in [r.randint(1, 4)] * r.randint(1, 4)],
                 fixed=[[[1.0], [2.0], [6.0]]])


def hidden_vocab_cases(rng) -> list:
    """(tokens, vocab, tp, scale, seed): tp divides the vocabulary; the fixed cases are tp = 1 and huge logits."""
    def make(r):
        tp = r.choice([1, 2, 4, 8])
        return r.randint(1, 16), tp * r.randint(2, 16), tp, r.choice([0.5, 3.0, 100.0, 1e4, 1e5]), r.randrange(1000)
    return drawn(rng, 2, make, fixed=[(3, 10, 1, 2.0, 4), (4, 64, 8, 1e5, 3)])


def hidden_owner_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (r.randint(2, 16), r.randint(1, 40) / 4), fixed=[(1, 7.0)])


def hidden_max_cases(rng) -> list:
    """Data-parallel last-stage losses: negative, zero, equal or not; the fixed ones are the edge of each kind."""
    return drawn(rng, 3, lambda r: _losses(r, r.randint(1, 4)), fixed=[[-1.0, -1.0], [1.5, 1.5], [0.0]])


def hidden_production_cases(rng) -> list:
    return drawn(rng, 3, lambda r: (r.randint(2, 16), r.choice([None, None, r.randint(2, 4)])), fixed=[(3, 4)])
