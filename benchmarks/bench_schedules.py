"""How fast is the schedule core?  Generate + validate + simulate large interleaved schedules.

Target (issue #2): under 1 s for pp=32, M=256, v=4 (65,536 ops) on a 2-core laptop-class machine.
Run: ``python benchmarks/bench_schedules.py`` (``--repeat N`` for more runs, at most 100; the best is reported).
"""

from __future__ import annotations

import time

from _cli import int_between, parser, run
from pipeline_kit.schedules import interleaved, validate
from pipeline_kit.sim import simulate

CASES = [(32, 256, 4), (64, 1024, 2)]
TARGET_S = {(32, 256, 4): 1.0}
MAX_REPEAT = 100  # runs per phase: 100 already take minutes


def best_of(repeat: int, fn):
    best, value = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def main(argv=None) -> int:
    p = parser(__file__, __doc__)
    repeat = int_between(1, MAX_REPEAT, "runs per phase; each run of the larger case takes about 2 s")
    p.add_argument("--repeat", type=repeat, default=3, metavar="N",
                   help=f"runs per phase, 1 to {MAX_REPEAT}; the fastest is reported")
    args = p.parse_args(argv)
    print(f"{'case':<22} {'ops':>8} {'generate':>9} {'validate':>9} {'simulate':>9} {'total':>8} {'target':>7}")
    failed = False
    for pp, m, v in CASES:
        t_gen, sched = best_of(args.repeat, lambda pp=pp, m=m, v=v: interleaved(pp, m, v))
        t_val, _ = best_of(args.repeat, lambda s=sched: validate(s))
        t_sim, res = best_of(args.repeat, lambda s=sched: simulate(s, fwd=1.0, bwd=2.0))
        total = t_gen + t_val + t_sim
        target = TARGET_S.get((pp, m, v))
        verdict = "" if target is None else (f"<{target:g}s " + ("ok" if total < target else "MISSED"))
        failed |= target is not None and total >= target
        print(f"pp={pp} M={m} v={v:<8} {sched.num_ops:>8} {t_gen:>8.3f}s {t_val:>8.3f}s {t_sim:>8.3f}s "
              f"{total:>7.3f}s {verdict}")
        print(f"{'':<22} bubble {res.bubble_fraction:.4f} (formula {(pp - 1) / (v * m + pp - 1):.4f}), "
              f"{sched.num_ops / total:,.0f} ops/s end to end")
    return 1 if failed else 0


if __name__ == "__main__":
    run(__file__, main)
