"""The synthetic world of lab 7 (M049, M050, M054): the lab's machine and model, the bank-pp8 model at
100 TFLOP/s, and traces in the runtime's format.

Why the lab builds its own traces: a real CPU run is too noisy to grade against, so the traces the
students read are made here in the runtime's exact format (every op's start/end in seconds, the P2P
waits *inside* the ops) from the schedule's own dataflow, with known per-op service times and
seeded jitter.  Every expected value is then computed with the kit (``pipeline_kit.layout``,
``pipeline_kit.sim``, ``pipeline_kit.viz``) from those traces, never typed in.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from ...layout import (
    PRESETS,
    ModelSpec,
    balance,
    parse_layout,
)
from ...layout.balance import plan_for
from ...layout.commands import item_times_from_flops
from ...schedules import build_schedule
from ...sim import simulate
from ...trace import from_sim
from .common import (
    close,
    counts_text,
    drawn,
    fail,
)

# -- the lab's machine and model (inputs of the story, not expected values) ---------------------------
LAB_MODEL = ModelSpec(vocab=16384, seq_len=1024, hidden=1024, heads=16, layers=12, micro_batch_size=1)
LAB_TFLOPS = 50.0
LAB_LAYOUT = "Et*3|t*3|t*3|t*3L"
SLOW_RANK, SLOW_FACTOR = 1, 1.5  # rank 1's GPU runs at 2/3 speed: nothing in the layout says so
LAB_P2P_MS = 0.08
REAL_TRACE = Path(__file__).resolve().parents[3] / "book" / "data" / "run-1f1b-pp2.json"
BANK = PRESETS["bank-pp8"][0]
BANK_PP, BANK_M, BANK_MEASURED = 8, 16, 2.59
BANK_TFLOPS, BANK_LAT_US, BANK_GBPS = 100.0, 20.0, 10.0


# -- traces --------------------------------------------------------------------------------------------
def make_trace(fwd_ms, bwd_ms, microbatches: int, p2p_ms: float = 0.0, jitter: float = 0.0, seed: int = 0,
               dynamic: dict | None = None, layout: str | None = None) -> dict:
    """A 1F1B trace in ``pipeline_kit.run --trace`` format: per-stage base times (ms), each op scaled by a
    seeded factor in ``[1 - jitter, 1 + jitter]`` and, for stages in ``dynamic``, by a per-microbatch factor."""
    sched = build_schedule("1f1b", len(fwd_ms), microbatches)
    rng = random.Random(seed)
    dynamic = dynamic or {}

    def duration(rank, op, stage):  # the simulator calls it op by op in one fixed order: reproducible draws
        base = (fwd_ms if op.kind == "F" else bwd_ms)[stage]
        return base * (1 + jitter * (2 * rng.random() - 1)) * dynamic.get(stage, [1.0] * microbatches)[op.microbatch]

    run = simulate(sched, durations=duration, p2p_latency=p2p_ms)
    layers = parse_layout(layout).num_layers if layout else None
    return from_sim(run, per_second=1e3, source="lab07 (synthetic)", p2p_latency=p2p_ms, layers=layers, layout=layout)


def lab_stage_ms(layout: str, model: ModelSpec = LAB_MODEL, tflops: float = LAB_TFLOPS,
                 slow_rank: int | None = SLOW_RANK) -> tuple[list[float], list[float]]:
    """Per-stage F and B (ms) of ``layout`` on the lab's machine, where ``slow_rank`` runs 1.5x slower."""
    lay = parse_layout(layout)
    plan = plan_for(lay, item_times_from_flops(model, tflops).scaled(1e3), lay.num_stages, 2 * lay.num_stages)
    speed = [SLOW_FACTOR if k == slow_rank else 1.0 for k in range(lay.num_stages)]
    return [f * x for f, x in zip(plan.stage_fwd, speed)], [b * x for b, x in zip(plan.stage_bwd, speed)]


