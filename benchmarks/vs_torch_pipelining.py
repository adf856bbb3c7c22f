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

from _cli import int_between, parser, run
from pipeline_kit.argtypes import int_at_most
from pipeline_kit.limits import MAX_RUN_MEMORY_BYTES, MAX_STEPS

HEADS = 4  # attention heads of the GPT both runtimes train
MAX_NPROC = 64  # ranks: every one is a process of this machine, holding a copy of torch
MODEL_DIM = int_at_most("MAX_MODEL_DIM", "")


def parse(argv=None):
    from pipeline_kit.schedules import FAMILIES, ScheduleConfigError, build_schedule

    p = parser(__file__, __doc__)
    p.add_argument("--steps", type=int_between(2, MAX_STEPS, "2 at least, for the quartiles; MAX_STEPS"), default=30,
                   help="timed steps per runtime and schedule")
    p.add_argument("--warmup", type=int_between(0, MAX_STEPS, "MAX_STEPS"), default=2,
                   help="untimed steps per runtime first")
    p.add_argument("--nproc", type=int_between(1, MAX_NPROC, "every rank is a process on this machine"), default=4,
                   help=f"ranks = pipeline size, at most {MAX_NPROC}")
    p.add_argument("--layers", type=int_at_most("MAX_LAYERS", "layers"), default=8, help="decoder layers")
    p.add_argument("--hidden", type=MODEL_DIM, default=128, help=f"hidden size, a multiple of the {HEADS} heads")
    p.add_argument("--seq-len", type=MODEL_DIM, default=64, help="sequence length")
    p.add_argument("--micro-batch-size", type=MODEL_DIM, default=2, help="sequences per microbatch")
    p.add_argument("--microbatches", type=int_at_most("MAX_MICROBATCHES", "microbatches"), default=8,
                   help="microbatches per step")
    p.add_argument("--schedules", default=None, help="comma-separated kit names (default: all seven)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:  # --nproc is not forwarded (torchrun would take it for its own --nproc-per-node)
        args.nproc = int(os.environ.get("WORLD_SIZE", args.nproc))
    if args.hidden % HEADS:
        p.error(f"argument --hidden: {args.hidden} is not divisible by the model's {HEADS} attention heads")
    needed = job_memory_bytes(args)
    if needed > MAX_RUN_MEMORY_BYTES:
        p.error(f"the job needs about {needed / 2**30:,.1f} GiB, more than the limit of "
                f"{MAX_RUN_MEMORY_BYTES / 2**30:g} GiB (MAX_RUN_MEMORY_BYTES): use a smaller --hidden, --seq-len, "
                "--micro-batch-size, --layers or --microbatches")
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


def job_memory_bytes(args) -> float:
    """About what the whole job holds, all ranks together: two copies of the model (the kit's, PyTorch's), fp32
    weights and gradients each, and one runtime's activations of every microbatch on every layer (they take
    turns) -- pipeline_kit.run's estimate, with the second copy."""
    from pipeline_kit.layout.costs import ModelSpec, embedding_params, layer_activation_bytes, layer_params, loss_params

    m = ModelSpec(seq_len=args.seq_len, hidden=args.hidden, heads=HEADS, layers=args.layers,
                  micro_batch_size=args.micro_batch_size, dtype_bytes=4)
    params = embedding_params(m) + m.layers * layer_params(m) + loss_params(m)
    logits = m.seq_len * m.micro_batch_size * m.vocab * 4
    return 2 * 2 * 4 * params + args.microbatches * (m.layers * layer_activation_bytes(m) + 2 * logits)


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
    cfg = GPTConfig(layers=args.layers, hidden=args.hidden, seq_len=args.seq_len, heads=HEADS)
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


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        from pipeline_kit.interrupts import exit_on_signals_from_a_watcher

        exit_on_signals_from_a_watcher(lambda signum: None)  # torchrun stopping it: the parent says "interrupted"
        worker(args)
        return 0
    here = os.path.abspath(__file__)
    # the worker's options, spelled so torchrun's own parser cannot mistake one for its --nproc-per-node
    forwarded = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                 if k not in ("nproc", "worker") and v is not None]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc), here,
           "--worker", *forwarded]
    job = subprocess.Popen(cmd, start_new_session=True)  # so a Ctrl-C reaches this process only, which then
    try:  # stops the job in order: torchrun, then its workers (each in its own session), none left running
        return job.wait()
    except BaseException:
        from pipeline_kit.launch import stop_job
        stop_job(job)
        raise


if __name__ == "__main__":
    run(__file__, main)
