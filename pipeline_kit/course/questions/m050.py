"""M050 (lab 7): Megatron's custom pipeline layout -- its string, where a layer lands, which layouts are
legal, and what a re-cut of the bank-pp8 model changes.

Expected values come from ``parse_layout``, the balancer and the simulator on the bank-pp8 model at
100 TFLOP/s (:mod:`.synthetic`).
"""

from __future__ import annotations

import contextlib
import io

from ...layout import (
    LayoutError,
    even_layout,
    p2p_volume,
    parse_layout,
    stage_costs,
)
from ...schedules import build_schedule
from ...sim import simulate
from ...grading.parts import Parts, plural
from .common import (
    book,
    call,
    check,
    close,
    counts_text,
    describe,
    draw_counts,
    drawn,
    expect_int,
    expect_keys,
    expect_number,
    expect_type,
    fail,
    student_layout,
)
from .m049 import _counts, expected_move
from .synthetic import (
    BANK,
    BANK_M,
    BANK_PP,
    TIGHT,
    _not_rounded,
    draw_bank_recut,
    bank_balance,
    bank_plan,
)

LANGUAGE = book("imbalance", "The language")  # where the book teaches what these checks find
BALANCER = book("imbalance", "Choosing a layout: the balancer")

# == M050 main ==========================================================================================
STRING_CASES = [[3, 3, 3, 3], [2, 3, 3, 2], [0, 4, 4, 0]]
WHERE_CASES = [("Et*3|t*3|t*3|t*3L", 4, 7), ("E|t*2|t*2|t*2|t*2|t*2|t*2|t*2L", 4, 0)]


@check
def check_layout_string(layout_string, cases) -> None:
    for counts in cases:
        got = call(layout_string, list(counts), name="layout_string")
        expect_type(got, str, f"layout_string({counts})")
        try:
            lay = parse_layout(got)
        except LayoutError as exc:
            fail(f"layout_string({counts}) = {got!r} does not parse: {exc}")
        if _counts(lay) != list(counts) or lay.num_stages != len(counts):
            fail(f"layout_string({counts}) = {got!r} has {plural(lay.num_stages, 'stage')} with {_counts(lay)} "
                 f"decoder layers; a layout of counts has one stage per count (stage k holds counts[k] t's) "
                 f"{LANGUAGE}")