def lab_trace(layout: str = LAB_LAYOUT, microbatches: int = 8, seed: int = 7) -> dict:
    """The lab's run: 1F1B on the lab's 4-GPU machine, 5% jitter per op."""
    fwd, bwd = lab_stage_ms(layout)
    return make_trace(fwd, bwd, microbatches, LAB_P2P_MS, jitter=0.05, seed=seed, layout=layout)


def moe_trace(seed: int = 11) -> dict:
    """Stage 2 holds an MoE layer: its cost follows the tokens its experts get, microbatch by microbatch."""
    fwd, bwd = lab_stage_ms(LAB_LAYOUT, slow_rank=None)
    routing = [1.0, 1.0, 1.9, 1.0, 1.05, 0.95, 2.4, 1.0]
    return make_trace(fwd, bwd, 8, LAB_P2P_MS, jitter=0.04, seed=seed, dynamic={2: routing}, layout=LAB_LAYOUT)


def _lab_counts(r, stages: int) -> list[int]:
    """The lab model's decoder layers cut into ``stages`` runs of at least one."""
    cuts = sorted(r.sample(range(1, LAB_MODEL.layers), stages - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, LAB_MODEL.layers])]


def _drawn_trace(r, counts: list[int], microbatches: int, slow_rank: int | None, dynamic: dict | None = None,
                 p2p_ms: float = LAB_P2P_MS, jitter: float = 0.04) -> dict:
    layout = counts_text(counts)
    fwd, bwd = lab_stage_ms(layout, slow_rank=slow_rank)
    return make_trace(fwd, bwd, microbatches, p2p_ms, jitter=jitter, seed=r.randrange(10_000), dynamic=dynamic,
                      layout=layout)


