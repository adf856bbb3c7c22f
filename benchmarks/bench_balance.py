"""How fast is the exact balancer?  128 layers over pp = 16 (and with 2 chunks per rank).

Target (issue #4): fast for 128 layers x pp 16 -- interactive, well under a second.
Run: ``python benchmarks/bench_balance.py`` (no options: the cases are fixed).
"""

from __future__ import annotations

import time

from _cli import parser, run
from pipeline_kit.layout import ItemTimes, balance

CASES = [(128, 16, 1), (128, 16, 2), (256, 32, 1)]


def main(argv=None) -> int:
    parser(__file__, __doc__).parse_args(argv)
    print(f"{'layers':>6} {'pp':>3} {'chunks':>6} {'stages':>6} {'time':>8}  balanced slowest / even slowest")
    for layers, pp, chunks in CASES:
        items = ItemTimes.uniform(layers, layer_fwd=1.0, embedding_fwd=2.0, loss_fwd=6.0)
        t0 = time.perf_counter()
        result = balance(items, pp, chunks, microbatches=2 * pp)
        took = time.perf_counter() - t0
        print(f"{layers:>6} {pp:>3} {chunks:>6} {pp * chunks:>6} {took:>7.3f}s  "
              f"{result.best.slowest_stage:.1f} / {result.even.slowest_stage:.1f}")
    return 0


if __name__ == "__main__":
    run(__file__, main)
