"""Planning a pipeline (lab 10, the capstone): size a rank, choose a configuration, predict it, explain it.

Why a question outside M041-M054: the bank asks each decision on its own (the bubble, the layout, interleaving,
memory per rank); an engineer meets them all at once -- for this model, on these GPUs, under this budget, which
schedule, pp, v and layout, and why.  The rubric keeps the bank's shape: 10 points for the main question, 5 for
the follow-up.

Every expected value is the planner's (:mod:`pipeline_kit.plan`): ``rank_memory`` for the memory terms, the
search's prediction for a step time, ``deciding_factor`` against plain 1F1B.  The student hands over plain data
(a config dict, numbers, strings) and functions the grader calls through the wire; the judge of a configuration
is :mod:`.plan_problem`.  Typical wrong answers are recognised by value.
"""

from __future__ import annotations

import re

from ...plan.explain import DECIDERS, FACTORS, breakdown, deciding_factor
from ...language import translated
from ...grading.parts import Parts
from .common import (
    LabCheckFailed,
    book,
    call,
    check,
    close,
    describe,
    drawn,
    expect_keys,
    expect_number,
    expect_type,
    fail,
    first_match,
)
from .plan_problem import (
    GB,
    LAB_GLOBAL_BATCH,
    LAB_HARDWARE,
    LAB_MODEL,
    NEAR_BEST,
    PREDICTION,
    TERMS,
    _balanced,
    baseline_of,
    best,
    hidden_memory_cases,
    lab_search,
    memory_cases,
    problem,
    runnable,
    sized,
    try_runnable,
)

__all__ = [
    "DECIDERS", "FACTORS", "TERMS", "check_baseline", "check_decide", "check_factor", "check_feasible",
    "check_memory_terms", "check_step_time", "check_worst", "decide_cases", "hidden_decide_cases",
    "hidden_memory_cases", "lab_search", "marks", "memory_cases", "problem",
]


# -- main: the memory of every rank ------------------------------------------------------------------------------
def _label(model, config) -> str:
    v = f" v={config['chunks']}" if config["chunks"] != 1 else ""
    on = "the lab's model" if model == LAB_MODEL else (f"a model of {model.layers} layers, hidden {model.hidden}, "
                                                     f"seq {model.seq_len}, micro-batch {model.micro_batch_size}")
    return f"{config['schedule']} pp={config['pp']}{v} M={config['microbatches']} on {on}"


def _terms(got, config, label: str) -> list[dict]:
    if isinstance(got, dict):
        fail(f"memory_terms for {label} is a dict; return a list with one dict per rank, rank 0 first")
    expect_type(got, (list, tuple), f"memory_terms for {label}")
    if len(got) != config["pp"]:
        fail(f"memory_terms for {label} gives {len(got):,} entries; give one dict per rank ({config['pp']:,})")
    for r, entry in enumerate(got):
        expect_keys(entry, TERMS, f"memory_terms(...)[{r}] for {label}")
        for term in TERMS:
            expect_number(entry[term], f"memory_terms(...)[{r}][{term!r}] for {label}")
    return [{t: float(e[t]) for t in TERMS} for e in got]


_TERM_HINTS = {
    "weights": "a rank's weights are its stages' parameters at dtype_bytes each",
    "gradients": "one gradient per parameter of the rank's stages",
    "optimizer": "the optimizer state of the rank's parameters",
    "activations": ("walk the rank's op order: a forward adds its stage's activation bytes, a B (or a W) frees them; "
                    "give the activations held where activations plus W's kept gradients peak"),
    "wgrad_kept": "the output gradients held from each I to its W, at the rank's peak",
    "p2p_buffers": "the receive buffers a rank keeps for its pipeline neighbours",
}


