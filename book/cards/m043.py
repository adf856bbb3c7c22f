"""M043's numbers: the phases of non-interleaved 1F1B at PP4/M8 (fwd=1, bwd=2) and its first backwards."""

from pipeline_kit.schedules import Op, build_schedule
from pipeline_kit.sim import simulate

PP, M = 4, 8


def numbers() -> dict:
    sched = build_schedule("1f1b", PP, M)
    res = simulate(sched, fwd=1, bwd=2)
    first = min((e for e in res.events if e.op.kind == "B"), key=lambda e: e.start)
    b0_rank0 = next(e.start for e in res.events if e.rank == 0 and e.op == Op("B", 0))
    before = [e for e in res.events if e.rank == 0 and e.start < b0_rank0]
    warm = [next(i for i, op in enumerate(ops) if op.kind != "F") - 1 for ops in sched.ranks]
    return {"warmups": ", ".join(map(str, warm)), "peaks": ", ".join(map(str, res.peak_activations)),
            "fb_op": str(first.op), "fb_rank": first.rank, "fb_start": float(first.start),
            "f_before_b0": sum(1 for e in before if e.op.kind == "F"), "b0_rank0": float(b0_rank0),
            "rank0_wait": float(b0_rank0 - max(e.end for e in before))}
