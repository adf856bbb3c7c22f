"""``python -m pipeline_kit layout | balance | speedup``: layouts and imbalance from the command line."""

from __future__ import annotations

import argparse
from dataclasses import replace

from ..argtypes import UsageError, int_at_most, non_negative_float, positive_float
from ..limits import LimitError
from ..schedules import ScheduleConfigError
from .balance import balance, item_times_from_flops, plan_for
from .costs import PRESETS, ModelSpec, boundary_bytes, format_table, load_model_spec, stage_costs
from .measure import TraceError, format_services, measured_items, predict_from_trace
from .spec import LayoutError, even_layout, parse_layout, uneven_layout
from .speedup import decompose_speedup, format_factors

PRESET_HELP = "; ".join(f"{name}: {text}" for name, (_, text) in PRESETS.items())
RANKS = int_at_most("MAX_RANKS", "ranks")
CHUNKS = int_at_most("MAX_CHUNKS", "chunks per rank")
MICROBATCHES = int_at_most("MAX_MICROBATCHES", "microbatches")
LAYERS = int_at_most("MAX_LAYERS", "layers")


def _config(name: str | None, layers: int | None = None) -> ModelSpec:
    if name is not None and not name.strip():  # not the default model: an empty value is a mistake
        raise UsageError(f"argument --config: {name!r} is empty; give a preset ({', '.join(PRESETS)}) or a JSON file")
    try:
        spec = load_model_spec(name) if name is not None else ModelSpec()
    except LayoutError as exc:
        raise UsageError(str(exc)) from None
    if name is None and layers is not None:
        spec = replace(spec, layers=layers)
    return spec


def add_layout_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("layout", nargs="?", metavar="LAYOUT",
                   help="e.g. 'Et*2|t*2|t*2|t*2L'; leave it out for Megatron's even (or --first/--last) split")
    p.add_argument("--pp", type=RANKS, required=True, help="pipeline-parallel size: stage k -> rank k %% pp")
    p.add_argument("--config", metavar="FILE_OR_PRESET", help=f"model (JSON file or preset). {PRESET_HELP}")
    p.add_argument("--chunks", type=CHUNKS, default=1, help="virtual stages per rank for a generated split")
    p.add_argument("--first-stage-layers", type=LAYERS, help="decoder layers on the first stage (uneven split)")
    p.add_argument("--last-stage-layers", type=LAYERS, help="decoder layers on the last stage (uneven split)")
    p.add_argument("--microbatches", type=MICROBATCHES, default=16, help="for the P2P volume per step (default 16)")


def cmd_layout(args: argparse.Namespace) -> int:
    try:
        if args.layout is not None:  # an empty LAYOUT is an error, not the even split
            layout = parse_layout(args.layout)
            spec = _config(args.config, layout.num_layers)
            layout.check(args.pp, spec.layers)
        else:
            spec = _config(args.config)
            stages = args.pp * args.chunks
            if args.first_stage_layers or args.last_stage_layers:
                layout = uneven_layout(spec.layers, stages, args.first_stage_layers, args.last_stage_layers)
            else:
                layout = even_layout(spec.layers, stages)
    except LayoutError as exc:
        raise UsageError(f"argument LAYOUT: {exc}") from None
    print(f"layout {layout}  ({layout.num_stages} stages on pp={args.pp}: {layout.chunks(args.pp)} chunk(s) per rank; "
          f"{spec.layers} layers, hidden {spec.hidden}, vocab {spec.vocab}, seq {spec.seq_len}, "
          f"micro-batch {spec.micro_batch_size}, {spec.dtype_bytes}-byte activations)")
    print(format_table(stage_costs(layout, spec, args.pp), spec, args.microbatches, layout))
    return 0


