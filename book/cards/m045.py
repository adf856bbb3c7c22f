"""M045's numbers: what more microbatches buy and cost at PP8, the same simulations as the bubble chapter."""

from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

PP = 8
STEP_OVERHEAD = 10                 # the chapter's assumed per-step cost outside the schedule, in units of f
GBS, ALPHA, BETA = 64, 0.5, 1.0    # the chapter's fixed-GBS cost model: per-op cost ALPHA + BETA * b


def numbers() -> dict:
    # Fixed micro-batch size (the question bank's setting): more M is more work per step.
    r8, r64 = simulate(build_schedule("1f1b", PP, 8)), simulate(build_schedule("1f1b", PP, 64))
    gain_bubble = (64 / r64.makespan) / (8 / r8.makespan)
    gain_total = (64 / (r64.makespan + STEP_OVERHEAD)) / (8 / (r8.makespan + STEP_OVERHEAD))
    # Fixed global batch: b = GBS / M shrinks, each op pays the overhead ALPHA again.
    spans = {}
    for m in (8, 16, 32, 64):
        f = ALPHA + BETA * (GBS // m)
        spans[m] = simulate(build_schedule("1f1b", PP, m), fwd=f, bwd=2 * f).makespan
    best = min(spans, key=spans.get)
    # Activation peak of the worst rank, pp = 4, 1 unit per microbatch, M = 4 .. 32.
    peak = {fam: [max(simulate(build_schedule(fam, 4, m), activation_bytes=1.0).peak_activation_bytes)
                  for m in (4, 32)] for fam in ("1f1b", "gpipe")}
    return {"bubble_m8": float(r8.bubble_fraction), "bubble_m64": float(r64.bubble_fraction),
            "latency_ratio": r64.makespan / r8.makespan, "gain_bubble": gain_bubble,
            "gain_other": gain_total / gain_bubble, "step_overhead": STEP_OVERHEAD,
            "best_m": best, "best_b": GBS // best, "gbs": GBS,
            "peak_1f1b_m4": peak["1f1b"][0], "peak_1f1b_m32": peak["1f1b"][1],
            "peak_gpipe_m4": peak["gpipe"][0], "peak_gpipe_m32": peak["gpipe"][1]}
