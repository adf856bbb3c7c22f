"""How fast is the planner?  The question bank's PP8 model on 8 GPUs, and a 70B-class model on 64 and 1,024.

Targets (issue 26): under 2 s for the bank's model on 8 GPUs and under 20 s for the 70B-class model on 1,024
GPUs, on 2 cores.  Each case prints the search time, the candidates searched (and how many fit), the ops built
and simulated, and the pick -- so a regression shows as a time and as a count.
Run: ``python benchmarks/bench_plan.py [--repeat N]`` (the median of N searches; default 3).
"""

from __future__ import annotations

import statistics
import time

from _cli import int_between, parser, run
from pipeline_kit.layout import load_model_spec
from pipeline_kit.plan import GB, Hardware, plan
from pipeline_kit.plan.memory import Training
from pipeline_kit.plan.search import _count_ops

LARGE = Training(tp=8, recompute="selective", distributed_optimizer=True)
CASES = [  # (name, preset, gpus, training, global batch, target seconds)
    ("bank PP8 model, 8 GPUs", "bank-pp8", 8, Training(), 16, 2.0),
    ("70B-class, 64 GPUs (tp=8)", "llama-70b-ish", 64, LARGE, None, 20.0),
    ("70B-class, 1,024 GPUs (tp=8)", "llama-70b-ish", 1024, LARGE, None, 20.0),
    ("70B-class, 1,024 GPUs (tp=8), global batch 1,024", "llama-70b-ish", 1024, LARGE, 1024, 20.0),
]


def main(argv=None) -> int:
    p = parser(__file__, __doc__)
    p.add_argument("--repeat", type=int_between(1, 20, "searches per case"), default=3,
                   help="searches per case; the median is printed")
    args = p.parse_args(argv)
    print(f"{'case':<50} {'median s':>8} {'target':>7} {'cands':>5} {'fit':>4} {'ops':>10}  pick")
    for name, preset, gpus, training, batch, target in CASES:
        m = load_model_spec(preset)
        times, search = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            search = plan(m, Hardware(gpus, 80 * GB), training, batch, model_name=preset)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        ops = _count_ops(m, gpus // training.tp, search.global_batch, list(search_families(search)))
        best = search.candidates[search.best].label() if search.best is not None else "none fits"
        fit = sum(c.fits for c in search.candidates)
        print(f"{name:<50} {med:>8.2f} {target:>6.0f}s {len(search.candidates):>5} {fit:>4} {ops:>10,}  {best}"
              f"  ({med / target:.2f} of the target)")
    return 0


def search_families(search):
    return dict.fromkeys(c.schedule for c in search.candidates)


if __name__ == "__main__":
    run(__file__, main)
