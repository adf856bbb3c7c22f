"""The kit's executor against PyTorch's ``torch.distributed.pipelining`` on the same model.

Same GPT, same stage split and placement, same microbatches, same SGD step, 4 ranks on gloo.  For each
of the seven schedules PyTorch ships (GPipe, 1F1B, interleaved 1F1B, looped BFS, interleaved zero bubble,
ZB-V, DualPipe-V: every kit family with a ``torch_class``) the two runtimes alternate step by step (so
machine noise hits both alike), after the same warm-up steps for both.  Printed per schedule: the
median step time of each, the ratio of the medians, and -- the verdict, robust to a loaded machine --
the median of the per-step ratios (each kit step over the PyTorch step next to it) with its
interquartile range.  Target: median ratio <= 1.  The load average is printed too: timings taken
while other jobs share the cores carry their noise.

Run: ``python benchmarks/vs_torch_pipelining.py [--steps 30] [--warmup 2] [--nproc 4] [--schedules zbv,dualpipev]``
(it starts torchrun itself).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def parse(argv=None):
    from pipeline_kit.argtypes import OneLineParser, non_negative_int, positive_int
    from pipeline_kit.schedules import FAMILIES, ScheduleConfigError, build_schedule

    p = OneLineParser(prog="python benchmarks/vs_torch_pipelining.py", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=positive_int, default=30, help="timed steps per runtime and schedule (default 30)")
    p.add_argument("--warmup", type=non_negative_int, default=2, help="untimed steps per runtime first (default 2)")
    p.add_argument("--nproc", type=positive_int, default=4, help="ranks = pipeline size (default 4)")
    p.add_argument("--layers", type=positive_int, default=8)
    p.add_argument("--hidden", type=positive_int, default=128)
    p.add_argument("--seq-len", type=positive_int, default=64)
    p.add_argument("--micro-batch-size", type=positive_int, default=2)
    p.add_argument("--microbatches", type=positive_int, default=8)
    p.add_argument("--schedules", default=None, help="comma-separated kit names (default: all seven)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    # checked here, before torchrun starts workers that would each fail on it with a traceback
    known = [n for n, f in FAMILIES.items() if f.torch_class]
    names = args.schedules.split(",") if args.schedules else known
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"argument --schedules: {', '.join(map(repr, unknown))} is not a schedule PyTorch ships; "
                f"choose from {', '.join(known)}")
    for name in names:  # the kit's own refusals, and one decoder layer per stage at least
        try:
            stages = build_schedule(name, args.nproc, args.microbatches).stages
        except ScheduleConfigError as exc:
            p.error(f"--schedules {name} with --nproc {args.nproc} --microbatches {args.microbatches}: {exc}")
        if args.layers < stages:
            p.error(f"argument --layers: {name} on {args.nproc} ranks has {stages} stages, each needs a layer: "
                    f"use --layers {stages} or more")
    return args


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as torch_schedules

    from pipeline_kit.runtime.compute import ModelCompute
    from pipeline_kit.runtime.env import init_distributed
    from pipeline_kit.runtime.executor import run_step
    from pipeline_kit.runtime.model import GPTConfig, build_stage, lm_loss, make_batch
    from pipeline_kit.runtime.p2p import P2P
    from pipeline_kit.schedules import FAMILIES, build_schedule

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    env = init_distributed("gloo")
    pp, rank, m = env.world, env.rank, args.microbatches
    cfg = GPTConfig(layers=args.layers, hidden=args.hidden, seq_len=args.seq_len, heads=4)
    shape = (args.micro_batch_size, args.seq_len, args.hidden)
    rows = []
    names = args.schedules.split(",") if args.schedules else [n for n, f in FAMILIES.items() if f.torch_class]
    for name in names:
        torch_cls = getattr(torch_schedules, FAMILIES[name].torch_class)
        sched = build_schedule(name, pp, m)
        S, v, mine = sched.stages, sched.chunks, sched.stages_of(rank)
        ours = {c: build_stage(cfg, s, S) for c, s in enumerate(mine)}
        theirs = {c: build_stage(cfg, s, S) for c, s in enumerate(mine)}
        opt_ours = torch.optim.SGD([p for s in ours.values() for p in s.parameters()], lr=0.01)
        opt_theirs = torch.optim.SGD([p for s in theirs.values() for p in s.parameters()], lr=0.01)
        p2p = P2P(sched, rank, env.device, shape, timeout_s=120)
        compute = ModelCompute(ours, m)
        stages = [PipelineStage(theirs[c], s, S, env.device) for c, s in enumerate(mine)]
        kwargs = {"n_microbatches": m, "loss_fn": lm_loss}
        single = issubclass(torch_cls, torch_schedules.PipelineScheduleSingle)
        torch_sched = torch_cls(stages[0], **kwargs) if single else torch_cls(stages, **kwargs)
        times = {"kit": [], "torch": []}
        for step in range(args.warmup + args.steps):
            tokens, targets = make_batch(cfg, m, args.micro_batch_size, step)
            order = ("kit", "torch") if step % 2 == 0 else ("torch", "kit")  # neither always goes first
            for runtime in order:
                dist.barrier()
                t0 = time.perf_counter()
                if runtime == "kit":
                    compute.new_step(targets)
                    run_step(sched, rank, compute, p2p, tokens)
                    p2p.finish_step()
                    opt_ours.step()
                    opt_ours.zero_grad(set_to_none=True)
                else:
                    first, last = rank == sched.rank_of(0), rank == sched.rank_of(S - 1)
                    args_in = (torch.cat(tokens),) if first else ()
                    torch_sched.step(*args_in, target=torch.cat(targets) if last else None)
                    opt_theirs.step()
                    opt_theirs.zero_grad(set_to_none=True)
                elapsed = torch.tensor([time.perf_counter() - t0])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                if step >= args.warmup:
                    times[runtime].append(float(elapsed))
        label = name + (f" v={v}" if FAMILIES[name].chunks == "any" else "")
        rows.append((label, FAMILIES[name].torch_class, times["kit"], times["torch"]))
    if rank == 0:
        print(report(rows, args, pp, load_before), flush=True)
    dist.destroy_process_group()


def report(rows, args, pp: int, load_before: float) -> str:
    """The table: medians, their ratio, and the median and quartiles of the per-step ratios."""
    lines = [f"{pp} ranks, gloo, GPT layers={args.layers} hidden={args.hidden} seq={args.seq_len} "
             f"micro-batch={args.micro_batch_size} microbatches={args.microbatches}; {args.steps} alternating "
             f"steps each after {args.warmup} warm-up; load average {load_before:.1f} before, "
             f"{os.getloadavg()[0]:.1f} after",
             f"{'schedule':<18} {'PyTorch class':<30} {'kit ms':>8} {'torch ms':>8} {'ratio of':>8} "
             f"{'per-step kit/torch':>19}",
             f"{'':<18} {'':<30} {'median':>8} {'median':>8} {'medians':>8} {'median [q1, q3]':>19}"]
    for label, cls, kit, ref in rows:
        kit_ms, ref_ms = statistics.median(kit), statistics.median(ref)
        q1, mid, q3 = statistics.quantiles([a / b for a, b in zip(kit, ref)], n=4)
        lines.append(f"{label:<18} {cls:<30} {kit_ms * 1000:>8.1f} {ref_ms * 1000:>8.1f} {kit_ms / ref_ms:>8.3f} "
                     f"{mid:>6.3f} [{q1:.3f}, {q3:.3f}]")
    return "\n".join(lines)


def main() -> int:
    args = parse()
    if args.worker:
        worker(args)
        return 0
    here = os.path.abspath(__file__)
    # the worker's options, spelled so torchrun's own parser cannot mistake one for its --nproc-per-node
    forwarded = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                 if k not in ("nproc", "worker") and v is not None]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc), here,
           "--worker", *forwarded]
    return subprocess.call(cmd)


if __name__ == "__main__":
    raise SystemExit(main())
