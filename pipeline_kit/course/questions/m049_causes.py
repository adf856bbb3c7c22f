"""M049 (lab 7), main point 2: four root causes of a slow stage, told apart by their numbers.

The scenarios are built here from a cause and a place (``scenario``); the answer is how a scenario was built,
and the scenario's numbers (from the layout's FLOPs at the lab's speed, with +-2% noise) show it.
"""

from __future__ import annotations

import random

from ...layout import ModelSpec, parse_layout, stage_costs
from .common import book, call, check, describe, drawn, expect_int, expect_type, fail
from .synthetic import LAB_P2P_MS, LAB_TFLOPS

# -- root causes ---------------------------------------------------------------------------------------
CAUSES = ("compute", "recompute", "communication", "dynamic")
_CAUSE_MODEL = ModelSpec(vocab=4096, seq_len=1024, hidden=1024, heads=16, layers=12, micro_batch_size=1)


def scenario(cause: str, pp: int, where: int, seed: int) -> dict:
    """Per-stage numbers (ms, GFLOP) of a PP run with one root cause at stage (or boundary) ``where``."""
    layers = 3 * pp
    counts = [3] * pp
    if cause == "compute":  # two layers moved onto stage `where` from its neighbours' share
        counts[where] += 2
        counts[(where + 1) % pp] -= 1
        counts[(where + 2) % pp] -= 1
    text = "|".join(("E" if k == 0 else "") + f"t*{n}" + ("L" if k == pp - 1 else "") for k, n in enumerate(counts))
    spec = ModelSpec(**{**_CAUSE_MODEL.to_dict(), "layers": layers})
    gflop = [c.fwd_flops / 1e9 for c in stage_costs(parse_layout(text, pp, layers), spec, pp)]
    rng = random.Random(seed)

    def wobble(x: float) -> float:
        return round(x * (1 + 0.02 * (2 * rng.random() - 1)), 3)

    fwd = [wobble(g / LAB_TFLOPS) for g in gflop]
    bwd = [wobble(2 * f) for f in fwd]
    p95 = [wobble(1.04 * f) for f in fwd]
    hops = [wobble(LAB_P2P_MS) for _ in range(pp - 1)]
    if cause == "recompute":
        bwd[where] = wobble(3 * fwd[where])
    elif cause == "dynamic":
        p95[where] = wobble(2.1 * fwd[where])
    elif cause == "communication":
        hops[where] = wobble(12 * LAB_P2P_MS)
    return {"gflop": [round(g, 2) for g in gflop], "F_p50": fwd, "F_p95": p95, "B_p50": bwd, "hop_ms": hops}


_LAB_RECIPES = {"A": ("recompute", 4, 1, 1), "B": ("communication", 4, 2, 2), "C": ("compute", 4, 2, 3),
                "D": ("dynamic", 4, 0, 4)}  # how the lab's scenarios are built: (cause, pp, where, seed) -- the answers
LAB_CASES = tuple(_LAB_RECIPES)  # the names of the lab's scenarios, "A" to "D"


def _recipes(cases) -> dict[str, tuple]:
    """``cases``: names of the lab's scenarios, or a dict name -> (cause, pp, where, seed) recipe."""
    return dict(cases) if isinstance(cases, dict) else {name: _LAB_RECIPES[name] for name in cases}


def lab_scenarios(cases=LAB_CASES) -> dict[str, dict]:
    """The scenarios students see: name -> per-stage numbers (the cause stays hidden)."""
    return {name: scenario(*args) for name, args in _recipes(cases).items()}


def expected_cause(s: dict) -> tuple[str, int]:
    f, p95, b, hops = s["F_p50"], s["F_p95"], s["B_p50"], s["hop_ms"]
    spread = [q / x for q, x in zip(p95, f)]
    if max(spread) > 1.3:
        return "dynamic", spread.index(max(spread))
    if hops and max(hops) > 3 * min(hops):
        return "communication", hops.index(max(hops))
    ratio = [y / x for x, y in zip(f, b)]
    if max(ratio) > 2.5:
        return "recompute", ratio.index(max(ratio))
    total = [x + y for x, y in zip(f, b)]
    return "compute", total.index(max(total))


# What the cause a student names would look like in the numbers: the feedback says what their claim predicts, and
# that the scenario does not show it -- never which cause (or where) it does show.
_CLAIM_WHY = {
    "compute": "a static compute cause grows a stage's forward and backward together with its GFLOP, B/F about 2, "
               "with p95 near p50 and every hop alike -- here one of those is off",
    "recompute": "activation recomputation inflates only a stage's backward (B/F about 3 instead of 2); no stage "
                 "shows that here",
    "communication": "a slow link shows as one boundary's hop_ms many times the others'; no boundary shows that here",
    "dynamic": "a dynamic cause shows as one stage's p95 about twice its p50; no stage shows that here",
}
ROOT_CAUSES = book("imbalance", "Root causes, and how each one shows up")  # where the book teaches them


@check
def check_root_causes(root_cause, cases) -> None:
    """``cases``: names of the lab's scenarios (:data:`LAB_CASES`) or a dict name -> (cause, pp, where, seed),
    as :func:`hidden_cause_cases` draws them; the answer is how the scenario was built."""
    for name, (cause_built, pp, where_built, seed) in _recipes(cases).items():
        want = (cause_built, where_built)
        got = call(root_cause, scenario(cause_built, pp, where_built, seed), name="root_cause")
        expect_type(got, (tuple, list), f"root_cause(scenario {name})")
        if len(got) != 2:
            fail(f"root_cause(scenario {name}) must return (cause, index), got {describe(got)}")
        cause, where = got
        if cause not in CAUSES:
            fail(f"root_cause(scenario {name}) returned cause {describe(cause)}; use one of {', '.join(CAUSES)}")
        place = "boundary" if want[0] == "communication" else "stage"
        if cause != want[0]:
            fail(f"scenario {name} (pp={pp}): you said {cause!r}, but {_CLAIM_WHY[cause]} {ROOT_CAUSES}")
        where = expect_int(where, f"the index root_cause(scenario {name}) returns")
        if where != want[1]:
            extra = (" (boundary j is the link between stage j and stage j + 1: an index into hop_ms)"
                     if place == "boundary" else "")
            fail(f"scenario {name} (pp={pp}): the cause {cause!r} is right, but not at {place} {where}{extra}: find "
                 f"the {place} whose numbers break the pattern")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_cause_cases(rng) -> dict:
    """Scenarios ``name -> (cause, pp, where, seed)``: first :data:`FIXED_CAUSES` (every cause at both ends of a
    short and a long pipeline, so a rule fitted to PP4 or to the middle fails on the same case under every seed),
    then six with one root cause at a drawn place."""
    def make(r):
        cause, pp = r.choice(CAUSES), r.randint(3, 8)
        return cause, pp, r.randrange(pp - 1) if cause == "communication" else r.randrange(pp), r.randrange(10_000)
    return {f"H{i}": recipe for i, recipe in enumerate(drawn(rng, 6, make, fixed=FIXED_CAUSES))}


FIXED_CAUSES = [("recompute", 3, 0, 21), ("communication", 8, 6, 22), ("compute", 8, 7, 23), ("dynamic", 8, 7, 24),
                ("recompute", 8, 7, 25), ("communication", 3, 0, 26), ("compute", 3, 0, 27), ("dynamic", 3, 2, 28)]
