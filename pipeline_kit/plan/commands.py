"""``python -m pipeline_kit plan``: the configuration to run for a model on N GPUs, with its reason.

Why a command: the question a candidate is asked last -- "which pipeline configuration, and how do you know?" --
deserves the same answer the book gives, computed, with every refusal said in words and the winner's numbers
reproducible by ``simulate``.  Every bad argument is one line and exit 2, checked (the plot's path too) before
the search.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ..argtypes import UsageError, int_at_most, non_negative_float, positive_float
from ..inputs import check_output_path, strict_json
from ..layout.costs import PRESETS, model_params
from ..layout.commands import _config
from ..layout.balance import ItemTimes
from ..layout.measure import TraceError, measured_items
from ..layout.spec import LayoutError
from ..schedules import FAMILIES
from .explain import explain
from .frameworks import FRAMEWORKS, megatron_args, run_lines, torch_args
from .memory import ATTENTION, OPTIMIZERS, RECOMPUTE, Training
from .search import GB, TOLERANCE, Hardware, PlanError, Search, describe_search, plan

GPUS = int_at_most("MAX_GPUS", "GPUs")
COUNT = int_at_most("MAX_MODEL_DIM", "")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:  # (nan fails both)
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 up to 1, such as 0.02 for 2 %; got {text[:40]!r}")
    return value


def _families(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in FAMILIES]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(FAMILIES)}; got "
                                         f"{text[:40]!r}")
    return names


def add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="MODEL_OR_PRESET", required=True,
                   help=f"model: a preset ({', '.join(PRESETS)}) or a JSON file of ModelSpec fields")
    p.add_argument("--gpus", type=GPUS, required=True, help="GPUs in all (tp x pp x dp)")
    p.add_argument("--gpu-memory-gb", type=positive_float, required=True, help="memory of one GPU, in GB (1e9 bytes)")
    p.add_argument("--global-batch", type=COUNT, default=None,
                   help="sequences per step (default 2 x data-parallel ranks at pp=1 x micro-batch size)")
    p.add_argument("--micro-batch-size", type=COUNT, default=None,
                   help="sequences per microbatch (default: the model's)")
    p.add_argument("--tflops", type=positive_float, default=400.0, help="achieved TFLOP/s per GPU (default 400)")
    p.add_argument("--trace", metavar="FILE",
                   help="per-layer times from a pipeline_kit.run --trace of this model (same micro-batch size) "
                        "instead of FLOPs at --tflops")
    p.add_argument("--p2p-gbps", type=positive_float, default=50.0,
                   help="GB/s of a point-to-point link, also the data-parallel ring's (default 50)")
    p.add_argument("--p2p-latency-us", type=non_negative_float, default=10.0,
                   help="microseconds per transfer (default 10)")
    p.add_argument("--tp-gbps", type=positive_float, default=300.0,
                   help="GB/s of tensor parallelism's collectives inside a node (default 300)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="adam (12 bytes/param of state) or sgd")
    p.add_argument("--tp", type=int_at_most("MAX_RANKS", "ranks"), default=1,
                   help="tensor-parallel size with sequence parallelism, fixed (default 1)")
    p.add_argument("--recompute", choices=RECOMPUTE, default="none", help="activation recomputation (default none)")
    p.add_argument("--attention", choices=ATTENTION, default="fused",
                   help="fused (flash) attention keeps no attention scores, Megatron-Core 0.19's default; unfused "
                        "keeps Korthikanti et al.'s 5as/h score term (default fused)")
    p.add_argument("--distributed-optimizer", action="store_true", help="shard the optimizer state over dp")
    p.add_argument("--overlap-grad-reduce", action="store_true",
                   help="the data-parallel reduce starts in the last microbatch's backward (Megatron's flag; off "
                        "by default, as there)")
    p.add_argument("--framework", choices=list(FRAMEWORKS), default="any",
                   help="keep the families this framework runs (megatron: 1f1b, interleaved; torch: all but "
                        "zb-h1) and print the pick as its arguments (default any)")
    p.add_argument("--tolerance", type=_fraction, default=TOLERANCE, metavar="FRACTION",
                   help=f"step times within this fraction of the fastest tie; the simplest of them is picked "
                        f"(default {TOLERANCE:g}, {100 * TOLERANCE:g} %%)")
    p.add_argument("--schedules", type=_families, default=None, metavar="A,B,...",
                   help=f"families to try (default all: {','.join(FAMILIES)})")
    p.add_argument("--top", type=int_at_most("MAX_MODEL_DIM", ""), default=5, help="candidates to list (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument("--plot", metavar="FILE", help="draw step time against worst-rank memory (.png or .svg)")
    p.add_argument("--verify", type=int_at_most("MAX_VERIFY_RUNS", "runs"), default=0, metavar="K",
                   help="run the top K (at most MAX_VERIFY_RUNS = 8) for real with torchrun and compare")
    p.add_argument("--synthetic-compute", action="store_true",
                   help="with --verify: time compute by waits of the predicted per-stage times (the CPU default)")


def measured_from_args(args: argparse.Namespace, spec) -> ItemTimes | None:
    """``--trace``'s per-item seconds, checked against the plan: a trace times the runtime, which has no tensor
    parallelism, so it cannot stand for ``--tp`` > 1."""
    if not args.trace:
        return None
    if args.tp > 1:
        raise UsageError(f"argument --trace: a trace times the kit's runtime, which has no tensor parallelism; it "
                         f"cannot stand for --tp {args.tp} (plan with --tp 1, or without --trace)")
    try:
        return measured_items(args.trace, spec.layers)[3]
    except (TraceError, LayoutError) as exc:
        raise UsageError(f"argument --trace: {exc}") from None


def search_from_args(args: argparse.Namespace) -> Search:
    spec = _config(args.config)
    if args.micro_batch_size is not None:
        spec = replace(spec, micro_batch_size=args.micro_batch_size)
    measured = measured_from_args(args, spec)
    try:
        hw = Hardware(args.gpus, args.gpu_memory_gb * GB, args.tflops, args.p2p_gbps, args.p2p_latency_us,
                      args.tp_gbps)
        training = Training(args.optimizer, args.tp, args.recompute, args.distributed_optimizer,
                            args.overlap_grad_reduce, args.attention)
        return plan(spec, hw, training, args.global_batch, args.schedules, model_name=args.config,
                    progress=_progress if sys.stderr.isatty() else None, framework=args.framework,
                    tolerance=args.tolerance, measured=measured, cost_source=_cost_source(args))
    except (PlanError, LayoutError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if sys.stderr.isatty():
            print("\r\033[K", end="", file=sys.stderr)


def _cost_source(args: argparse.Namespace) -> str:
    return f"measured per-layer times from {args.trace}" if args.trace else f"FLOPs at {args.tflops:g} TFLOP/s"


def _progress(done: int, total: int) -> None:
    print(f"\rplanning: {done}/{total} shapes", end="", file=sys.stderr, flush=True)


def report(search: Search, top: int) -> str:
    """The text report: the inputs, the top candidates, the refusals by kind, and why."""
    m, hw, tr = search.model, search.hardware, search.training
    params = model_params(m)
    lines = [f"plan: {search.model_name} ({m.layers} layers, hidden {m.hidden}, vocab {m.vocab}, seq {m.seq_len}; "
             f"{params / 1e9:.2f}B parameters) on {hw.gpus} GPUs x {hw.gpu_memory_bytes / GB:g} GB",
             f"      global batch {search.global_batch} x {m.seq_len} tokens, micro-batch {m.micro_batch_size}; "
             f"{tr.words()}; compute from {search.cost_source}, P2P {hw.p2p_gbps:g} GB/s + "
             f"{hw.p2p_latency_us:g} us",
             describe_search(search), ""]
    pick = search.best
    ranked = ([pick] if pick is not None else []) + [i for i in search.ranked if i != pick][:max(0, top - 1)]
    header = (f"{'#':>2}  {'schedule':<14} {'pp':>4} {'dp':>4} {'v':>2} {'M':>5} {'step ms':>9} {'tokens/s':>11} "
              f"{'bubble':>7} {'worst GB':>8}  layout")
    lines.append(header)
    for k, i in enumerate(ranked, 1):
        c = search.candidates[i]
        layout = c.layout if len(c.layout) <= 40 else c.layout[:37] + "..."
        mark = "*" if i == pick else " "
        lines.append(f"{k:>2}{mark} {c.schedule:<14} {c.pp:>4} {c.dp:>4} {c.chunks:>2} {c.microbatches:>5} "
                     f"{1e3 * c.step_time_s:>9.2f} {c.tokens_per_s:>11,.0f} {100 * c.bubble_fraction:>6.1f}% "
                     f"{c.worst_memory_bytes / GB:>8.2f}  {layout} ({c.layout_kind})")
    if not ranked:
        lines.append("    (no candidate fits)")
    else:
        lines.append(f"* the pick: the simplest of the candidates within {100 * search.tolerance:g} % of the fastest "
                     "(--tolerance); the others by step time")
    refused = [c for c in search.candidates if not c.fits]
    if refused:
        lines.append("")
        lines.append("refused (first of each kind):")
        seen = set()
        for c in refused:
            if c.refusal not in seen:
                seen.add(c.refusal)
                lines.append(f"  {c.refusal:<7} {c.label()}: {c.why_not}")
    why = explain(search)
    lines += ["", "why: " + why.text]
    if why.best is not None:
        best = search.candidates[why.best]
        lines.append("check it: python -m pipeline_kit simulate " + " ".join(best.simulate_args())
                     + (("  (the all-reduce hides behind the last backward)" if best.allreduce_time_s == 0 else
                         f"  (then add the all-reduce, {1e3 * best.allreduce_time_s:.2f} ms)") if best.dp > 1 else ""))
        lines += ["run it: " + line for line in run_lines(best, search)]
    lines.append("memory counts weights, fp32 grads, optimizer state, peak activations (+ W's kept gradients) and "
                 "P2P buffers; not the CUDA context or fragmentation: keep a few GB free")
    return "\n".join(lines)


def to_json(search: Search) -> dict:
    """The ``--json`` document (its fields are the issue's contract; ``best`` indexes ``candidates``)."""
    why = explain(search)
    return {"model": {"name": search.model_name, **search.model.to_dict()}, "gpus": search.hardware.gpus,
            "gpu_memory_bytes": search.hardware.gpu_memory_bytes, "global_batch": search.global_batch,
            "training": {"optimizer": search.training.optimizer, "tp": search.training.tp,
                         "recompute": search.training.recompute,
                         "distributed_optimizer": search.training.distributed_optimizer,
                         "overlap_grad_reduce": search.training.overlap_grad_reduce,
                         "attention": search.training.attention},
            "hardware": {"tflops": search.hardware.tflops, "p2p_gbps": search.hardware.p2p_gbps,
                         "p2p_latency_us": search.hardware.p2p_latency_us, "tp_gbps": search.hardware.tp_gbps},
            "framework": search.framework, "tolerance": search.tolerance, "fastest": search.fastest,
            "cost_source": search.cost_source,
            "ties": search.ties,
            "megatron_args": megatron_args(search.candidates[why.best], search) if why.best is not None else None,
            "torch_args": torch_args(search.candidates[why.best], search) if why.best is not None else None,
            "search_seconds": search.seconds,
            "candidates": [c.to_dict() for c in search.candidates], "best": why.best, "why": why.text,
            "runner_up": why.runner_up, "baseline": why.baseline,
            "deciding_factor": {"vs_runner_up": why.factor_vs_runner_up, "vs_baseline": why.factor_vs_baseline}}


def cmd_plan(args: argparse.Namespace, save_plot) -> int:
    """The ``plan`` command; ``save_plot(search, path)`` draws ``--plot`` (the command line hands in the drawing
    layer's: the planner sits below the drawings and imports none of them)."""
    if args.plot:
        check_output_path(args.plot, "argument --plot", inputs=[args.config] + ([args.trace] if args.trace else []))
        if not args.plot.lower().endswith((".png", ".svg", ".pdf")):
            raise UsageError(f"argument --plot: {args.plot!r} should end in .png, .svg or .pdf")
    if args.synthetic_compute and not args.verify:
        raise UsageError("argument --synthetic-compute: it only applies with --verify K")
    search = search_from_args(args)
    verified = None
    if args.verify:
        from .verify import verify  # torch and torchrun only when asked for
        try:
            verified = verify(search, args.verify, synthetic=args.synthetic_compute or None,
                              log=sys.stderr if args.json else sys.stdout)
        except PlanError as exc:  # a model or plan the runtime would not run as planned: refused before any run
            raise UsageError(str(exc)) from None
    if args.plot:
        try:
            save_plot(search, args.plot)
        except OSError as exc:  # a disk that filled up during the search: one line, and no half-written file
            raise UsageError(f"argument --plot: cannot write {args.plot!r}: {exc.strerror or exc}") from None
    if args.json:
        doc = to_json(search)
        if verified is not None:
            doc["verify"] = verified
        print(strict_json(doc))
    else:
        print(report(search, args.top))
        if args.plot:
            print(f"plot: {args.plot}")
    return 1 if verified is not None and any(r["error"] for r in verified["runs"]) else 0  # a run that failed
