"""Which framework runs a plan, and how: the families each one implements and the pick as its own arguments.

Why: a pick is only useful if the user's framework can run it and the user can type it in.  Megatron-Core 0.19
(``megatron/core/pipeline_parallel/schedules.py``) runs 1F1B and, with a virtual pipeline, Megatron's interleaved
1F1B: its ``get_forward_backward_func`` chooses between them and no pipelining at pp = 1 (the kit's 1F1B at
pp = 1); it has no zero-bubble, breadth-first or V schedule.  PyTorch 2.13's ``torch.distributed.pipelining``
has a class for every family the kit has but ZB-H1 (tests/test_torch_pipelining_orders.py holds the kit's
orders to them).

:func:`megatron_args` writes the pick as Megatron-LM's command-line flags (checked against
``megatron/training/arguments.py`` at ``core_v0.19.0`` and its dataclass-made parallelism flags): the layout
flag where the split is not Megatron's even one (the kit's layout strings are Megatron's format; its even split
needs the stages to divide the layers), else the virtual stages per rank.  :func:`torch_args` gives the schedule
class and what each rank builds.
"""

from __future__ import annotations

from ..layout.balance import even_split
from ..schedules import FAMILIES, build_schedule

FRAMEWORKS = {
    "megatron": ("1f1b", "interleaved"),
    "torch": ("gpipe", "1f1b", "interleaved", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"),
    "any": tuple(FAMILIES),
}
TORCH_CLASSES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B",
                 "looped-bfs": "ScheduleLoopedBFS", "interleaved-zb": "ScheduleInterleavedZeroBubble",
                 "zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}


def unsupported(schedule: str) -> int:
    """How many of the named frameworks cannot run ``schedule`` (0 for 1F1B and interleaved): a tie between two
    designs goes to the one more frameworks run."""
    return sum(schedule not in families for name, families in FRAMEWORKS.items() if name != "any")


def needs_layout(cand, layers: int) -> bool:
    """Whether Megatron needs the layout written out (``--pipeline-model-parallel-layout``) for ``cand``: its own
    even split needs the stages to divide the layers, and the candidate to use that split."""
    stages = cand.pp * cand.chunks
    return cand.layout is not None and (layers % stages != 0 or cand.layout != str(even_split(layers, stages)))


def megatron_args(cand, search) -> list[str] | None:
    """The pick as Megatron-LM's flags (parallelism, batch, recomputation, optimizer, overlap); None for a family
    Megatron does not run.  The model's own flags (layers, hidden size, ...) are the user's already."""
    if cand.schedule not in FRAMEWORKS["megatron"] or cand.layout is None:
        return None
    tr, m = search.training, search.model
    args = ["--tensor-model-parallel-size", str(tr.tp), "--pipeline-model-parallel-size", str(cand.pp)]
    if tr.tp > 1:
        args.append("--sequence-parallel")
    if needs_layout(cand, m.layers):
        args += ["--pipeline-model-parallel-layout", cand.layout]
    elif cand.chunks > 1:
        args += ["--num-virtual-stages-per-pipeline-rank", str(cand.chunks)]
    args += ["--micro-batch-size", str(m.micro_batch_size), "--global-batch-size", str(search.global_batch)]
    if tr.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif tr.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if tr.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if tr.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
    if tr.attention == "unfused":  # (fused is Megatron's default: --attention-backend auto)
        args += ["--attention-backend", "unfused"]
    return args


def torch_args(cand, search) -> dict | None:
    """The pick for ``torch.distributed.pipelining``: the schedule class, ``n_microbatches``, and each rank's
    stages with their layout pieces; None for a family torch has no class for (ZB-H1)."""
    if cand.schedule not in TORCH_CLASSES or cand.layout is None:
        return None
    sched = build_schedule(cand.schedule, cand.pp, cand.microbatches,
                           cand.chunks if FAMILIES[cand.schedule].chunks != "one" else None)
    pieces = cand.layout.split("|")
    ranks = [{"rank": r, "stages": list(sched.stages_of(r)), "layout": [pieces[k] for k in sched.stages_of(r)]}
             for r in range(cand.pp)]
    return {"schedule_class": TORCH_CLASSES[cand.schedule], "n_microbatches": cand.microbatches,
            "num_stages": cand.pp * cand.chunks, "style": "v" if sched.placement == "v" else "loop",
            "data_parallel": cand.dp, "tensor_parallel": search.training.tp, "ranks": ranks}


def run_lines(cand, search) -> list[str]:
    """How to run the pick, for the text report: Megatron's flags and/or torch's class, whichever apply."""
    lines = []
    flags = megatron_args(cand, search)
    if flags is not None:
        lines.append("megatron-lm: " + " ".join(f'"{a}"' if "|" in a or "*" in a else a for a in flags))
    spec = torch_args(cand, search)
    if spec is not None:
        stages = "; ".join(f"rank {r['rank']}: stages {r['stages']}" for r in spec["ranks"][:4])
        more = f"; ... ({len(spec['ranks'])} ranks)" if len(spec["ranks"]) > 4 else ""
        lines.append(f"torch.distributed.pipelining: {spec['schedule_class']}(stages, n_microbatches="
                     f"{spec['n_microbatches']}); {stages}{more}")
    if not lines:
        lines.append(f"{cand.schedule}: neither Megatron-LM nor torch.distributed.pipelining runs this family; "
                     "pipeline_kit.run does (choose --framework to plan for yours)")
    return lines