def _term_case(term: str, label: str, got: list[dict], want, model, chunks: int) -> None:
    for r, (mine, kit) in enumerate(zip(got, want)):
        g, w = mine[term], float(getattr(kit, term))
        if close(g, w, rel=1e-6, abs_=1.0):
            continue
        params = kit.params
        known = {
            "weights": [(4 * params, "weights in fp32; they are trained in bf16, dtype_bytes each"),
                        (0, "the weights are missing")],
            "gradients": [(model.dtype_bytes * params, ("gradients at dtype_bytes; Megatron accumulates them in an "
                                                       "fp32 main_grad, 4 bytes per parameter")),
                          (0, "the gradients are missing")],
            "optimizer": [(0, "the optimizer state is missing: Adam keeps state for every parameter it updates"),
                          (8 * params, ("Adam's two moments but no fp32 master copy: with bf16 weights the optimizer "
                                        "updates an fp32 copy of them")),
                          (16 * params, "that counts the weights and gradients again; give the optimizer state only"),
                          (18 * params, "that is all of the state per parameter; give the optimizer's share only")],
            "activations": [(0, "the activations are missing")],
            "wgrad_kept": [(0, ("W's kept gradients are missing: a split backward runs I now and W later, and keeps "
                                "the output gradients W needs in between"))],
            "p2p_buffers": [(0, "the P2P buffers are missing"),
                            (w / 2, "count a buffer for the activation and one for its gradient"),
                            *([(w / chunks, "the buffers are per chunk: a rank keeps a pair for each of its chunks")]
                              if chunks > 1 else [])],
        }[term]
        if term == "wgrad_kept" and w == 0:
            why = "only the split-backward families (I and W) keep gradients for W; this schedule runs a whole B"
        elif term == "p2p_buffers" and w == 0:
            why = "a model of one stage has no pipeline neighbours and no P2P buffers"
        else:
            why = first_match(g, known) or f"{_TERM_HINTS[term]} {book('planning', 'The memory model')}"
        fail(f"memory_terms for {label}: rank {r}'s {term!r} = {g:,.0f} bytes is not the kit's model's: {why}")


@check
def check_memory_terms(memory_terms, cases) -> None:
    """Six parts, one per term: each fails on its first failing case."""
    results = []
    for model, config in cases:
        label = _label(model, config)
        got = call(memory_terms, model, config, name="memory_terms", shown=f"memory_terms for {label}")
        results.append((label, _terms(got, config, label), sized(model, config), model, config["chunks"]))
    parts = Parts()
    for term in TERMS:
        with parts.part():
            for label, got, want, model, chunks in results:
                _term_case(term, label, got, want, model, chunks)
    parts.done()


# -- main: the choice ------------------------------------------------------------------------------------------
def _over_hint(cand) -> str:
    """What to change so that an over-budget configuration fits, in the student's own terms (its layout, its pp and
    v, its family) and never a configuration: each hint names a change after which some configuration of the
    planner's search fits."""
    kin = [c for c in lab_search().candidates if c.fits and c.schedule == cand.schedule]
    if any(c.pp == cand.pp and c.chunks == cand.chunks for c in kin):
        return (f"; {cand.schedule} fits at this pp and v with another layout: rank {cand.worst_rank} is the "
                "fullest, so give it fewer layers")
    if kin:
        return (f"; no layout makes {cand.schedule} fit at this pp and v, but it fits at another: try the other "
                "shapes its family takes (a deeper pipeline puts fewer layers on each rank)")
    return (f"; no layout, pp or v makes {cand.schedule} fit: choose a family that keeps less alive at once "
            f"{book('memory', 'Three kinds of memory on a rank')}")


@check
def check_feasible(config) -> None:
    """Runs (the family accepts it, M follows from the batch, a legal layout): half; fits the budget: half.  A
    configuration that cannot run cannot fit either: it loses both."""
    cand = runnable(config)
    if not cand.fits:
        raise LabCheckFailed(f"my_config does not fit the budget: rank {cand.worst_rank}, its fullest, is over "
                             f"{LAB_HARDWARE.gpu_memory_bytes / GB:g} GB{_over_hint(cand)}", lost=0.5)