@check
def check_where_is_layer(where_is_layer, cases) -> None:
    """Two parts, each over every case in order: the stage, and the (rank, chunk) of the student's own stage
    (so a wrong stage costs its part only)."""
    answers = []
    for text, pp, layer in cases:
        lay = parse_layout(text, pp=pp)
        stage = next(k for k, s in enumerate(lay.stages) if layer in s.layers)
        got = call(where_is_layer, text, pp, layer, name="where_is_layer")
        expect_type(got, (tuple, list), f"where_is_layer({text!r}, {pp}, {layer})")
        if len(got) != 3:
            fail(f"where_is_layer({text!r}, {pp}, {layer}) must be (stage, rank, chunk), got {describe(got)}")
        got = tuple(expect_int(x, f"where_is_layer({text!r}, {pp}, {layer})") for x in got)
        answers.append((text, pp, layer, lay, stage, got))
    parts = Parts()
    with parts.part():
        for text, pp, layer, lay, stage, got in answers:
            if got[0] == stage:
                continue
            off = next((k for k, s in enumerate(lay.stages) if layer + 1 in s.layers), None)
            hint = (" -- decoder layers are numbered from 0, and E and L are not decoder layers"
                    if got[0] == off else "")
            fail(f"where_is_layer({text!r}, {pp}, {layer}): decoder layer {layer} is not on stage {got[0]}{hint} "
                 f"{LANGUAGE}")
    with parts.part():
        for text, pp, layer, lay, stage, got in answers:
            own = got[0] if 0 <= got[0] < lay.num_stages else stage  # the student's stage: a wrong one costs once
            want = lay.owner(own, pp)
            if got[1:] == want:
                continue
            chunks = lay.chunks(pp)
            if got[1:] == (own // chunks, own % chunks):
                fail(f"where_is_layer({text!r}, {pp}, {layer}) = {got}: stages go round-robin, not in blocks of "
                     f"{plural(chunks, 'consecutive stage')} per rank {LANGUAGE}")
            fail(f"where_is_layer({text!r}, {pp}, {layer}) = {got}: that is not stage {own}'s rank and chunk -- "
                 f"stages go round-robin over the ranks {LANGUAGE}")
    parts.done()


PROFILE_TOLERANCE = 0.03


def even_split() -> str:
    """The even split of the bank-pp8 model on 8 stages (lab 7's ``even``)."""
    return str(even_layout(BANK.layers, BANK_PP))


def best_split() -> str:
    """The balancer's best layout of the bank-pp8 model on 8 stages, M = 16 (lab 7's ``best.layout``)."""
    return str(bank_balance().best.layout)


@check
def check_profile_layout(text, what: str = "my_layout") -> None:
    lay = student_layout(text, what, BANK_PP, BANK.layers)
    plan, best = bank_plan(text), bank_balance().best
    if plan.slowest_stage <= best.slowest_stage * (1 + PROFILE_TOLERANCE):
        return
    times = plan.stage_times
    slow = times.index(max(times))
    counts, even = _counts(lay), _counts(even_layout(BANK.layers, BANK_PP))
    if counts == even:
        fail(f"{what} is the even split: its slowest stage takes {plan.slowest_stage:.3f} ms (stage {slow}, two "
             f"layers plus the output layer) against {best.slowest_stage:.3f} ms for the best cut")
    if counts[0] < even[0]:
        fail(f"{what} takes layers off stage 0: it holds the most parameters, but the embedding is a lookup with no "
             f"FLOPs; the slowest stage is now {slow} at {max(times):.3f} ms, the best cut reaches "
             f"{best.slowest_stage:.3f} ms")
    fail(f"{what}: the slowest stage is {slow} at {max(times):.3f} ms per microbatch (F + B); the balancer reaches "
         f"{best.slowest_stage:.3f} ms -- be within {PROFILE_TOLERANCE:.0%} (stage times: "
         f"{', '.join(f'{t:.3f}' for t in times)})")


# -- legality ------------------------------------------------------------------------------------------
RULES = ("syntax", "empty", "E", "L", "layers", "stages")
LEGAL_CASES = [("Et*2|t*2|t*2|t*2L", 4, 8), ("Et*2||t*2L", 3, 4), ("t*2|Et*2L", 2, 4), ("Et*2|t*2|t*2", 3, 6),
               ("Et*2|t*2|t*2L", 2, 6), ("Et*3|t*2|t*2|tL", 4, 16), ("Et*2|t*2xL", 2, 4)]


def rule_of(text: str, pp: int, layers: int) -> str | None:
    """The rule parse_layout says ``text`` breaks (None when it is legal), as one of :data:`RULES`."""
    try:
        parse_layout(text, pp=pp, layers=layers)
    except LayoutError as exc:
        msg = str(exc)
        if "is empty" in msg:
            return "empty"
        if "an E" in msg or "has no E" in msg or "E must" in msg or "second E" in msg:
            return "E"
        if "has no L" in msg or "L must" in msg or "second L" in msg:
            return "L"
        if "decoder layers (t)" in msg:
            return "layers"
        if "which pp=" in msg:
            return "stages"
        return "syntax"
    return None


@check
def check_legality(legality, cases) -> None:
    for text, pp, layers in cases:
        want = rule_of(text, pp, layers)
        got = call(legality, text, pp, layers, name="legality")
        if got == want:
            continue
        try:
            parse_layout(text, pp=pp, layers=layers)
            said = "parse_layout accepts it"
        except LayoutError as exc:
            said = f"parse_layout says: {exc}"
        if want is None:
            fail(f"legality({text!r}, pp={pp}, layers={layers}) is {describe(got)}, but the layout is legal "
                 f"(return None); {said}")
        if got is not None and got not in RULES:
            fail(f"legality(...) must return None or one of {', '.join(RULES)}; got {describe(got)}")
        fail(f"legality({text!r}, pp={pp}, layers={layers}) is {describe(got)}, not the rule the layout breaks "
             f"-- {said}")


# -- metrics and risk ----------------------------------------------------------------------------------
METRIC_KEYS = ("step_ms", "idle_fraction", "max_over_min", "peak_act_mib", "p2p_mib")


def expected_layout_metrics(text: str) -> dict:
    lay = parse_layout(text, pp=BANK_PP, layers=BANK.layers)
    plan = bank_plan(text)
    act = [c.activation_bytes for c in stage_costs(lay, BANK, BANK_PP)]
    res = simulate(build_schedule("1f1b", BANK_PP, BANK_M), fwd=plan.stage_fwd, bwd=plan.stage_bwd,
                   activation_bytes=act)
    return {"step_ms": plan.makespan, "idle_fraction": plan.bubble_fraction,
            "max_over_min": max(plan.stage_times) / min(plan.stage_times),
            "peak_act_mib": max(res.peak_activation_bytes) / 2**20,
            "p2p_mib": p2p_volume(lay, BANK, BANK_M)["total_per_step"] / 2**20}


@check
def check_layout_metrics(layout_metrics, layouts) -> None:
    for text in layouts:
        got = call(layout_metrics, text, name="layout_metrics")
        expect_keys(got, METRIC_KEYS, f"layout_metrics({text!r})")
        want = expected_layout_metrics(text)
        lay = parse_layout(text)
        costs = stage_costs(lay, BANK, BANK_PP)
        plan = bank_plan(text)
        res = simulate(build_schedule("1f1b", BANK_PP, BANK_M), fwd=plan.stage_fwd, bwd=plan.stage_bwd)
        parts = Parts()
        for key in METRIC_KEYS:
            with parts.part():
                value = expect_number(got[key], f"layout_metrics({text!r})[{key!r}]")
                if close(value, want[key], rel=1e-4):
                    continue
                where = f"layout_metrics({text!r})[{key!r}] = {value:.4g}"
                if key == "step_ms" and close(value, want[key] / 1e3, rel=1e-4):
                    fail(f"{where} is in seconds; report ms (the value is right otherwise)")
                if key == "idle_fraction":
                    if close(value, res.bubble_over_ideal, rel=1e-4):
                        fail(f"{where} is (makespan - ideal) / ideal, the Megatron paper's ratio; the idle fraction is "
                             "idle time over all ranks' time, idle / (pp x makespan) -- SimResult.bubble_fraction")
                    if close(value, (BANK_PP - 1) / (BANK_M + BANK_PP - 1), rel=1e-4):
                        fail(f"{where} is the formula (pp-1)/(M+pp-1), which assumes equal stages -- the point here is "
                             "the imbalance idle on top of it: simulate")
                if key == "max_over_min":
                    params = [c.params for c in costs]
                    if close(value, max(params) / min(params), rel=1e-4):
                        fail(f"{where} is the parameter ratio; the metric is time: the slowest over the fastest "
                             f"stage's "
                             "F + B per microbatch")
                if key == "peak_act_mib":
                    per_stage = max(c.activation_bytes for c in costs) / 2**20
                    if close(value, per_stage, rel=1e-4):
                        fail(f"{where} is one microbatch's activations on the heaviest stage; a rank keeps several "
                             "microbatches in flight (stage 0 of 1F1B keeps pp): simulate with activation_bytes and "
                             "take "
                             "the max of peak_activation_bytes")
                if key == "p2p_mib" and close(value, want[key] / 2, rel=1e-4):
                    fail(f"{where} counts one direction; activations go forward and their gradients come back: "
                         "p2p_volume(...)['total_per_step']")
                fail(f"{where} is not the kit's value (bank-pp8, pp=8, M=16, FLOPs at 100 TFLOP/s, no P2P "
                     "latency)")
        parts.done()


# == M050 follow-up =====================================================================================
def endpoint_layouts() -> dict[str, str]:
    """The even split and the three endpoint re-cuts: one layer off the last, off the first, off both."""
    even = even_layout(BANK.layers, BANK_PP)
    text = str(even)
    last = expected_move(text, BANK_PP - 1, BANK_PP - 2)
    first = expected_move(text, 0, 1)
    return {"even": text, "last": last, "first": first, "both": expected_move(last, 0, 1)}


@check
def check_endpoints(endpoint_steps, worth_it) -> None:
    """Two parts: the four step times, and ``worth_it`` (judged against the student's own steps too, so a wrong
    step time costs its part only)."""
    layouts = endpoint_layouts()
    steps = {k: bank_plan(t).makespan for k, t in layouts.items()}
    parts, own = Parts(), {}
    with parts.part():
        expect_keys(endpoint_steps, tuple(layouts), "endpoint_steps")
        for key in layouts:
            own[key] = expect_number(endpoint_steps[key], f"endpoint_steps[{key!r}]")
        for key, text in layouts.items():
            got = own[key]
            if close(got, steps[key], rel=TIGHT):
                continue
            if close(got, bank_plan(text).slowest_stage, rel=1e-4):
                fail(f"endpoint_steps[{key!r}] = {got:.4g} is the slowest stage's F + B; the step time is the "
                     "simulated makespan of all 16 microbatches")
            _not_rounded(got, steps[key], f"endpoint_steps[{key!r}]")
            fail(f"endpoint_steps[{key!r}] = {got:.4g} ms is not the simulated step of {text} (bank-pp8, M=16, "
                 "100 TFLOP/s)")
    with parts.part():
        expect_keys(worth_it, ("first", "last"), "worth_it")
        for end in ("first", "last"):
            want = steps[end] < steps["even"] * (1 - 1e-9)
            mine = own[end] < own["even"] * (1 - 1e-9) if len(own) == len(layouts) else want
            got = worth_it[end]
            if not isinstance(got, bool):
                fail(f"worth_it[{end!r}] must be True or False, got {describe(got)}")
            if got in (want, mine):
                continue
            if end == "first":
                fail(f"worth_it['first'] is {got}, but one layer off the first stage does not shorten the step: "
                     "stage 0 has the parameters (the embedding table) but not the time, so unloading it changes "
                     "nothing the pipeline waits for")
            fail(f"worth_it['last'] is {got}, but one layer off the last stage shortens the step: the output "
                 "layer makes that stage the slowest")
    parts.done()


CONTROL_KEYS = ("pp", "microbatches", "micro_batch_size", "seq_len", "global_batch")


@check
def check_controls(controls) -> None:
    expect_type(controls, dict, "controls")
    if "layout" in controls:
        fail("controls holds 'layout', but the layout is the one thing the experiment varies -- leave it out")
    expect_keys(controls, CONTROL_KEYS, "controls")
    want = {"pp": BANK_PP, "microbatches": BANK_M, "micro_batch_size": BANK.micro_batch_size, "seq_len": BANK.seq_len,
            "global_batch": BANK_M * BANK.micro_batch_size}
    parts = Parts()
    for key in CONTROL_KEYS:
        with parts.part():
            got = expect_number(controls[key], f"controls[{key!r}]")
            if got == want[key]:
                continue
            if key == "global_batch":
                if got == BANK_M * BANK.micro_batch_size * BANK_PP:
                    fail(f"controls['global_batch'] = {got:g}: pipeline stages do not multiply the batch -- every "
                         "microbatch passes through all 8 stages; with no data parallelism GBS = M x micro-batch size")
                fail(f"controls['global_batch'] = {got:g}; with no data parallelism GBS = M x micro-batch size")
            fail(f"controls[{key!r}] = {got:g} is not the baseline's value: hold what the interview question "
                 "bank's run (the bank-pp8 preset) used")
    parts.done()


def expected_rank_idle(text: str) -> list[float]:
    plan = bank_plan(text)
    res = simulate(build_schedule("1f1b", BANK_PP, BANK_M), fwd=plan.stage_fwd, bwd=plan.stage_bwd)
    return res.idle


@check
def check_rank_idle(rank_idle, layouts) -> None:
    for text in layouts:
        got = call(rank_idle, text, name="rank_idle")
        want = expected_rank_idle(text)
        expect_type(got, (list, tuple), f"rank_idle({text!r})")
        if len(got) != len(want):
            fail(f"rank_idle({text!r}) has {len(got)} values; one per rank ({len(want)})")
        values = [expect_number(v, f"rank_idle({text!r})[{r}]") for r, v in enumerate(got)]
        for r, (g, w) in enumerate(zip(values, want)):
            if close(g, w, rel=1e-4, abs_=1e-6):
                continue
            plan = bank_plan(text)
            mk = plan.makespan
            if close(g, mk - w, rel=1e-4):
                fail(f"rank_idle({text!r})[{r}] = {g:.4g} ms is the rank's busy time; idle is makespan - busy")
            if close(g, w / mk, rel=1e-4):
                fail(f"rank_idle({text!r})[{r}] = {g:.4g} is a fraction; report ms")
            fail(f"rank_idle({text!r})[{r}] = {g:.4g} ms is not rank {r}'s idle time in the simulation (bank-pp8, "
                 f"M=16) {BALANCER}")


def expected_idle_drop(text: str) -> int:
    before, after = expected_rank_idle(str(even_layout(BANK.layers, BANK_PP))), expected_rank_idle(text)
    drops = [b - a for b, a in zip(before, after)]
    return drops.index(max(drops))


@check
def check_idle_drop(idle_drop_rank, text) -> None:
    got = expect_int(idle_drop_rank, "idle_drop_rank")
    want = expected_idle_drop(text)
    before, after = expected_rank_idle(str(even_layout(BANK.layers, BANK_PP))), expected_rank_idle(text)
    drops = [b - a for b, a in zip(before, after)]
    if not 0 <= got < BANK_PP or not close(drops[got], drops[want], rel=1e-6):
        fail(f"idle_drop_rank is {got}, but with {text} another rank's idle falls more: compare each rank's idle "
             "before and after; the ranks that waited for the slow last stage gain, the last rank does not")


GRAD_LAYOUT, GRAD_PP = "Et*3|t*2|t*2|tL", 4


@check
def check_grad_args(grad_check_args) -> None:
    from ...run import build_parser
    expect_type(grad_check_args, (list, tuple), "grad_check_args")
    for a in grad_check_args:
        expect_type(a, str, "every item of grad_check_args")
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(list(grad_check_args))
    except SystemExit:
        fail(f"pipeline_kit.run does not accept grad_check_args {describe(list(grad_check_args), 200)}: see "
             "`python -m pipeline_kit.run --help`")
    if not args.check_grads:
        fail("grad_check_args do not ask for the gradient check: add --check-grads (after step 1 every gradient is "
             "compared with a single-process reference)")
    if args.synthetic_compute is not None:
        fail("grad_check_args use --synthetic-compute: timed waits compute no gradients, so there is nothing to "
             "check -- the check needs real compute")
    if args.layout != GRAD_LAYOUT:
        fail(f"grad_check_args run layout {args.layout!r}; the re-cut to prove is {GRAD_LAYOUT!r}")
    try:
        parse_layout(args.layout, pp=GRAD_PP, layers=args.layers)
    except LayoutError as exc:
        fail(f"with --layers {args.layers} the layout does not fit: {exc} (the layout holds "
             f"{parse_layout(GRAD_LAYOUT).num_layers} decoder layers)")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_string_cases(rng) -> list:
    """Decoder layers per stage: the endpoint stages may hold none (they hold E or L), the others at least one."""
    return drawn(rng, 3, lambda r: draw_counts(r, r.randint(2, 8)), fixed=[[5], [1, 1]])


def hidden_where_cases(rng) -> list:
    """(layout, pp, layer): pp x chunks stages (chunks 1 to 3), a decoder layer anywhere; the fixed cases use the
    repeat syntax and a single stage."""
    def make(r):
        pp, chunks = r.randint(1, 4), r.randint(1, 3)
        counts = draw_counts(r, pp * chunks, most=3)
        return counts_text(counts), pp, r.randrange(sum(counts))
    return drawn(rng, 4, make, fixed=[("E|(t*2|)*6t*2L", 2, 9), ("Et*4L", 1, 3)])


def _break(r, counts: list[int], pp: int) -> tuple[str, int, int]:
    """A legal layout for ``pp`` with one rule broken (or none): each branch breaks exactly one of :data:`RULES`."""
    text, layers = counts_text(counts), sum(counts)
    parts = text.split("|")
    rule = r.choice([None, None, *RULES])
    if rule == "syntax":
        k = r.randrange(len(parts))
        parts[k] += r.choice(["x", "t*", "T", "t*2t*"])
    elif rule == "empty" and len(parts) > 2:
        parts[r.randrange(1, len(parts) - 1)] = ""
    elif rule == "E":
        parts[0] = parts[0][1:] or "t"
        layers += parts[0] == "t"
        if len(parts) > 1 and r.random() < 0.5:
            parts[-1] = "E" + parts[-1]
    elif rule == "L":
        parts[-1] = parts[-1][:-1] or "t"
        layers += parts[-1] == "t"
        if len(parts) > 1 and r.random() < 0.5:
            parts[0] += "L"
    elif rule == "layers":
        layers += r.choice([d for d in (-2, -1, 1, 3) if layers + d >= 1])
    elif rule == "stages":
        pp = r.choice([p for p in range(2, 9) if len(parts) % p])
    return "|".join(parts), pp, layers


def hidden_legal_cases(rng) -> list:
    """(layout, pp, layers), legal or breaking one rule; the fixed cases are t*0 and a stage with only E."""
    def make(r):
        pp = r.randint(1, 4)
        return _break(r, draw_counts(r, pp * r.randint(1, 3), most=4), pp)
    return drawn(rng, 8, make, fixed=[("Et*0|t*3L", 2, 3), ("E|t*4|t*4|L", 4, 8)])


def hidden_metric_cuts(rng) -> list[str]:
    """Re-cuts of the bank-pp8 model; the fixed one leaves a single decoder layer on each endpoint stage."""
    return drawn(rng, 2, draw_bank_recut, fixed=["Et|t*3|t*2|t*2|t*2|t*2|t*3|tL"])


def hidden_idle_cuts(rng) -> list[str]:
    """Re-cuts of the bank-pp8 model; the fixed one leaves stage 0 with the embedding only."""
    return drawn(rng, 1, draw_bank_recut, fixed=["E|t*3|t*3|t*2|t*2|t*2|t*2|t*2L"])