def hidden_stage_traces(rng) -> list[tuple[str, dict]]:
    """Traces for the hidden tests: a drawn layout of the lab's model, maybe a slow GPU, maybe a stage whose cost
    spikes on some microbatches (MoE routing); the PP3/M9 dynamic trace and the book's real CPU run are fixed."""
    def make(r):
        pp, m = r.randint(3, 5), r.randint(4, 10)
        dynamic = None
        if r.random() < 0.5:
            routing = [1.0] * m
            for j in r.sample(range(m), max(2, m // 4)):
                routing[j] = r.uniform(1.8, 2.5)
            dynamic = {r.randrange(pp): routing}
        trace = _drawn_trace(r, _lab_counts(r, pp), m, r.choice([None, r.randrange(pp)]), dynamic,
                             r.choice([0.05, 0.08, 0.15]), r.choice([0.02, 0.04, 0.06]))
        return f"a PP{pp}/M{m} trace", trace
    fixed = [("a PP3/M9 trace", make_trace([3.0, 1.2, 1.4], [6.5, 2.4, 2.9], 9, 0.05, jitter=0.1, seed=5,
                                           dynamic={1: [1, 1, 1, 2.5, 1, 1, 1, 1, 2.2]}, layout="Et*5|t*2|t*2L"))]
    if REAL_TRACE.is_file():
        import json
        fixed.append(("the book's real 2-rank trace", json.loads(REAL_TRACE.read_text())))
    return drawn(rng, 2, make, fixed=fixed)


def hidden_verdict_pairs(rng) -> list[tuple[str, dict, dict]]:
    """(name, before, after): first :func:`fixed_verdict_pairs`, then around a drawn PP/M trace of the lab's model:
    a move off the slowest stage, the same move at another M, a move that misses it, and a plain rerun."""
    r = rng
    pp, m = r.randint(3, 5), r.randint(4, 8)
    counts = _lab_counts(r, pp)
    while max(counts) < 2:  # the slowest stage must have a layer to give away
        counts = _lab_counts(r, pp)
    fwd, bwd = lab_stage_ms(counts_text(counts), slow_rank=None)
    slow = max((k for k in range(pp) if counts[k] > 1), key=lambda k: fwd[k] + bwd[k])
    other = r.choice([k for k in range(pp) if k != slow and counts[k] > 1] or [slow])

    def moved(src):
        out = list(counts)
        dst = src + 1 if src == 0 else src - 1 if src == pp - 1 else src + r.choice([-1, 1])
        out[src], out[dst] = out[src] - 1, out[dst] + 1
        return out

    base = _drawn_trace(r, counts, m, None)
    resplit = moved(slow)
    return [*fixed_verdict_pairs(), (f"PP{pp}/M{m}, re-split", base, _drawn_trace(r, resplit, m, None)),
            (f"PP{pp}/M{m}, re-split at M={2 * m}", base, _drawn_trace(r, resplit, 2 * m, None)),
            (f"PP{pp}/M{m}, another move", base, _drawn_trace(r, moved(other), m, None)),
            (f"PP{pp}/M{m}, rerun", base, _drawn_trace(r, counts, m, None))]


def fixed_verdict_pairs() -> list[tuple[str, dict, dict]]:
    """Runs that differ in the layers or in pp at the same M (not comparable, whatever their step times), so a
    verdict that compares only M fails on the same case under every seed."""
    base, deeper = lab_trace(), "Et*4|t*3|t*3|t*3L"
    fwd, bwd = lab_stage_ms(deeper, model=ModelSpec(**{**LAB_MODEL.to_dict(), "layers": 13}))
    return [("a run with 13 layers", base, make_trace(fwd, bwd, 8, LAB_P2P_MS, jitter=0.05, seed=9, layout=deeper)),
            ("a PP3 run of the same model", base, lab_trace("Et*4|t*4|t*4L", seed=10))]


def main_run_args() -> list[str]:
    """The ``pipeline_kit.run`` arguments of the lab's run (the model of :data:`LAB_MODEL`)."""
    m = LAB_MODEL
    return ["--schedule", "1f1b", "--microbatches", "8", "--layers", str(m.layers), "--hidden", str(m.hidden),
            "--heads", str(m.heads), "--seq-len", str(m.seq_len), "--micro-batch-size", str(m.micro_batch_size),
            "--vocab", str(m.vocab), "--layout", LAB_LAYOUT, "--seed", "1234", "--steps", "20"]


# -- small helpers -------------------------------------------------------------------------------------
TIGHT = 1e-7  # numbers must be computed: any figure typed from a printout is further off than this


def _not_rounded(got: float, want: float, where: str) -> None:
    if close(got, want, rel=5e-3):
        fail(f"{where} = {got:.6g} is the kit's value rounded: compute it with the kit instead of typing the figure "
             "(printed numbers, the interview question bank's and the CLI's, are rounded)")


def _ms(x: float) -> str:
    return f"{x:.3f} ms"




def _raw_p50(trace: dict, stage: int, kind: str) -> float:
    return statistics.median((e["end"] - e["start"]) * 1e3 for e in trace["timeline"]
                             if e["stage"] == stage and e["kind"] == kind)


def bank_items():
    """Per-item times (ms) of the bank-pp8 model from FLOPs at 100 TFLOP/s."""
    return item_times_from_flops(BANK, BANK_TFLOPS).scaled(1e3)


def bank_plan(text: str, microbatches: int = BANK_M):
    return plan_for(parse_layout(text, pp=BANK_PP, layers=BANK.layers), bank_items(), BANK_PP, microbatches)


def bank_balance():
    return balance(bank_items(), BANK_PP, microbatches=BANK_M)


# -- layouts for the hidden cases ----------------------------------------------------------------------
def draw_bank_recut(r) -> str:
    """A re-cut of the bank-pp8 model (16 layers on 8 stages): one to four single-layer moves off the even split,
    each to a neighbouring stage, every stage keeping a decoder layer (the stage-time ratio stays finite)."""
    counts = [BANK.layers // BANK_PP] * BANK_PP
    while counts == [BANK.layers // BANK_PP] * BANK_PP:
        for _ in range(r.randint(1, 4)):
            src = r.randrange(BANK_PP)
            dst = r.choice([d for d in (src - 1, src + 1) if 0 <= d < BANK_PP])
            if counts[src] > 1:
                counts[src], counts[dst] = counts[src] - 1, counts[dst] + 1
    return counts_text(counts)