def _first_sentence(text: str) -> str:
    """What is wrong, without the why that follows the first colon: the feasibility check gives the whole (in the
    notebook's language: the whole translated first, then cut)."""
    return re.split(r": |：", translated(text), maxsplit=1)[0]


def _cannot_run(config) -> None:
    try:
        runnable(config)
    except LabCheckFailed as exc:
        fail(f"my_config cannot run, so there is nothing to predict: {_first_sentence(str(exc))} (the feasibility "
             "check's feedback says more)")


def _own_worst(memory_terms, config) -> float | None:
    if memory_terms is None:
        return None
    try:
        own = _terms(call(memory_terms, LAB_MODEL, config, name="memory_terms"), config, "my_config")
    except LabCheckFailed:
        return None
    return max(sum(t.values()) for t in own)


@check
def check_worst(my_worst_bytes, config, memory_terms=None) -> None:
    """``memory_terms``: the student's; a worst rank that follows a wrong ``memory_terms`` passes here (that check
    charges the mistake)."""
    cand = try_runnable(config)
    if cand is None:
        _cannot_run(config)
    got = expect_number(my_worst_bytes, "my_worst_bytes")
    want = cand.worst_memory_bytes
    if close(got, want, rel=1e-3):
        return
    own = _own_worst(memory_terms, config)
    if own is not None and close(got, own, rel=1e-3):
        return
    totals = cand.peak_memory_bytes
    why = first_match(got, [
        (sum(totals) / len(totals), ("that is the average rank; the budget must hold the fullest rank, and the "
                                     "ranks differ (the first holds more activations, the last the loss)")),
        (want / GB, "that is in GB; give bytes"),
        (want / 2 ** 30, "that is in GiB; give bytes"),
        (sum(totals), "that is all the ranks together; size one GPU, the fullest"),
        (totals[0], "that is rank 0's; another rank is fuller"),
    ] + ([(sum(_own_totals(memory_terms, config)) / len(totals), "that is the average of your own ranks; give the "
                                                                  "fullest")] if own is not None else []))
    fail(f"my_worst_bytes = {got:,.0f} is not the bytes of my_config's fullest rank by the kit's model: "
         f"{why or 'size every rank with memory_terms and take the fullest'}")


def _own_totals(memory_terms, config) -> list[float]:
    own = _terms(call(memory_terms, LAB_MODEL, config, name="memory_terms"), config, "my_config")
    return [sum(t.values()) for t in own]


@check
def check_step_time(my_step_time_s, config) -> None:
    """Two parts: the prediction (within PREDICTION of the planner's for my_config) and the choice (the planner's step
    time of my_config within 5 % of the fastest configuration that fits)."""
    cand = try_runnable(config)
    if cand is None:
        _cannot_run(config)
    parts = Parts()
    with parts.part():
        got = expect_number(my_step_time_s, "my_step_time_s")
        want = cand.step_time_s
        if not close(got, want, rel=PREDICTION):
            free = cand.pipeline_time_s - breakdown(cand)["p2p"] + cand.allreduce_time_s
            why = first_match(got, [
                (1e3 * want, "that is in milliseconds; give seconds"),
                (free, ("that is the step with free P2P: every transfer takes the link's latency plus the boundary "
                        "tensor's bytes over its bandwidth")),
                (max(cand.busy_s), "that is the busiest rank's work alone; the step also waits in the bubble"),
                (sum(cand.busy_s) / len(cand.busy_s), ("that is the average rank's work alone; the step also waits "
                                                      "for the busiest rank, in the bubble and for P2P")),
            ], rel=PREDICTION) or "simulate my_config with the per-stage times of the FLOPs model and the P2P time"
            fail(f"my_step_time_s = {got:.6g} s is not within {100 * PREDICTION:g} % of the planner's prediction for "
                 f"my_config: {why}")
    with parts.part():
        top = best()
        if cand.step_time_s > (1 + NEAR_BEST) * top.step_time_s:
            fail(f"my_config's predicted step is more than {100 * NEAR_BEST:g} % slower than the fastest "
                 "configuration that fits the budget: look again at the families that shrink the bubble and at the "
                 f"balance of the stages {book('planning', 'What the planner does')}")
    parts.done()


