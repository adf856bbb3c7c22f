"""``torchrun --nproc-per-node P -m pipeline_kit.run``: train a small GPT with any schedule, for real.

The pipeline size is the number of ranks.  Each rank builds only its own stages, walks its own
op list (:func:`pipeline_kit.runtime.executor.run_step`), and the optimizer steps after the
flush.  Rank 0 prints one line per step and a summary; ``--json`` / ``--trace`` write files, into room
rank 0 reserves before step 1 (:mod:`pipeline_kit.runtime.outputs`).
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
import traceback
from dataclasses import replace

from .argtypes import (
    DefaultsHelpFormatter,
    OneLineParser,
    float_list,
    int_at_most,
    one_line,
    positive_float,
    timeout_seconds,
)
from .limits import MAX_SEED
from .schedules import CHUNKED, SCHEDULES, ScheduleConfigError, build_schedule, describe, validate

MODEL_DIM = int_at_most("MAX_MODEL_DIM", "")
QUIET_RANK_WAIT_S = 10.0  # how long a rank other than 0 waits to be stopped before it reports a refusal itself


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="torchrun ... -m pipeline_kit.run",
                      description="Run a pipeline schedule on real processes (pp = number of ranks).",
                      formatter_class=DefaultsHelpFormatter)
    p.add_argument("--schedule", choices=list(SCHEDULES), default="1f1b", help="the schedule every rank runs")
    p.add_argument("--microbatches", "-m", type=int_at_most("MAX_MICROBATCHES", "microbatches"), default=8,
                   help="microbatches per step (M)")
    p.add_argument("--chunks", "-v", type=int_at_most("MAX_CHUNKS", "chunks per rank"), default=None,
                   help=f"model chunks per rank ({', '.join(CHUNKED)}; default 2)")
    p.add_argument("--layers", type=int_at_most("MAX_LAYERS", "layers"), default=8, help="decoder layers of the model")
    p.add_argument("--hidden", type=MODEL_DIM, default=64, help="hidden size h")
    p.add_argument("--heads", type=MODEL_DIM, default=4, help="attention heads")
    p.add_argument("--seq-len", type=MODEL_DIM, default=32, help="sequence length s")
    p.add_argument("--micro-batch-size", type=MODEL_DIM, default=2, help="sequences per microbatch b")
    p.add_argument("--vocab", type=MODEL_DIM, default=256, help="vocabulary size V")
    p.add_argument("--ffn-hidden", type=MODEL_DIM, default=None, help="the MLP's width (default 4 x hidden)")
    p.add_argument("--tie-embeddings", action="store_true", help="share the input embedding and the output layer")
    p.add_argument("--layout", metavar="LAYOUT",
                   help="Megatron-style layout, e.g. 'Et*3|t*2|t*2|tL': stage k on rank k %% pp, chunk k // pp "
                        "(on a V -- zbv, dualpipev -- stages pp..2pp-1 run back up from rank pp-1 to rank 0; "
                        "default: the even split)")
    p.add_argument("--seed", type=_seed, default=1234, help="seed of the weights and the data")
    p.add_argument("--steps", type=int_at_most("MAX_STEPS", "steps"), default=3, help="training steps")
    p.add_argument("--lr", type=positive_float, default=0.5, help="SGD learning rate")
    p.add_argument("--check-grads", action="store_true",
                   help="after step 1, compare every gradient with a single-process reference")
    p.add_argument("--synthetic-compute", type=float_list, default=None, metavar="F_MS,B_MS[,W_MS]",
                   help="replace compute by timed waits: forward / backward (/ weight-grad) ms of one microbatch "
                        "through a rank's whole share; each of v chunks waits 1/v")
    p.add_argument("--stage-costs", type=float_list, default=None, metavar="a,b,...",
                   help="with --synthetic-compute: a factor per rank (pp values) or per virtual stage (pp*chunks), "
                        "as simulate's --stage-costs")
    p.add_argument("--stage-bwd-costs", type=float_list, default=None, metavar="a,b,...",
                   help="with --stage-costs: the backward's own factors, as simulate's --stage-bwd-costs")
    p.add_argument("--trace", metavar="FILE", help="write every op's and P2P wait's start/end (last step) as JSON")
    p.add_argument("--json", metavar="FILE", help="write the run's summary as JSON")
    p.add_argument("--p2p-timeout", type=timeout_seconds, default=60.0, metavar="S",
                   help="seconds any P2P wait may take before the run is stopped with a diagnosis")
    p.add_argument("--verbose-p2p", action="store_true", help="print every send and receive as it happens")
    p.add_argument("--inject", metavar="FAULT", help="skip-send:rank=R,mb=K or crash:rank=R,mb=K")
    p.add_argument("--backend", choices=["gloo", "nccl"], default=None, help="default: chosen from the hardware")
    p.add_argument("--no-deallocate", action="store_true", help="keep sent outputs' data (to measure the saving)")
    p.add_argument("--send-shapes", action="store_true", help="send each tensor's shape first (variable shapes)")
    return p


def _seed(text: str) -> int:
    import argparse
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**63 - 1 (MAX_SEED), got {text[:30]!r}")
    return value


def refuse_before_starting(args, local_world: int) -> str | None:
    """What every rank refuses alike before any process group forms or any step runs: a backend the machine
    cannot give, and a model whose estimated memory passes ``MAX_RUN_MEMORY_BYTES``.  (The output paths are
    rank 0's to check and reserve: :func:`pipeline_kit.runtime.outputs.reserve_outputs`.)"""
    from .layout.costs import layer_activation_bytes, model_params
    from .limits import MAX_RUN_MEMORY_BYTES
    m = _model_spec(args)
    params = model_params(m)
    logits = m.seq_len * m.micro_batch_size * m.vocab * 4
    estimate = 3 * 4 * params + args.microbatches * (m.layers * layer_activation_bytes(m) + 2 * logits)
    if estimate > MAX_RUN_MEMORY_BYTES:
        return (f"the model needs about {estimate / 2**30:,.1f} GiB ({params:,} parameters; activations of "
                f"{args.microbatches} microbatches), more than the limit of {MAX_RUN_MEMORY_BYTES / 2**30:g} GiB "
                f"(MAX_RUN_MEMORY_BYTES): use a smaller --hidden, --seq-len, --vocab, --layers or --microbatches")
    import torch

    from .runtime.env import choose
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        choose(local_world, gpus, args.backend)
    except ValueError as exc:
        return f"argument --backend: {exc}"
    return None


def _say(env, text: str, file=sys.stdout) -> None:
    if env is None or env.rank == 0:
        print(text, file=file, flush=True)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    rank = 0  # until the environment says otherwise: a process that cannot tell its rank speaks at once

    def usage(message: str) -> int:
        # One line for the job: rank 0 says it and exits, and torchrun then stops the other ranks.  They
        # wait for that rather than exit first -- torchrun would stop rank 0 before it could say why --
        # and speak only if nobody stopped them (rank 0 is slow, or saw no problem).  A process whose variables
        # name no rank says it at once: only a launch by hand has such variables, and nobody stops its processes.
        if rank != 0:
            time.sleep(QUIET_RANK_WAIT_S)
        print(f"{parser.prog}: error: {one_line(message)}", file=sys.stderr, flush=True)
        return 2

    # Everything that can be checked without a process group is checked first, on every rank alike.
    from .runtime.env import EnvError, read_place
    try:
        place = read_place()
    except EnvError as exc:
        return usage(str(exc))
    rank, world = place.rank, place.world
    from .runtime.faults import Fault, FaultSpecError
    try:
        fault = Fault.parse(args.inject) if args.inject else None
    except FaultSpecError as exc:
        return usage(f"argument --inject: {exc}")
    if fault and fault.rank >= world:
        return usage(f"argument --inject: rank {fault.rank} does not exist (ranks 0..{world - 1})")
    if fault and fault.microbatch >= args.microbatches:
        return usage(f"argument --inject: microbatch {fault.microbatch} does not exist (0..{args.microbatches - 1})")
    layout = None
    if args.layout is not None:  # an empty --layout is an error, not the even split
        from .layout import LayoutError, parse_layout
        try:
            layout = parse_layout(args.layout, pp=world, layers=args.layers)
        except LayoutError as exc:
            return usage(f"argument --layout: {exc} (pp is the number of ranks, {world}; --layers {args.layers})")
        v = layout.chunks(world)
        if args.chunks not in (None, v):
            return usage(f"argument --chunks: {args.chunks} disagrees with the layout's {layout.num_stages} stages on "
                         f"{world} ranks ({v} chunk(s) per rank)")
        if v > 1 and args.schedule not in CHUNKED:
            return usage(f"argument --layout: {layout.num_stages} stages on {world} ranks means {v} chunks per rank, "
                         f"which needs a --schedule with chunks: {', '.join(CHUNKED)}")
        args.chunks = v if args.schedule in CHUNKED else None
    try:
        schedule = validate(build_schedule(args.schedule, world, args.microbatches, args.chunks))
    except ScheduleConfigError as exc:
        return usage(f"{exc} (pp is the number of ranks, {world})")
    synthetic = args.synthetic_compute
    if synthetic is not None and len(synthetic) not in (2, 3):
        return usage("argument --synthetic-compute: expected F_MS,B_MS or F_MS,B_MS,W_MS")
    if synthetic is not None and len(synthetic) == 3 and synthetic[2] > synthetic[1]:
        return usage("argument --synthetic-compute: W_MS is part of B_MS and cannot exceed it")
    if args.stage_bwd_costs is not None and args.stage_costs is None:
        return usage("argument --stage-bwd-costs: it goes with --stage-costs (the forward's factors); add it")
    if args.stage_costs is not None:
        from .sim.costs import CostError, scale_costs
        if synthetic is None:
            return usage("argument --stage-costs: it scales --synthetic-compute's times; add --synthetic-compute")
        try:
            scale_costs(1.0, 1.0, None, args.stage_costs, args.stage_bwd_costs, world, schedule.chunks)
        except CostError as exc:
            return usage(str(exc))
    if synthetic is not None and args.check_grads:
        return usage("--check-grads needs real compute; drop --synthetic-compute")
    if args.hidden % args.heads:
        return usage(f"argument --hidden: {args.hidden} is not divisible by --heads {args.heads}")
    if args.layers < schedule.stages:
        return usage(f"argument --layers: {args.layers} layers cannot fill {schedule.stages} pipeline stages "
                     f"(pp {world} x chunks {schedule.chunks}); use --layers {schedule.stages} or more")
    problem = refuse_before_starting(args, place.local_world)
    if problem:
        return usage(problem)
    # rank 0 writes the files, on its own node's file system: it checks them and holds their room before step 1
    from .inputs import InputError
    from .runtime.outputs import reserve_outputs, share_refusal
    reserved, refusal = None, None
    try:
        reserved = reserve_outputs(args, schedule) if rank == 0 else None
    except InputError as exc:
        refusal = str(exc)
    if refusal and world == 1:
        return usage(refusal)

    from .runtime.env import init_distributed
    env = None
    try:
        env = init_distributed(args.backend, args.p2p_timeout, place, say=usage)
        refusal = share_refusal(refusal) if world > 1 else None  # every rank learns rank 0's refusal, and stops
        if refusal:
            import torch.distributed as dist
            code = usage(refusal) if rank == 0 else 2
            dist.barrier()  # rank 0 has said it before any rank ends (torchrun would stop it otherwise)
            return code
        return _run(args, env, schedule, fault, layout, reserved)
    except EnvError as exc:
        return usage(str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure must end this rank now, loudly
        from .runtime.faults import InjectedCrash
        from .runtime.p2p import P2PTimeout
        who = f"[rank {env.rank if env else rank}]"
        if isinstance(exc, P2PTimeout):
            print(f"{who} P2P TIMEOUT: {exc}", file=sys.stderr, flush=True)
            code = 3
        elif isinstance(exc, InjectedCrash):
            print(f"{who} CRASH: {exc}", file=sys.stderr, flush=True)
            code = 4
        elif "Connection reset by peer" in str(exc) or "Connection closed by peer" in str(exc):
            gloo = " ".join(str(exc).split())  # the whole error, on one line
            print(f"{who} STOPPED: the connection to another rank was lost, so that rank ended first (if it failed "
                  f"by itself its own message is above; if it was killed, torchrun's summary names its exit code). "
                  f"gloo said: {gloo}", file=sys.stderr, flush=True)
            code = 5
        else:
            print(f"{who} ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        from .interrupts import remove_temporary_files
        remove_temporary_files()  # the outputs' reservations
        os._exit(code)  # skip destructors that could block on dead peers; torchrun stops the other ranks
    finally:
        if reserved is not None:
            reserved.release_all()


def _run(args, env, schedule, fault, layout, reserved) -> int:
    """One rank's job, top to bottom: build its stages, connect, run the steps, report."""
    import torch

    from .runtime.faults import inject
    from .runtime.p2p import P2P, measure_latency

    torch.set_num_threads(1)
    _say(env, env.describe())
    cfg = _model_spec(args)
    layout = layout or _default_layout(cfg, schedule)
    stages, stage_params = _build_stages(env, schedule, cfg, layout)
    _say(env, f"schedule {schedule.name}: {describe(schedule)}; "
              f"parameters per stage: {', '.join(f'{n:,}' for n in stage_params)}")
    p2p = P2P(schedule, env.rank, env.device, _boundary_shape(args), timeout_s=args.p2p_timeout,
              verbose=args.verbose_p2p, send_shapes=args.send_shapes, via_host=env.stage_through_host)
    latency = measure_latency(p2p)
    job = _SyntheticJob(args, env, schedule) if args.synthetic_compute else _TrainingJob(args, env, schedule, cfg,
                                                                                          stages)
    compute, p2p = inject(fault, env.rank, job.compute, p2p)
    record, step_times, makespans, losses = _run_steps(args, env, schedule, cfg, job, compute, p2p)
    everyone = _gather_last_step(env, record, job)
    if env.rank == 0:
        summary = _summary(args, env, schedule, cfg, layout, stage_params, latency, job, everyone, step_times,
                           makespans, losses)
        _print_summary(summary, schedule, job)
        unsaved = _write_outputs(args, schedule, cfg, summary, everyone, latency, reserved)
        if unsaved:
            print(f"[rank 0] ERROR: the {args.steps} step(s) ran, but not every output was saved: {unsaved}",
                  file=sys.stderr, flush=True)
            return 1
    return 0


# -- building ------------------------------------------------------------------------------------------
def _model_spec(args):
    """The model of the command line; the runtime trains in fp32."""
    from .layout import ModelSpec
    return ModelSpec(vocab=args.vocab, seq_len=args.seq_len, hidden=args.hidden, heads=args.heads, layers=args.layers,
                     tie_embeddings=args.tie_embeddings, micro_batch_size=args.micro_batch_size, dtype_bytes=4,
                     seed=args.seed, ffn_hidden=args.ffn_hidden or 0)


def _default_layout(cfg, schedule):
    from .runtime.model import default_layout
    return default_layout(cfg.layers, schedule.stages)


def _boundary_shape(args) -> tuple[int, int, int]:
    """What crosses every stage boundary: ``[micro_batch, seq, hidden]``."""
    return (args.micro_batch_size, args.seq_len, args.hidden)


def _build_stages(env, schedule, cfg, layout):
    """This rank's model chunks ``{chunk: StageModule}``, and every stage's parameter count (from all ranks)."""
    import torch.distributed as dist

    from .runtime.model import build_stage
    mine = schedule.stages_of(env.rank)  # this rank's virtual stage per chunk
    stages = {c: build_stage(cfg, s, layout.num_stages, layout.stages[s].layers).to(env.device)
              for c, s in enumerate(mine)}
    counts = [None] * schedule.stages
    for c, module in stages.items():
        counts[mine[c]] = module.num_params()
    gathered = [None] * env.world
    dist.all_gather_object(gathered, counts)
    return stages, [next(g[s] for g in gathered if g[s] is not None) for s in range(schedule.stages)]


class _TrainingJob:
    """Real compute: the model's stages, autograd, and after each step's flush the optimizer."""

    synthetic = False

    def __init__(self, args, env, schedule, cfg, stages):
        import torch
        import torch.distributed as dist

        from .runtime.compute import ModelCompute
        self.args, self.cfg, self.stages = args, cfg, stages
        self.compute = ModelCompute(stages, schedule.microbatches, deallocate_pipeline_outputs=not args.no_deallocate)
        params = [p for s in stages.values() for p in s.parameters()]
        self.optimizer = torch.optim.SGD(params, lr=args.lr) if params else None
        self.tied_group = None  # the ranks holding the two copies of a tied embedding: first and last stage
        ends = sorted({schedule.rank_of(0), schedule.rank_of(schedule.stages - 1)})
        if cfg.tie_embeddings and len(ends) > 1:
            group = dist.new_group(ends)  # collective: every rank creates it
            self.tied_group = group if env.rank in ends else None
        self.grads_report = None

    def after_flush(self, step: int, tokens, targets) -> None:
        """Megatron's order after the pipeline flush: sync tied grads, (check them), step, zero."""
        from .runtime.grads import compare_grads, reference_grads, sync_tied_grads
        if self.cfg.tie_embeddings:
            sync_tied_grads(self.stages, self.tied_group)
        if step == 0 and self.args.check_grads:
            self.grads_report = compare_grads(self.stages, reference_grads(self.cfg, tokens, targets),
                                              self.cfg.tie_embeddings)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class _SyntheticJob:
    """``--synthetic-compute``: every op sleeps for the simulator's cost, so the schedule and P2P are timed alone."""

    synthetic = True
    grads_report = None

    def __init__(self, args, env, schedule):
        from .runtime.compute import SyntheticCompute
        from .sim import Costs
        from .sim.costs import scale_costs
        f_ms, b_ms, *w_ms = args.synthetic_compute
        times = scale_costs(f_ms / 1000, b_ms / 1000, (w_ms[0] if w_ms else b_ms / 2) / 1000, args.stage_costs,
                            args.stage_bwd_costs, schedule.pp, schedule.chunks)  # simulate's rule
        # the simulator's cost convention: a rank's whole share, 1/v per chunk
        self.costs = Costs(fwd=times[0], bwd=times[1], wgrad=times[2])
        self.compute = SyntheticCompute(self.costs.resolve(schedule.pp, schedule.chunks, schedule.placement),
                                        schedule.stages_of(env.rank), _boundary_shape(args), env.device)

    def after_flush(self, step: int, tokens, targets) -> None:
        pass


# -- running -------------------------------------------------------------------------------------------
def _run_steps(args, env, schedule, cfg, job, compute, p2p):
    """``args.steps`` training steps; rank 0 prints one line each.  Returns the last step's record and the series."""
    import torch
    import torch.distributed as dist

    from .runtime.executor import run_step
    from .runtime.loss import loss_to_all_ranks
    from .runtime.model import make_batch
    cuda = env.device.type == "cuda"
    tokens_per_step = schedule.microbatches * args.micro_batch_size * args.seq_len
    step_times, makespans, losses, record = [], [], [], None
    for step in range(args.steps):
        tokens, targets = make_batch(cfg, schedule.microbatches, args.micro_batch_size, step, env.device)
        compute.new_step(targets)
        if cuda:
            torch.cuda.synchronize()
            if step == args.steps - 1:
                torch.cuda.reset_peak_memory_stats()
        dist.barrier()
        t0 = time.perf_counter()
        record = run_step(schedule, env.rank, compute, p2p, tokens, cuda_sync=cuda)
        p2p.finish_step()
        job.after_flush(step, tokens, targets)
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        times = [None] * env.world
        dist.all_gather_object(times, (elapsed, record.end))
        step_time = max(t for t, _ in times)
        step_times.append(step_time)
        makespans.append(max(end for _, end in times))  # the schedule's own span: last op end, any rank
        loss = loss_to_all_ranks(compute.take_loss(), schedule.rank_of(schedule.stages - 1), env.device)
        losses.append(None if job.synthetic else loss)
        _say(env, f"step {step + 1}/{args.steps}  time {step_time * 1000:8.1f} ms  "
                  + ("synthetic compute  " if job.synthetic else f"loss {loss:.4f}  ")
                  + f"tokens/s {tokens_per_step / step_time:,.0f}")
    return record, step_times, makespans, losses


def _gather_last_step(env, record, job) -> list[dict]:
    """Every rank's view of the last step, on every rank."""
    import torch
    import torch.distributed as dist
    mine = {"rank": env.rank, "events": record.events, "waits": record.waits, "end": record.end,
            "peak_activations": record.peak_activations, "peak_activation_bytes": record.peak_activation_bytes,
            "deallocated_output_bytes": job.compute.deallocated_output_bytes, "grads": job.grads_report,
            "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if env.device.type == "cuda" else None}
    everyone = [None] * env.world
    dist.all_gather_object(everyone, mine)
    return everyone


# -- reporting (rank 0) --------------------------------------------------------------------------------
def _summary(args, env, schedule, cfg, layout, stage_params, latency, job, everyone, step_times, makespans,
             losses) -> dict:
    from .sim import simulate
    tokens_per_step = schedule.microbatches * args.micro_batch_size * args.seq_len
    summary = {
        "schedule": schedule.name, "pp": schedule.pp, "microbatches": schedule.microbatches, "chunks": schedule.chunks,
        "backend": env.backend, "device": env.device.type, "world": env.world,
        "config": cfg.to_dict(), "micro_batch_size": args.micro_batch_size, "stage_params": stage_params,
        "layout": str(layout),
        "step_times": step_times, "losses": losses,
        "tokens_per_s": tokens_per_step / statistics.median(step_times),
        # the first step pays one-time costs (allocations, connections): the median of the rest is the figure
        "makespan": statistics.median(makespans[1:] or makespans),
        "makespans": makespans,
        "p2p_latency": latency,
        "peak_activations": [r["peak_activations"] for r in everyone],
        "simulated_peak_activations": simulate(schedule, fwd=1.0, bwd=2.0).peak_activations,
        "peak_activation_bytes": [r["peak_activation_bytes"] for r in everyone],
        "deallocated_output_bytes": [r["deallocated_output_bytes"] for r in everyone],
        "cuda_max_memory_allocated": [r["cuda_max_memory_allocated"] for r in everyone],
        "synthetic_compute": args.synthetic_compute,
        "stage_costs": args.stage_costs,
    }
    if job.synthetic:
        predicted = simulate(schedule, replace(job.costs, p2p_latency=latency)).makespan
        summary["predicted_makespan"] = predicted
        summary["prediction_error"] = summary["makespan"] / predicted - 1
    if args.check_grads:
        reports = [r["grads"] for r in everyone]
        worst = max(reports, key=lambda g: g["max_rel_error"])
        summary["max_rel_error"] = worst["max_rel_error"]
        summary["grads_bitwise"] = [sum(g["bitwise"] for g in reports), sum(g["total"] for g in reports)]
        summary["grads_match"] = worst["max_rel_error"] <= 1e-6
    else:
        summary["grads_match"] = None
    return summary


def _print_summary(summary: dict, schedule, job) -> None:
    median_step = statistics.median(summary["step_times"])
    print(f"summary: median step {median_step * 1000:.1f} ms, median makespan "
          f"{summary['makespan'] * 1000:.1f} ms (steps after the first), {summary['tokens_per_s']:,.0f} tokens/s")
    if job.synthetic:
        print(f"simulator predicts {summary['predicted_makespan'] * 1000:.1f} ms with the measured P2P latency "
              f"{summary['p2p_latency'] * 1e6:.0f} us: measured/predicted = {1 + summary['prediction_error']:.3f}")
    print(f"peak live activations per rank: {summary['peak_activations']} "
          f"(simulator: {summary['simulated_peak_activations']})")
    if not job.synthetic:
        at_peak = [f"{b / 2**20:.2f} MiB" for b in summary["peak_activation_bytes"]]
        print(f"activation bytes at peak per rank: {at_peak}")
        freed = summary["deallocated_output_bytes"]
        if any(freed):
            per_mb = max(freed) / max(1, schedule.microbatches * schedule.chunks)
            print(f"deallocate_output_tensor freed {sum(freed) / 2**20:.2f} MiB of sent outputs this step "
                  f"({per_mb / 2**10:.1f} KiB per microbatch-chunk; graphs kept for backward)")
    if summary["device"] == "cuda":
        print(f"torch.cuda.max_memory_allocated per rank: {summary['cuda_max_memory_allocated']}")
    if summary["grads_match"] is not None:
        b, t = summary["grads_bitwise"]
        print(f"grads match the single-process reference: {summary['grads_match']} (max relative error "
              f"{summary['max_rel_error']:.2e}; {b} of {t} parameter tensors bitwise equal)")


def _write_outputs(args, schedule, cfg, summary: dict, everyone: list[dict], latency: float, reserved) -> str | None:
    """``--json`` (the summary) and ``--trace`` (the last step, in the trace module's format), each through a
    temporary file (an interrupted run leaves no half-written output) into the room reserved before step 1;
    None, or one line saying what was saved where."""
    from .inputs import json_safe, strict_json
    from .runtime.outputs import write_outputs
    from .trace import new_trace

    def trace() -> str:
        return strict_json(json_safe(new_trace(schedule, "runtime", max(r["end"] for r in everyone),
                                               [e for r in everyone for e in r["events"]],
                                               [w for r in everyone for w in r["waits"]], latency, cfg.layers,
                                               summary["layout"])))
    outputs = [("--json", args.json, lambda: strict_json(json_safe(summary), indent=1)), ("--trace", args.trace, trace)]
    return write_outputs(reserved, [(flag, path, text) for flag, path, text in outputs if path])


def _say_interrupted(signum: int) -> None:
    if os.environ.get("RANK", "0") == "0":  # one line for the whole job, not one per rank
        why = ("Ctrl-C" if signum == signal.SIGINT else
               "SIGTERM: torchrun stops every rank when it is stopped or when another rank fails")
        print(f"torchrun ... -m pipeline_kit.run: interrupted ({why})", file=sys.stderr, flush=True)


if __name__ == "__main__":
    from .interrupts import exit_on_signals_from_a_watcher

    exit_on_signals_from_a_watcher(_say_interrupted)  # before torch starts its threads
    code = main()
    if "torch.distributed" in sys.modules:  # not imported when the arguments were refused
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    raise SystemExit(code)
