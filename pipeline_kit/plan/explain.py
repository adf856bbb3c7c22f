"""Why the planner's pick wins: a step time cut into factors, and the factor that decided each comparison.

Why cut it up: "zbv is 12 % faster" teaches nothing; "the bubble shrank by 0.31 s and that outweighed 0.02 s
more P2P" is an answer a candidate can give in an interview and a reader can check against the simulator.  A
step splits exactly (the parts add up to ``step_time_s``) into

* ``compute`` -- the average rank's busy time, the work itself;
* ``imbalance`` -- the busiest rank's time over the average: a slow stage (M049);
* ``bubble`` -- the schedule's idle time with free P2P, over the busiest rank: warmup and cooldown (M044);
* ``p2p`` -- what P2P adds to the pipeline on top of that (the step simulated again with free transfers);
* ``allreduce`` -- the data-parallel gradient all-reduce after the flush.

``memory`` decides when the other candidate does not fit at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules import FAMILIES, build_schedule
from ..sim import simulate
from .search import GB, Candidate, Search, baseline

FACTORS = ("compute", "imbalance", "bubble", "p2p", "allreduce")
DECIDERS = (*FACTORS, "memory")
FACTOR_WORDS = {"compute": "less work per rank", "imbalance": "a better balanced slowest stage",
                "bubble": "a smaller bubble", "p2p": "less P2P time on the critical path",
                "allreduce": "a shorter data-parallel all-reduce", "memory": "memory headroom"}


def breakdown(cand: Candidate) -> dict[str, float]:
    """The step time of a candidate that fits, in :data:`FACTORS` (seconds; they sum to ``step_time_s``)."""
    if cand.step_time_s is None:
        raise ValueError(f"{cand.label()} has no predicted step time: {cand.why_not}")
    busy = cand.busy_s
    mean, busiest = sum(busy) / len(busy), max(busy)
    if cand.pp > 1 and cand.p2p_time_s:
        sched = build_schedule(cand.schedule, cand.pp, cand.microbatches,
                               cand.chunks if FAMILIES[cand.schedule].chunks != "one" else None)
        free = simulate(sched, fwd=cand.stage_fwd_s, bwd=cand.stage_bwd_s).makespan
    else:
        free = cand.pipeline_time_s
    return {"compute": mean, "imbalance": busiest - mean, "bubble": free - busiest,
            "p2p": cand.pipeline_time_s - free, "allreduce": cand.allreduce_time_s}


def deciding_factor(winner: Candidate, other: Candidate) -> tuple[str, float]:
    """The factor that most favours ``winner`` over ``other`` and the seconds it is worth; ``("memory", 0.0)``
    when ``other`` does not fit."""
    if not other.fits:
        return "memory", 0.0
    return _largest_saving(breakdown(winner), breakdown(other))


def _largest_saving(a: dict[str, float], b: dict[str, float]) -> tuple[str, float]:
    """Of two breakdowns, the factor in which ``a`` saves most over ``b``, and how much."""
    factor = max(FACTORS, key=lambda f: b[f] - a[f])
    return factor, b[factor] - a[factor]


@dataclass
class Why:
    """The paragraph and what it rests on, for the JSON report and for lab 10's grader."""

    text: str
    best: int | None
    runner_up: int | None
    baseline: int | None
    factor_vs_runner_up: str | None
    factor_vs_baseline: str | None


ASSUMPTIONS = {"allreduce": "the all-reduce estimate (--p2p-gbps, --overlap-grad-reduce)",
               "p2p": "the P2P estimate (--p2p-gbps, --p2p-latency-us)",
               "compute": "the FLOPs model's per-stage times (--tflops; measured costs would settle it)"}


def flipping_assumption(a: dict[str, float], b: dict[str, float]) -> str:
    """The estimate two near-equal step times differ on most: where a better figure could flip the order."""
    gaps = {"allreduce": abs(a["allreduce"] - b["allreduce"]), "p2p": abs(a["p2p"] - b["p2p"]),
            "compute": sum(abs(a[f] - b[f]) for f in ("compute", "imbalance", "bubble"))}
    return ASSUMPTIONS[max(gaps, key=gaps.__getitem__)]