# -- follow-up: against plain 1F1B -----------------------------------------------------------------------------
def marks(config) -> list:
    """What the follow-up's plot marks: the student's configuration (where it can run at all) and plain 1F1B at
    its pp -- never the planner's pick, which would give the choice away."""
    cand = try_runnable(config)
    if cand is None:
        return []
    return [("yours", cand), (f"plain 1F1B, pp={cand.pp}", baseline_of(cand.pp))]


def _pp_of(config) -> int:
    if not isinstance(config, dict) or type(config.get("pp")) is not int or config["pp"] < 1 \
            or LAB_HARDWARE.gpus % config["pp"]:
        fail("my_config has no pp that divides the GPUs, so it has no baseline at its pp")
    return config["pp"]


def _own_step(predict, config) -> float | None:
    """The step time the student's own ``predict`` gives ``config`` (the sum of its parts), or None."""
    if predict is None:
        return None
    try:
        got = call(predict, config, name="predict")
        expect_keys(got, FACTORS, "predict(...)")
        return sum(expect_number(got[f], f"predict(...)[{f!r}]") for f in FACTORS)
    except LabCheckFailed:
        return None


@check
def check_baseline(baseline_step_time_s, config, predict=None) -> None:
    """``predict``: the student's; a baseline that follows a wrong ``predict`` passes here when ``predict`` is wrong
    for my_config too (the step time's check charges that mistake)."""
    pp = _pp_of(config)
    base = baseline_of(pp)
    got = expect_number(baseline_step_time_s, "baseline_step_time_s")
    want = base.step_time_s
    if close(got, want, rel=PREDICTION):
        return
    m = LAB_GLOBAL_BATCH // (LAB_HARDWARE.gpus // pp * LAB_MODEL.micro_batch_size)
    plain = {"schedule": "1f1b", "pp": pp, "chunks": 1, "microbatches": m, "layout": base.layout}
    mine = try_runnable(config)
    own, own_mine = _own_step(predict, plain), _own_step(predict, config) if mine else None
    if own is not None and close(got, own, rel=PREDICTION) and own_mine is not None \
            and not close(own_mine, mine.step_time_s, rel=PREDICTION):
        return
    balanced = runnable({**plain, "layout": str(_balanced(LAB_MODEL, pp))}, "the balanced 1F1B")
    why = first_match(got, [
        (balanced.step_time_s, "that is 1F1B on a balanced layout; the baseline is plain 1F1B, the even split"),
        (1e3 * want, "that is in milliseconds; give seconds"),
        (want - breakdown(base)["p2p"], "that is the baseline with free P2P; its transfers take time too"),
    ] + ([(mine.step_time_s, "that is my_config's own step time; give plain 1F1B's")] if mine else []),
        rel=PREDICTION) or "plain 1F1B: the even split of the layers over the same pp, the same M"
    fail(f"baseline_step_time_s = {got:.6g} s is not within {100 * PREDICTION:g} % of the planner's prediction for "
         f"plain 1F1B at pp={pp}: {why}")


def _decider(got, what: str) -> str:
    expect_type(got, str, what)
    if got not in DECIDERS:
        fail(f"{what} = {describe(got)}; choose one of {', '.join(map(repr, DECIDERS))}")
    return got


def _own_factor(decide, cand, base) -> str | None:
    """What the student's own ``decide`` says on the planner's parts of my_config and the baseline, when that
    ``decide`` is wrong there; else None."""
    if decide is None:
        return None
    other = breakdown(base) if base.fits else None
    try:
        own = call(decide, breakdown(cand), other, name="decide")
    except LabCheckFailed:
        return None
    return own if own != deciding_factor(cand, base)[0] else None


