"""Gradients: the single-process reference, the comparison, and tied-embedding synchronisation.

The pipeline's promise is that splitting a step into stages and microbatches changes *when*
things are computed, never *what*: after one step every parameter's gradient must equal the
gradient of the same model run in one process on the same microbatches (same 1/M loss scaling).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..layout.costs import ModelSpec
from .model import GPT, StageModule, lm_loss


def reference_grads(cfg: ModelSpec, tokens: list, targets: list) -> dict[str, torch.Tensor]:
    """Gradients of the whole model in one process: microbatch by microbatch, loss scaled by 1/M."""
    model = GPT(cfg).to(tokens[0].device)
    microbatches = len(tokens)
    for x, y in zip(tokens, targets):
        (lm_loss(model(x), y) / microbatches).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def compare_grads(stages: dict[int, StageModule], reference: dict[str, torch.Tensor], tied: bool) -> dict:
    """Largest relative error of any local parameter's gradient, and how many are bitwise equal."""
    worst, worst_name, bitwise, total = 0.0, None, 0, 0
    for module in stages.values():
        for name, p in module.named_parameters():
            ref_name = "embedding.tok.weight" if tied and name == "head.out.weight" else name
            ref = reference[ref_name].to(p.grad.device)
            total += 1
            if torch.equal(p.grad, ref):
                bitwise += 1
                continue
            err = float((p.grad - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
            if err > worst:
                worst, worst_name = err, name
    return {"max_rel_error": worst, "worst": worst_name, "bitwise": bitwise, "total": total}


def tied_copies(stages: dict[int, StageModule]) -> list[torch.nn.Parameter]:
    """The local copies of a tied embedding: the input embedding and/or the output layer weight."""
    out = []
    for module in stages.values():
        if module.embedding is not None:
            out.append(module.embedding.tok.weight)
        if module.head is not None and module.head.out.weight is not (out[-1] if out else None):
            out.append(module.head.out.weight)
    return out


def sync_tied_grads(stages: dict[int, StageModule], group) -> None:
    """Sum the gradients of the tied copies (first and last stage), like Megatron's embedding group.

    Both copies start equal and receive the same summed gradient, so the optimizer keeps them equal.
    ``group`` is the process group of the ranks holding the first and last stage (None: one rank).
    """
    copies = tied_copies(stages)
    if not copies:
        return
    total = copies[0].grad.clone()
    for p in copies[1:]:
        total += p.grad
    if group is not None:
        dist.all_reduce(total, group=group)
    for p in copies:
        p.grad.copy_(total)
