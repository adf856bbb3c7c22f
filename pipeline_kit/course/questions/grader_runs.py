"""Lab 6's real ``torchrun --check-grads`` job, launched by the grader itself (M047).

Why here and not in the notebook: a run the grade depends on must not come from the kernel, where ``torchrun``
or its output can be replaced.  The student's layout is fetched as data, checked, and run with the kit's own
runtime from this process.
"""

from __future__ import annotations

import re

from ...layout import ModelSpec
from .common import describe, expect_type, fail, student_layout

GRAD_RUN = ("--schedule", "1f1b", "-m", "4", "--steps", "1", "--layers", "6", "--hidden", "32", "--check-grads")


def spec_of(cfg, micro_batch_size: int = 2, dtype_bytes: int = 2) -> ModelSpec:
    return ModelSpec(vocab=cfg.vocab, seq_len=cfg.seq_len, hidden=cfg.hidden, heads=cfg.heads, layers=cfg.layers,
                     ffn_mult=cfg.ffn_mult, tie_embeddings=cfg.tie_embeddings, micro_batch_size=micro_batch_size,
                     dtype_bytes=dtype_bytes)


def cfg_from_run(run_args):
    """The GPTConfig a ``pipeline_kit.run`` command line builds, with its micro-batch size and M."""
    from ...run import build_parser
    from ...runtime.model import GPTConfig
    a = build_parser().parse_args(list(run_args))
    cfg = GPTConfig(vocab=a.vocab, seq_len=a.seq_len, hidden=a.hidden, heads=a.heads, layers=a.layers,
                    tie_embeddings=a.tie_embeddings, seed=a.seed)
    return cfg, a.micro_batch_size, a.microbatches


_runs: dict[tuple, object] = {}


def grader_run(layout_text: str | None):
    """The ``torchrun --check-grads`` job of :data:`GRAD_RUN` (with the student's layout), run by this process.

    Why here: a run the grade depends on must not come from the kernel, where ``torchrun`` or its output can
    be replaced.  Runs are cached by their arguments (the kit's own code on the same arguments gives the same
    output), so the gradient check and the loss check share one job.
    """
    from ...launch import torchrun
    args = (*GRAD_RUN, *(("--layout", layout_text) if layout_text else ()))
    if args not in _runs:
        _runs[args] = torchrun(4, *args, timeout=150)
    return _runs[args]


def _grading() -> bool:
    from ...grading import remote
    return remote._session is not None


def check_grad_run(layout_text, predicted, run=None, run_args=GRAD_RUN, pp: int = 4) -> None:
    """The student's layout, its predicted parameter counts, and a real 4-rank run of it with ``--check-grads``.

    While grading, the run is the grader's own (:func:`grader_run`) and ``run``/``run_args`` from the notebook
    are ignored; in the student's notebook the notebook's run gives instant feedback.
    """
    from ...layout import stage_costs
    grading = _grading()
    cfg, mbs, _ = cfg_from_run(GRAD_RUN if grading else tuple(run_args))
    lay = student_layout(layout_text, "my_layout", pp, cfg.layers)
    sizes = [len(s.layers) for s in lay.stages]
    if not (sizes[0] < max(sizes[1:-1]) and sizes[-1] < max(sizes[1:-1])):
        fail(f"my_layout gives the stages {sizes} decoder layers: the endpoint stages already carry the embedding and "
             "the output layer, so give each of them fewer decoder layers than the busiest middle stage")
    want = [c.params for c in stage_costs(lay, spec_of(cfg, mbs), pp)]
    expect_type(predicted, (list, tuple), "my_layout_params")
    if list(predicted) != want:
        fail(f"my_layout_params is {describe(list(predicted))}; stage_costs(parse_layout(my_layout), ModelSpec(...), "
             f"{pp}) counts the stages of that layout for the run's model (see `python -m pipeline_kit.run --help`)")
    if grading or not hasattr(run, "stdout"):
        run = grader_run(str(lay))
    out = run.stdout or ""
    if run.returncode != 0:
        err = (run.stderr or "").strip().splitlines()
        fail(f"the torchrun job failed (return code {run.returncode}): {err[-1] if err else 'no message'}")
    m = re.search(r"parameters per stage: ([\d, ]+)", out)
    printed = [int(x.replace(",", "")) for x in re.findall(r"[\d,]+\d", m.group(1))] if m else None
    if printed != want:
        fail(f"the run built stages with {printed} parameters, the layout predicts {want}")
    g = re.search(r"grads match the single-process reference: (\w+)", out)
    if not g or g.group(1) != "True":
        fail("the real run's gradients do not match the single-process reference: "
             f"{g.group(0) if g else 'no gradient check in its output (pass --check-grads)'}")


def logged_loss_run(run):
    """The run whose step-1 loss a student's ``logged_loss`` is compared with: the grader's own while grading."""
    if _grading() or not hasattr(run, "stdout"):
        cached = [r for args, r in _runs.items() if args[:len(GRAD_RUN)] == GRAD_RUN and r.returncode == 0]
        return cached[0] if cached else grader_run(None)
    return run