def _against(best: Candidate, a: dict[str, float], other: Candidate, role: str, tolerance: float,
             parts_of) -> tuple[str, str]:
    """The sentence on ``best`` (whose breakdown is ``a``) against ``other``, and the factor that decided;
    ``parts_of(candidate)`` is its breakdown."""
    if other is best:
        return f"It is itself the {role}.", None
    if not other.fits:
        return (f"Against the {role}, {other.label()}: {FACTOR_WORDS['memory']} decided -- it does not fit "
                f"({other.why_not}).", "memory")
    b = parts_of(other)
    factor, gain = _largest_saving(a, b)
    margin = other.step_time_s / best.step_time_s - 1
    if abs(margin) <= tolerance:
        return (f"Against the {role}, {other.label()} at {1e3 * other.step_time_s:.1f} ms: within noise "
                f"({100 * margin:+.2f} %, inside the {100 * tolerance:g} % tolerance), so neither decided; "
                f"{flipping_assumption(a, b)} could flip them.", factor)
    rest = ", ".join(f"{f} {1e3 * (b[f] - a[f]):+.1f} ms" for f in FACTORS if f != factor and abs(b[f] - a[f]) > 5e-5)
    others = f"; the other factors: {rest}" if rest else ""
    return (f"Against the {role}, {other.label()} at {1e3 * other.step_time_s:.1f} ms: {FACTOR_WORDS[factor]} decided "
            f"({factor} {1e3 * gain:+.1f} ms for the {role}{others}).", factor)


def _tie_sentence(search: Search, best: Candidate, mine: dict[str, float], parts_of) -> str:
    """How the pick came out of a tie: how many were within the tolerance, and what it gives up."""
    ties = search.ties
    if len(ties) < 2:
        return ""
    fastest = search.candidates[search.fastest]
    depths = sorted({search.candidates[i].pp for i in ties})
    families = list(dict.fromkeys(search.candidates[i].schedule for i in ties))
    if fastest is best:
        which = ", and that is the fastest too."
    else:
        margin = best.step_time_s / fastest.step_time_s - 1
        which = (f": this one, {100 * margin:+.2f} % against the fastest, {fastest.label()}; "
                 f"{flipping_assumption(mine, parts_of(fastest))} could flip them.")
    return (f"{len(ties)} candidates are within {100 * search.tolerance:g} % of the fastest (pp "
            f"{', '.join(map(str, depths))}; {', '.join(families)}), a tie for the planner's estimates: it takes "
            "the simplest (fewer pipeline stages, one chunk a rank, a family more frameworks run, the framework's "
            f"own layer split, less memory){which}")


def explain(search: Search) -> Why:
    """Name the pick, say how it came out of a tie if it did, then which factor decided it against the runner-up
    and against plain 1F1B."""
    ranked = search.ranked
    if not ranked:
        worst = min((c for c in search.candidates if c.memory), key=lambda c: c.worst_memory_bytes, default=None)
        hint = (f"; the least memory any candidate needs is {worst.worst_memory_bytes / GB:.1f} GB ({worst.label()})"
                if worst else "")
        return Why(f"No candidate fits{hint}: more GPUs, more memory per GPU, recomputation, tensor parallelism or "
                   "the distributed optimizer would help.", None, None, baseline(search), None, None)
    pick = search.best
    best = search.candidates[pick]
    runner = next((i for i in ranked if i != pick), None)
    base = baseline(search, best)
    what = "the fastest that fits" if pick == search.fastest else "the pick"
    parts = [f"{best.label()} is {what}: {1e3 * best.step_time_s:.1f} ms a step, bubble "
             f"{100 * best.bubble_fraction:.1f} %, worst rank {best.worst_memory_bytes / GB:.1f} GB of "
             f"{search.hardware.gpu_memory_bytes / GB:g} GB."]
    vs_runner = vs_base = None
    known: dict[int, dict[str, float]] = {}

    def parts_of(cand: Candidate) -> dict[str, float]:  # (a breakdown simulates the step again: once per candidate)
        if id(cand) not in known:
            known[id(cand)] = breakdown(cand)
        return known[id(cand)]

    mine = parts_of(best)
    tie = _tie_sentence(search, best, mine, parts_of)
    if tie:
        parts.append(tie)
    if runner is not None:
        text, vs_runner = _against(best, mine, search.candidates[runner], "runner-up", search.tolerance, parts_of)
        parts.append(text)
    if base is not None:
        text, vs_base = _against(best, mine, search.candidates[base], "plain 1F1B baseline", search.tolerance,
                                 parts_of)
        parts.append(text)
    return Why(" ".join(parts), pick, runner, base, vs_runner, vs_base)
