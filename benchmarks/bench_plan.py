"""How fast is the planner?  From the question bank's PP8 model on 8 GPUs to a 145.6B model on 1,536 GPUs.

Targets: under 2 s for the bank's model on 8 GPUs (issue 26); under 20 s on 2 cores for the 70B-class model on
1,024 GPUs, and for the two cluster sizes of issue 37 -- the 145.6B model of Narayanan et al. 2021 (80 layers,
hidden 12288, 96 heads, vocab 51200, sequence 2048) on 1,536 GPUs at a global batch of 2,304, micro-batch 1, and
the 70B-class preset on 4,096 GPUs at a global batch of 4,096, both with ``--tp 8`` (and the 145.6B model at twice
the batch, near MAX_PLAN_OPS).  Each case prints the search
time (one process, wall clock), the candidates searched, how many fit and how many of those were simulated (the
rest bounded: they cannot tie, see ``pipeline_kit.plan.search.settle``), the ops of the schedules the search
built (each shape's once: what MAX_PLAN_OPS bounds) and simulated (each candidate's: a shape's even and balanced
layouts are two simulations), and the pick -- so a regression shows as a time and as a count.
``--check`` plans each case again simulating every candidate that fits and says whether the fastest, the ties,
the pick and the first 8 of the ranking are the same (they must be), with that search's time.
Run: ``python benchmarks/bench_plan.py [--repeat N] [--check]`` (the median of N searches; default 3).
"""

from __future__ import annotations

import statistics
import time

from _cli import int_between, parser, run
from pipeline_kit.layout import load_model_spec
from pipeline_kit.layout.costs import ModelSpec
from pipeline_kit.limits import ops_per_microbatch_stage
from pipeline_kit.plan import GB, Hardware, plan
from pipeline_kit.plan.memory import Training
from pipeline_kit.plan.search import EXACT_TOP
from pipeline_kit.plan.shapes import count_ops

GPT_145B = ModelSpec(vocab=51200, seq_len=2048, hidden=12288, heads=96, layers=80, micro_batch_size=1)  # Narayanan
LARGE = Training(tp=8, recompute="selective", distributed_optimizer=True)
CASES = [  # (name, model, gpus, training, global batch, target seconds)
    ("bank PP8 model, 8 GPUs", "bank-pp8", 8, Training(), 16, 2.0),
    ("70B-class, 64 GPUs (tp=8)", "llama-70b-ish", 64, LARGE, None, 20.0),
    ("70B-class, 1,024 GPUs (tp=8)", "llama-70b-ish", 1024, LARGE, None, 20.0),
    ("70B-class, 1,024 GPUs (tp=8), global batch 1,024", "llama-70b-ish", 1024, LARGE, 1024, 20.0),
    ("145.6B, 1,536 GPUs (--tp 8), global batch 2,304", GPT_145B, 1536, Training(tp=8), 2304, 20.0),
    ("145.6B, 1,536 GPUs (--tp 8), global batch 4,608", GPT_145B, 1536, Training(tp=8), 4608, 20.0),
    ("70B-class, 4,096 GPUs (--tp 8), global batch 4,096", "llama-70b-ish", 4096, Training(tp=8), 4096, 20.0),
]


def simulated_ops(search) -> int:
    """Ops of the schedules the search simulated (each candidate's once)."""
    return sum(2 * c.pp * c.chunks * c.microbatches * ops_per_microbatch_stage(c.schedule)
               for c in search.candidates if c.simulated)


def answer(search) -> tuple:
    """What must not change when every candidate is simulated: fastest, ties, pick, the first EXACT_TOP ranked."""
    return search.fastest, search.ties, search.best, search.ranked[:EXACT_TOP]


def main(argv=None) -> int:
    p = parser(__file__, __doc__)
    p.add_argument("--repeat", type=int_between(1, 20, "searches per case"), default=3,
                   help="searches per case; the median is printed")
    p.add_argument("--check", action="store_true",
                   help="plan each case again simulating everything that fits, and compare the answers")
    args = p.parse_args(argv)
    print(f"{'case':<52} {'median s':>8} {'target':>7} {'cands':>5} {'fit':>4} {'sim':>4} {'ops built':>10} "
          f"{'simulated':>10}  pick")
    for name, model, gpus, training, batch, target in CASES:
        m = load_model_spec(model) if isinstance(model, str) else model
        label = model if isinstance(model, str) else "gpt-145.6b"
        times, search = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            search = plan(m, Hardware(gpus, 80 * GB), training, batch, model_name=label)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        ops = count_ops(m, gpus // training.tp, search.global_batch, list(search_families(search)))
        best = search.candidates[search.best].label() if search.best is not None else "none fits"
        fit, simulated = sum(c.fits for c in search.candidates), len(search.ranked)
        print(f"{name:<52} {med:>8.2f} {target:>6.0f}s {len(search.candidates):>5} {fit:>4} {simulated:>4} "
              f"{ops:>10,} {simulated_ops(search):>10,}  {best}  ({med / target:.2f} of the target)", flush=True)
        if args.check:
            t0 = time.perf_counter()
            full = plan(m, Hardware(gpus, 80 * GB), training, batch, model_name=label, simulate_all=True)
            took = time.perf_counter() - t0
            same = answer(full) == answer(search)
            print(f"{'':<4}check: simulating all {fit} that fit took {took:.2f} s ({simulated_ops(full):,} ops); "
                  f"fastest, ties, pick and the first {EXACT_TOP} ranked {'the same' if same else 'DIFFER'}",
                  flush=True)
            if not same:
                return 1
    return 0


def search_families(search):
    return dict.fromkeys(c.schedule for c in search.candidates)


if __name__ == "__main__":
    run(__file__, main)