def add_balance_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE_OR_PRESET", required=True,
                   help=f"model (JSON file or preset). {PRESET_HELP}")
    p.add_argument("--pp", type=RANKS, required=True)
    p.add_argument("--chunks", type=CHUNKS, default=1, help="virtual stages per rank (default 1)")
    p.add_argument("--microbatches", type=MICROBATCHES, default=None, help="microbatches per step (default 2 * pp)")
    p.add_argument("--trace", metavar="FILE", help="per-layer times from a pipeline_kit.run trace instead of FLOPs")
    p.add_argument("--tflops", type=positive_float, default=100.0,
                   help="achieved TFLOP/s per device for the FLOPs model (default 100)")
    p.add_argument("--p2p-latency", type=non_negative_float, default=0.0, help="seconds per transfer (default 0)")


def cmd_balance(args: argparse.Namespace) -> int:
    spec = _config(args.config)
    if args.trace:
        try:
            trace, run_layout, services, items = measured_items(args.trace, spec.layers)
            prediction = predict_from_trace(trace)
        except (TraceError, LayoutError) as exc:
            raise UsageError(f"argument --trace: {exc}") from None
        print(f"measured service times per stage (trace of {trace['schedule']}, layout {run_layout}):")
        print(format_services(services))
        print(f"simulated from these times: {prediction * 1e3:.1f} ms; measured makespan "
              f"{trace['makespan'] * 1e3:.1f} ms")
        items = items.scaled(1e3)
        source = "measured per-layer times"
    else:
        try:  # (a model so large that an item's time passes MAX_NUMBER: one line, not a traceback)
            items = item_times_from_flops(spec, args.tflops).scaled(1e3)
        except LayoutError as exc:
            raise UsageError(str(exc)) from None
        source = f"FLOPs at {args.tflops:g} TFLOP/s"
    try:
        result = balance(items, args.pp, args.chunks, args.microbatches, args.p2p_latency * 1e3)
    except (LayoutError, ScheduleConfigError) as exc:
        raise UsageError(str(exc)) from None
    microbatches = args.microbatches or 2 * args.pp
    print(f"balancing {spec.layers} layers over pp={args.pp} x {args.chunks} chunk(s), {microbatches} microbatches, "
          f"{source} (times in ms)")
    print(result.report())
    return 0


def add_speedup_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE_OR_PRESET", default="bank-pp8", help="model (default bank-pp8)")
    p.add_argument("--layout", help="layout (default: the even split)")
    p.add_argument("--pp", type=RANKS, default=8)
    p.add_argument("--microbatches", type=MICROBATCHES, default=16)
    p.add_argument("--measured", type=positive_float, help="the measured speedup over one device (e.g. 2.59)")
    p.add_argument("--tflops", type=positive_float, default=100.0, help="achieved TFLOP/s per device (default 100)")
    p.add_argument("--p2p-latency-us", type=non_negative_float, default=0.0, help="fixed cost per transfer, us")
    p.add_argument("--p2p-gbps", type=positive_float, default=None,
                   help="P2P bandwidth in GB/s (bytes/transfer / this)")


def cmd_speedup(args: argparse.Namespace) -> int:
    spec = _config(args.config)
    try:
        layout = parse_layout(args.layout) if args.layout is not None else even_layout(spec.layers, args.pp)
        layout.check(args.pp, spec.layers)
    except LayoutError as exc:
        raise UsageError(f"argument --layout: {exc}") from None
    if layout.num_stages != args.pp:
        raise UsageError("argument --layout: the decomposition is for one chunk per rank (pp stages)")
    try:
        plan = plan_for(layout, item_times_from_flops(spec, args.tflops), args.pp, args.microbatches)
    except (ScheduleConfigError, LimitError) as exc:
        raise UsageError(f"argument --microbatches: {exc}") from None
    latency = args.p2p_latency_us * 1e-6 + (boundary_bytes(spec) / (args.p2p_gbps * 1e9) if args.p2p_gbps else 0.0)
    rows = decompose_speedup(args.pp, args.microbatches, plan.stage_fwd, plan.stage_bwd, latency, args.measured)
    print(f"speedup of pp={args.pp}, M={args.microbatches} over one device, layout {layout}, {args.tflops:g} TFLOP/s, "
          f"P2P {latency * 1e6:.1f} us per transfer")
    print(format_factors(rows))
    return 0