@check
def check_factor(my_factor, config, decide=None) -> None:
    """``decide``: the student's; a factor that follows a wrong ``decide`` passes here (its check charges it).  When
    my_config is the baseline itself there is nothing to compare: ``None`` is the answer."""
    cand = try_runnable(config)
    if cand is None:
        _cannot_run(config)
    base = baseline_of(cand.pp)
    if cand.schedule == "1f1b" and cand.layout == base.layout:
        if my_factor is None:
            return  # one decision is charged once: choosing the baseline costs the choice's points, not these
        fail("my_config is plain 1F1B with the even split, the baseline itself: nothing decided between the two, so "
             "my_factor is None")
    got = _decider(my_factor, "my_factor")
    want, _ = deciding_factor(cand, base)
    if got == want or got == _own_factor(decide, cand, base):
        return
    if got == "memory":
        why = "the baseline fits the budget too, so memory did not decide: compare the parts of the two step times"
    elif want == "memory":
        why = "the baseline does not fit the budget at all"
    elif got == max(FACTORS, key=breakdown(cand).__getitem__):
        why = "that is the largest part of my_config's own step, not its largest saving against the baseline"
    else:
        why = ("another factor saves more: cut both step times into compute, imbalance, bubble, p2p and allreduce, "
               "and take the factor where my_config gains the most seconds")
    fail(f"my_factor = {got!r}, but that is not what decided my_config against plain 1F1B at pp={cand.pp}: {why}")


def _decide_want(winner: dict, other) -> str:
    if other is None:
        return "memory"
    return max(FACTORS, key=lambda f: other[f] - winner[f])


@check
def check_decide(decide, cases) -> None:
    for winner, other in cases:
        shown = f"decide({describe(winner, 200)}, {describe(other, 200)})"
        got = _decider(call(decide, winner, other, name="decide", shown=shown), shown)
        want = _decide_want(winner, other)
        if got == want:
            continue
        if other is None:
            why = "the other does not fit at all (None): no step time to compare"
        elif got == max(FACTORS, key=other.__getitem__):
            why = "that is the other's largest part; the decider is where the winner saves the most"
        elif got == max(FACTORS, key=winner.__getitem__):
            why = "that is the winner's largest part; the decider is where the winner saves the most"
        elif got == min(FACTORS, key=lambda f: other[f] - winner[f]):
            why = "upside down: that is where the winner loses the most against the other"
        else:
            why = "take the factor with the largest saving, other's seconds minus the winner's"
        fail(f"{shown} = {got!r}: {why}")


def _parts(compute, imbalance, bubble, p2p, allreduce) -> dict:
    return {"compute": compute, "imbalance": imbalance, "bubble": bubble, "p2p": p2p, "allreduce": allreduce}


def decide_cases() -> list:
    """The visible cases: imbalance decides (the other's largest part is compute, the winner loses on allreduce)."""
    return [(_parts(0.030, 0.002, 0.010, 0.001, 0.001), _parts(0.030, 0.009, 0.014, 0.0015, 0.0))]


def hidden_decide_cases(rng) -> list:
    def make(r):
        winner = _parts(*(round(r.uniform(0, 0.05), 6) for _ in FACTORS))
        other = None if r.random() < 0.2 else _parts(*(round(r.uniform(0, 0.05), 6) for _ in FACTORS))
        return winner, other
    # the bubble decides where the other's largest part is the bubble too but the winner's is compute; then the
    # other does not fit; then compute decides while the winner loses on the all-reduce
    fixed = [(_parts(0.020, 0.005, 0.003, 0.002, 0.0), _parts(0.021, 0.005, 0.022, 0.0005, 0.0)),
             (_parts(0.020, 0.001, 0.002, 0.001, 0.0), None),
             (_parts(0.010, 0.001, 0.002, 0.0002, 0.003), _parts(0.040, 0.001, 0.008, 0.0002, 0.0))]
    return drawn(rng, 3, make, fixed=fixed)
