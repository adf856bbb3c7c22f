"""How fast does the explorer redraw?  Simulate + draw + render to pixels, pp = 8, M = 32.

Target (issue #5): within 200 ms for pp <= 8, M <= 32.  Run: ``python benchmarks/bench_explorer.py``.
"""

from __future__ import annotations

import statistics
import time

from matplotlib.backends.backend_agg import FigureCanvasAgg

from pipeline_kit.viz import render

CASES = [("gpipe", 8, 32, 2), ("1f1b", 8, 32, 2), ("interleaved", 8, 32, 2), ("interleaved", 8, 32, 4),
         ("zb-h1", 8, 32, 2), ("1f1b", 4, 8, 2)]


def main() -> int:
    FigureCanvasAgg(render("1f1b", 4, 8)[0]).draw()  # warm-up: fonts, caches
    print(f"{'schedule':<12} {'pp':>3} {'M':>3} {'v':>2} {'median ms':>10} {'max ms':>8}  "
          "(simulate + draw + rasterise)")
    worst = 0.0
    for name, pp, m, v in CASES:
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            fig, _ = render(name, pp, m, v, slow_stage=3, slowdown=1.5, p2p_latency=0.1)
            FigureCanvasAgg(fig).draw()  # rasterise, as displaying it in a notebook does
            times.append(time.perf_counter() - t0)
        worst = max(worst, statistics.median(times))
        print(f"{name:<12} {pp:>3} {m:>3} {v:>2} {statistics.median(times) * 1e3:>10.0f} {max(times) * 1e3:>8.0f}")
    print(f"worst median {worst * 1e3:.0f} ms (target 200 ms): {'ok' if worst < 0.2 else 'MISSED'}")
    return 0 if worst < 0.2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
