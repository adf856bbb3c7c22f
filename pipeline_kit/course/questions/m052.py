"""M052 (lab 8): what sets each rank's activation memory, and why "parameters / PP" mispredicts it.

Expected values come from the layout cost model (bytes and parameters) and the simulator's live
activations; the checks name GPipe's memory for 1F1B's, "parameters / PP", and the missing endpoint terms.
"""

from __future__ import annotations

import json
from fractions import Fraction

from ...layout import PRESETS, ModelSpec, even_layout, parse_layout, stage_costs
from ...layout.costs import layer_activation_bytes, layer_activation_units, layer_params, loss_params
from ...schedules import interleaved_warmup
from ...sim import SimResult, simulate
from ...trace import Timeline, live_activations
from .common import (
    LabCheckFailed,
    book,
    call,
    check,
    close,
    counts_text,
    describe,
    draw_counts,
    draw_spec,
    drawn,
    expect_keys,
    expect_number,
    expect_type,
    fail,
    first_match,
    kit_run_file,
    plain,
)
from ...grading.parts import Parts, plural
from .m051 import _schedule

BANK = {"pp": 8, "microbatches": 16, "bytes_per_param": 16}
THREE_KINDS = book("memory", "Three kinds of memory on a rank")  # where the book teaches what these checks find
COUNTS_TO_BYTES = book("memory", "From counts to bytes: the question bank's PP8 model")
MEASURING = book("memory", "Measuring it")
FP32_SPEC = ModelSpec(vocab=1000, seq_len=128, hidden=256, heads=8, layers=4, micro_batch_size=2, dtype_bytes=4)


# -- M052 main ----------------------------------------------------------------------------------------
@check
def check_stage_bytes(stage_bytes, cases) -> None:
    for layout_text, spec, pp in cases:
        for c in stage_costs(parse_layout(layout_text), spec, pp):
            st = c.spec
            n = len(st.layers)
            got = expect_number(call(stage_bytes, spec, n, st.embedding, st.loss, name="stage_bytes"),
                       f"stage_bytes(spec, {n}, {st.embedding}, {st.loss})")
            want = c.activation_bytes
            if close(got, want, rel=1e-9):
                continue
            s, b, h, a = spec.seq_len, spec.micro_batch_size, spec.hidden, spec.heads
            V, d = spec.vocab, spec.dtype_bytes
            tokens = s * b
            layer = layer_activation_bytes(spec)
            units = layer_activation_units(spec)  # 18 + 4f: 34 for the usual MLP of 4h
            ends = (tokens * h * d if st.embedding else 0) + (tokens * V * 4 + tokens * h * d if st.loss else 0)
            why = first_match(got, [
                (n * s * b * h * units * d / 2 + ends, ("the attention-scores term 5*a*s/h is missing: without "
                                                        "recomputation each layer keeps its a x s x s scores")),
                (n * s * b * h * (units + 5 * a * s / h) + ends, ("scale by dtype_bytes / 2: the bytes per s*b*h "
                                                                 "are counted for 16-bit training")),
                *([(n * s * b * h * (34 + 5 * a * s / h) * d / 2 + ends,
                    f"34 is 18 + 4f for an MLP 4h wide; this model's MLP is ffn_mult = {spec.ffn_mult} times h")]
                  if spec.ffn_mult != 4 else []),
                (n * layer + (tokens * h * d if st.embedding else 0)
                 + (tokens * V * d + tokens * h * d if st.loss else 0),
                 "the logits are kept in fp32 for the loss: s*b*V x 4 bytes, whatever the training dtype"),
                (n * layer + (tokens * V * 4 if st.loss else 0) + (tokens * h * d if st.embedding else 0),
                 "the loss stage also keeps its input, s*b*h x dtype_bytes"),
                (n * layer + (tokens * V * 4 + tokens * h * d if st.loss else 0),
                 "the embedding stage keeps its output, s*b*h x dtype_bytes"),
                (n * layer, ("the endpoints are missing: the embedding output on the first stage, the fp32 logits "
                             "(and their input) on the last")),
            ]) or "revisit what each layer keeps per token, and the endpoint terms"
            fail(f"stage_bytes for {st.text()} (s={s}, b={b}, h={h}, a={a}, V={V}, {d}-byte) = {got:,.0f}: {why} "
                 f"{THREE_KINDS}")


def expected_alive(schedule: str, pp: int, m: int, rank: int, v: int = 1) -> int:
    return simulate(_schedule(pp, m, v, schedule)).peak_activations[rank]


@check
def check_alive(alive, cases) -> None:
    for schedule, pp, m, v in cases:
        for r in range(pp):
            got = call(alive, schedule, pp, m, r, v, name="alive")
            want = expected_alive(schedule, pp, m, r, v)
            if got == want:
                continue
            label = f"alive({schedule!r}, pp={pp}, M={m}, rank={r}, v={v})"
            if schedule == "gpipe":
                why = "GPipe runs every forward before any backward, so every rank holds all M"
            elif schedule == "1f1b":
                if got == m:
                    why = ("that is GPipe's count; in 1F1B a backward frees a microbatch before the rank has run "
                           "them all")
                elif got == min(pp - r - 1, m):
                    why = "that is the warmup only: the forward right before the first backward is alive too"
                elif got == pp - r:
                    why = f"with M={m} there are fewer microbatches than that to hold"
                else:
                    why = "count the forwards the rank has run and not yet backwarded when its first backward starts"
            else:
                warm = interleaved_warmup(pp, r, m, v, pp)
                if got == warm:
                    why = "that is the warmup count; one more chunk is alive when the first backward starts"
                elif got == v * min(pp - r, m):
                    why = "interleaving is not 1F1B times v: count the interleaved warmup's chunk forwards"
                else:
                    why = "count the chunk forwards alive when the first backward starts"
            fail(f"{label} = {describe(got)} is not what the simulated step keeps alive: {why} {THREE_KINDS}")


def expected_resident(spec: ModelSpec, pp: int, bytes_per_param: float) -> list[float]:
    return [c.params * bytes_per_param for c in stage_costs(even_layout(spec.layers, pp), spec, pp)]


@check
def check_resident(resident_bytes, cases) -> None:
    for spec, pp, bpp in cases:
        got = call(resident_bytes, spec, pp, bpp, name="resident_bytes")
        expect_type(got, (list, tuple), "resident_bytes(...)")
        if len(got) != pp:
            fail(f"resident_bytes(..., pp={pp}) has {len(got)} entries; give one per rank")
        got = [expect_number(g, "resident_bytes entry") for g in got]
        want = expected_resident(spec, pp, bpp)
        if all(close(g, w) for g, w in zip(got, want)):
            continue
        costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
        layers_only = [len(c.spec.layers) * layer_params(spec) * bpp for c in costs]
        why = first_match(got[0], [(sum(want) / pp, ("that is 'parameters / PP': the first rank also holds the "
                                                      "embedding (V*h + s*h), the last the output layer (V*h + 2h)"))])
        if why is None and all(close(g, w) for g, w in zip(got, layers_only)):
            why = "the endpoints are missing: the embedding on rank 0, the output layer and final norm on the last rank"
        if why is None and close(got[0], want[0] - spec.seq_len * spec.hidden * bpp):
            why = "the position embedding (s*h) is missing on rank 0"
        if why is None and close(got[-1], want[-1] - loss_params(spec) * bpp):
            why = ("the last rank holds the output layer (V*h, its own copy even with tied embeddings) and the final "
                   "norm")
        if why is None:
            r = next(i for i, (g, w) in enumerate(zip(got, want)) if not close(g, w))
            why = (f"rank {r} holds {costs[r].spec.text()}: {costs[r].params:,} parameters x {bpp} bytes = "
                   f"{want[r]:,.0f}")
        fail(f"resident_bytes({spec.layers}-layer model, pp={pp}, {bpp} B/param) is wrong: {why}")


MENU = {
    "warmup": "run a few warm-up steps",
    "reset": "torch.cuda.reset_peak_memory_stats() on every rank",
    "measure": "run the measured steps",
    "read": "read torch.cuda.max_memory_allocated() on every rank",
    "gather": "gather the per-rank peaks; report the vector and its max",
    "rank0": "read max_memory_allocated() on rank 0 only",
    "average": "report the mean over ranks",
    "divide": "divide the whole job's peak by pp",
}
STEPS = ["warmup", "reset", "measure", "read", "gather"]


@check
def check_steps(measurement_steps) -> None:
    """Three parts: nothing that does not belong, every step that does, and their order."""
    expect_type(measurement_steps, (list, tuple), "measurement_steps (a list of MENU keys, in order)")
    unknown = [s for s in measurement_steps if s not in MENU]
    if unknown:
        fail(f"measurement_steps has {unknown}, which are not on the menu ({', '.join(MENU)}): give a list of MENU "
             "keys, in the order they run")
    if not measurement_steps:  # (nothing picked is not "nothing wrong picked": no share for an empty answer)
        fail("measurement_steps is empty: give the MENU keys of the steps you would run, in order")
    order = list(measurement_steps)
    parts = Parts()
    with parts.part():
        wrong = {"rank0": "rank 0 is not the only rank that can run out of memory: read every rank",
                 "average": "no GPU experiences the mean; the fullest rank is the one that goes out of memory",
                 "divide": "ranks are not alike: dividing the job's peak by pp is the 'parameters / PP' mistake again"}
        bad = [f"{step!r}: {why}" for step, why in wrong.items() if step in order]
        if bad:
            fail(f"measurement_steps includes {'; and '.join(bad)}")
    with parts.part():
        missing = [s for s in STEPS if s not in order]
        if missing:
            fail(f"measurement_steps misses {missing}: {', '.join(MENU[s] for s in missing)}")
    with parts.part():
        mine = [s for s in order if s in STEPS]
        if mine != [s for s in STEPS if s in mine]:
            if "reset" in mine and "warmup" in mine and mine.index("reset") < mine.index("warmup"):
                fail("measurement_steps resets the peak before the warm-up: the peak would then include one-time "
                     "allocations (allocator caches, lazily created optimizer states)")
            fail(f"measurement_steps is in the wrong order: {mine}; a peak is reset, then the measured steps run, "
                 "then every rank reads its peak, then they are gathered")
    parts.done()


SUMMARY_RUN = ("--schedule", "interleaved", "-v", "2", "-m", "4", "--layers", "4", "--hidden", "32", "--seq-len",
               "16", "--steps", "1", "--json", "{file}", "--p2p-timeout", "20")  # the lab's real run


def real_summary() -> dict:
    """The summary of the lab's real 2-rank run, :data:`SUMMARY_RUN` (run once per process; the given cell shows it)."""
    return json.loads(kit_run_file(2, SUMMARY_RUN))


def expected_run(summary: dict) -> dict[str, list]:
    pp, m, v = summary["pp"], summary["microbatches"], summary["chunks"]
    sched = _schedule(pp, m, v, summary["schedule"])
    cfg = summary["config"]
    one = cfg["seq_len"] * summary["micro_batch_size"] * cfg["hidden"] * 4  # the runtime trains in fp32
    stages = pp * v
    sends = [sum(1 for s in sched.stages_of(r) if s < stages - 1) for r in range(pp)]
    return {"peak_activations": simulate(sched).peak_activations,
            "deallocated_output_bytes": [n * m * one for n in sends]}


RUN_KEYS = ("peak_activations", "deallocated_output_bytes")
RUN_FORM = ("a dict {'peak_activations': [...], 'deallocated_output_bytes': [...]}, each a list with one entry per "
            "rank, rank 0 first")


def _run_label(summary: dict) -> str:
    if "peak_activations" in summary:
        return "the real run"
    return (f"a hidden run ({summary['schedule']}, pp={summary['pp']}, M={summary['microbatches']}, "
            f"v={summary['chunks']})")


def _run_form(got, want: dict, label: str) -> None:
    """``got`` is a dict with both keys, else fail naming the form (and saying so where its values are right)."""
    if isinstance(got, dict) and all(k in got for k in RUN_KEYS):
        return
    values = list(got.values()) if isinstance(got, dict) else list(got) if isinstance(got, (list, tuple)) else None
    right = values is not None and len(values) == 2 and all(
        isinstance(x, (list, tuple)) and list(x) == list(want[k]) for x, k in zip(values, RUN_KEYS))
    kind = type(got).__name__
    keys = f" with keys {sorted(map(str, got))}" if isinstance(got, dict) else ""
    only_form = " -- the values are right, only the form is not" if right else ""
    fail(f"predict_run on {label} returned a {kind}{keys}; it must return {RUN_FORM}{only_form}")


@check
def check_predict_run(predict_run, summaries) -> None:
    """Two parts: the peak live activations and the freed output bytes (a wrong form fails both)."""
    runs = []
    for summary in summaries:
        measured = "peak_activations" in summary
        plain = {k: summary[k] for k in ("schedule", "pp", "microbatches", "chunks", "config", "micro_batch_size")}
        label = _run_label(summary)
        got = call(predict_run, plain, name="predict_run")
        want = expected_run(summary)
        if measured:  # the real run reports exactly what the model predicts
            want = {k: summary[k] for k in want}
        _run_form(got, want, label)
        for key in RUN_KEYS:
            expect_type(got[key], (list, tuple), f"predict_run(...)[{key!r}] on {label} (one entry per rank)")
        runs.append((summary, label, "measured" if measured else "expected", got, want))
    parts = Parts()
    with parts.part():
        for summary, label, word, got, want in runs:
            peaks = list(got["peak_activations"])
            if peaks == list(want["peak_activations"]):
                continue
            if summary["schedule"] == "gpipe":
                why = "GPipe keeps all M on every rank: the schedule in the summary decides"
            elif len(peaks) != summary["pp"]:
                why = f"give one entry per rank ({plural(summary['pp'], 'rank')}), rank 0 first"
            else:
                why = "count chunk activations per rank with the simulator: simulate(schedule).peak_activations"
            fail(f"predict_run on {label}: peak_activations {peaks} is not what the run {word}: {why}")
    with parts.part():
        for summary, label, word, got, want in runs:
            freed = list(got["deallocated_output_bytes"])
            exp = list(want["deallocated_output_bytes"])
            if freed == exp:
                continue
            v = summary["chunks"]
            if len(freed) != summary["pp"]:
                why = f"give one entry per rank ({plural(summary['pp'], 'rank')}), rank 0 first"
            elif freed[-1] and v == 1:
                why = "the last rank sends no output (it computes the loss), so it frees nothing"
            elif freed == [x // 2 for x in exp]:
                why = "the runtime trains in fp32: 4 bytes per element, not 2"
            elif v > 1 and freed[-1] == 0:
                why = ("with v chunks the last rank still sends the outputs of its chunks 0..v-2; only the very "
                       "last virtual stage sends nothing")
            elif exp[0] and freed == [x // summary["micro_batch_size"] for x in exp]:
                why = "each freed output holds micro_batch_size x seq_len x hidden elements: b is missing"
            else:
                why = "each sent output is an s*b*h fp32 tensor, freed once per microbatch and per chunk that sends"
            fail(f"predict_run on {label}: deallocated_output_bytes {freed} is not what the run {word}: {why} "
                 f"{MEASURING}")
    parts.done()


# -- M052 follow-up -------------------------------------------------------------------------------------
def expected_terms(spec: ModelSpec, pp: int, m: int, schedule: str, bpp: float) -> dict[str, list]:
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    return {"resident": [c.params * bpp for c in costs],
            "bytes_per_microbatch": [c.activation_bytes for c in costs],
            "alive": simulate(_schedule(pp, m, 1, schedule)).peak_activations}


TERM_KEYS = ("resident", "bytes_per_microbatch", "alive")


def _own(func, *args):
    """What the student's own helper returns (None where it fails): a later answer reusing it is judged by it."""
    if func is None:
        return None
    try:
        return plain(call(func, *args, name=getattr(func, "__name__", "helper")))
    except LabCheckFailed:
        return None


def own_terms(helpers: dict, spec: ModelSpec, pp: int, m: int, schedule: str, bpp: float) -> dict[str, list]:
    """The three terms as the student's own ``resident_bytes``, ``stage_bytes`` and ``alive`` give them."""
    stages = even_layout(spec.layers, pp).stages
    out = {"resident": _own(helpers.get("resident_bytes"), spec, pp, bpp)}
    if helpers.get("stage_bytes") is not None:
        out["bytes_per_microbatch"] = [_own(helpers["stage_bytes"], spec, len(st.layers), st.embedding, st.loss)
                                       for st in stages]
    if helpers.get("alive") is not None:
        out["alive"] = [_own(helpers["alive"], schedule, pp, m, r) for r in range(pp)]
    return out


def _same(values, exp) -> bool:
    if not isinstance(values, (list, tuple)) or not isinstance(exp, (list, tuple)) or len(values) != len(exp):
        return False
    return all(isinstance(g, (int, float, Fraction)) and not isinstance(g, bool) and isinstance(w, (int, float))
               and close(float(g), float(w)) for g, w in zip(values, exp))


@check
def check_terms(memory_terms, cases, resident_bytes=None, stage_bytes=None, alive=None) -> None:
    """Three parts, one per term.  A term is also right when it is what the student's own helper (sections 5 to 7)
    gives and that helper is wrong: its mistake is graded there, once."""
    helpers = {"resident_bytes": resident_bytes, "stage_bytes": stage_bytes, "alive": alive}
    rows = []
    for spec, pp, m, schedule, bpp in cases:
        label = f"memory_terms({spec.layers}-layer model, pp={pp}, M={m}, {schedule!r}, {bpp})"
        got = call(memory_terms, spec, pp, m, schedule, bpp, name="memory_terms")
        expect_keys(got, TERM_KEYS, f"{label} (a dict of three per-rank lists, rank 0 first: 'resident', "
                    "'bytes_per_microbatch', 'alive')")
        rows.append((label, spec, pp, m, schedule, bpp, got))
    parts = Parts()
    for key in TERM_KEYS:
        with parts.part():
            for label, spec, pp, m, schedule, bpp, got in rows:
                values = got[key]
                expect_type(values, (list, tuple), f"{label}[{key!r}] (a list with one entry per rank)")
                if len(values) != pp:
                    fail(f"{label}[{key!r}] has {plural(len(values), 'entry', 'entries')}; give one per rank "
                         f"({plural(pp, 'rank')}), rank 0 first")
                values = [expect_number(g, f"{label}[{key!r}] entry") for g in values]
                exp = expected_terms(spec, pp, m, schedule, bpp)[key]
                if _same(values, exp):
                    continue
                mine = own_terms(helpers, spec, pp, m, schedule, bpp).get(key)
                if mine is not None and not _same(mine, exp) and _same(values, mine):
                    continue  # the student's own (wrong) helper, reused: graded at the helper's check
                wrong = [r for r in range(pp) if not close(values[r], exp[r])]
                if all(close(g, sum(exp) / pp) for g in values):
                    why = f"the ranks are not alike: an even split of the {key} term is exactly the mistake to avoid"
                elif key == "resident":
                    why = "local parameters (with the endpoints) x bytes per parameter"
                elif key == "bytes_per_microbatch":
                    why = ("each stage's activation bytes per microbatch, as stage_bytes gives them (the last stage "
                           "includes the logits)")
                else:
                    why = ("GPipe keeps all M on every rank" if schedule == "gpipe" else
                           "1F1B keeps fewer microbatches on later ranks: its warmup shrinks with the rank")
                side = ", ".join(f"rank {r} {'too high' if values[r] > exp[r] else 'too low'}" for r in wrong[:3])
                fail(f"{label}[{key!r}] is wrong on {plural(len(wrong), 'rank')} ({side}): {why}")
    parts.done()


def expected_lifetime(schedule: str, pp: int, m: int, rank: int, mb: int) -> float:
    r = simulate(_schedule(pp, m, 1, schedule), fwd=Fraction(1), bwd=Fraction(2))
    ev = {(e.op.kind, e.op.microbatch): e for e in r.rank_events(rank)}
    return ev[("B", mb)].end - ev[("F", mb)].start


@check
def check_lifetime(lifetime, cases) -> None:
    for schedule, pp, m, rank, mb in cases:
        got = expect_number(call(lifetime, schedule, pp, m, rank, mb, name="lifetime"),
                   f"lifetime({schedule!r}, {pp}, {m}, {rank}, {mb})")
        want = expected_lifetime(schedule, pp, m, rank, mb)
        if close(got, float(want)):
            continue
        r = simulate(_schedule(pp, m, 1, schedule), fwd=Fraction(1), bwd=Fraction(2))
        ev = {(e.op.kind, e.op.microbatch): e for e in r.rank_events(rank)}
        f, b = ev[("F", mb)], ev[("B", mb)]
        why = first_match(got, [
            (b.start - f.end, ("from the forward's end to the backward's start leaves out the two ops themselves: "
                               "the activations are saved during the forward and freed when the backward ends")),
            (b.end - f.end, "the activations are being written from the forward's start"),
            (b.start - f.start, "the activations are needed until the backward ends"),
        ]) or "from the start of the forward to the end of the backward of that microbatch on that rank"
        fail(f"lifetime({schedule!r}, pp={pp}, M={m}, rank={rank}, mb={mb}) = {got:g}: {why} {THREE_KINDS}")


def bank_totals(schedule: str) -> tuple[list[float], float]:
    spec = PRESETS["bank-pp8"][0]
    pp, m, bpp = BANK["pp"], BANK["microbatches"], BANK["bytes_per_param"]
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    r = simulate(_schedule(pp, m, 1, schedule), activation_bytes=[c.activation_bytes for c in costs])
    totals = [c.params * bpp + a for c, a in zip(costs, r.peak_activation_bytes)]
    naive = sum(c.params for c in costs) * bpp / pp
    return totals, naive


def own_totals(memory_terms, schedule: str) -> tuple[list[float], float] | None:
    """Each rank's total and the naive prediction from the student's own ``memory_terms`` (None where it fails)."""
    spec = PRESETS["bank-pp8"][0]
    pp, m, bpp = BANK["pp"], BANK["microbatches"], BANK["bytes_per_param"]
    terms = _own(memory_terms, spec, pp, m, schedule, bpp)
    try:
        totals = [float(res) + float(n) * float(act) for res, n, act in
                  zip(terms["resident"], terms["alive"], terms["bytes_per_microbatch"], strict=True)]
        return (totals, sum(float(x) for x in terms["resident"]) / pp) if len(totals) == pp else None
    except (TypeError, KeyError, ValueError):
        return None


@check
def check_fullest(fullest, fullest_over_naive, memory_terms=None) -> None:
    """Two parts: the fullest ranks and the ratio.  Both are also right when they follow from the student's own
    ``memory_terms`` and that is wrong: its mistake is graded at its own check, once."""
    expect_type(fullest, dict, "fullest (a dict {'1f1b': rank, 'gpipe': rank} of rank indices)")
    expect_keys(fullest, ("1f1b", "gpipe"), "fullest (a dict {'1f1b': rank, 'gpipe': rank} of rank indices)")
    kit = {name: bank_totals(name) for name in ("1f1b", "gpipe")}
    mine = {name: own_totals(memory_terms, name) for name in kit} if memory_terms is not None else {}
    mine = {k: t for k, t in mine.items() if t is not None and not _same(t[0], kit[k][0])}
    parts = Parts()
    with parts.part():
        for schedule in ("1f1b", "gpipe"):
            totals, _ = kit[schedule]
            want = totals.index(max(totals))
            got = fullest[schedule]
            if got == want or (schedule in mine and got == mine[schedule][0].index(max(mine[schedule][0]))):
                continue
            why = ("weigh each rank's parameters together with how many microbatches it keeps alive"
                   if schedule == "1f1b" else
                   "every rank keeps all M microbatches, so the largest bytes per microbatch decide")
            fail(f"fullest[{schedule!r}] = {describe(got)} is not the fullest rank: {why}. The fullest rank depends on "
                 f"the schedule, not only on parameters {COUNTS_TO_BYTES}")
    with parts.part():
        totals, naive = kit["1f1b"]
        got = expect_number(fullest_over_naive, "fullest_over_naive (a number: a ratio of bytes)")
        want = max(totals) / naive
        if close(got, want, rel=1e-3):
            pass
        elif "1f1b" in mine and mine["1f1b"][1] and close(got, max(mine["1f1b"][0]) / mine["1f1b"][1], rel=1e-3):
            pass  # what the student's own memory_terms gives
        else:
            gpipe_totals, _ = kit["gpipe"]
            why = first_match(got, [
                (max(gpipe_totals) / naive, "that is GPipe's fullest rank; the question is about 1F1B"),
                (naive / max(totals), "the ratio is upside down: fullest rank over the naive prediction"),
                (max(totals) / (sum(totals) / len(totals)), ("divide by the 'parameters / PP' prediction (resident "
                                                             "only), not the mean of the real totals")),
            ], rel=1e-3) or "the fullest 1F1B rank's bytes over the 'parameters / PP' prediction"
            fail(f"fullest_over_naive = {got:.4g}: {why} {COUNTS_TO_BYTES}")
    parts.done()


def expected_snapshot(result: SimResult, t: float) -> list[int]:
    tl = Timeline.from_sim(result)
    out = []
    for r in range(tl.pp):
        steps = live_activations(tl, r)
        out.append([n for time, n in steps if time <= t][-1])
    return out


def _live(result: SimResult, t: float, f_time="start", b_time="end", strict=False) -> list[int]:
    """Forwards begun (by their ``f_time``) minus backwards done (by ``b_time``) per rank: the typical counts."""
    def by(e, time):
        return getattr(e, time) < t if strict and e.op.kind == "F" else getattr(e, time) <= t
    return [sum(1 for e in result.rank_events(r) if e.op.kind == "F" and by(e, f_time))
            - sum(1 for e in result.rank_events(r) if e.op.kind == "B" and by(e, b_time))
            for r in range(result.schedule.pp)]


@check
def check_snapshot(snapshot, cases) -> None:
    for result, t in cases:
        got = call(snapshot, result, t, name="snapshot")
        expect_type(got, (list, tuple), "snapshot(...) (a list of counts, one per rank, rank 0 first)")
        want = expected_snapshot(result, t)
        if list(got) == want:
            continue
        s = result.schedule
        chunks = f" v={s.chunks}" if s.chunks > 1 else ""
        label = f"snapshot of {s.name} pp={s.pp} M={s.microbatches}{chunks} at t={t}"
        known = [(_live(result, t, strict=True), lambda r: f"a forward starts on rank {r} at exactly t: its "
                  "activations are live from that instant, so count forwards with start <= t"),
                 (_live(result, t, b_time="start"), lambda r: f"rank {r} is in the middle of a backward: the "
                  "activations are freed when the backward ends, not when it starts"),
                 (_live(result, t, f_time="end"), lambda r: f"rank {r} is in the middle of a forward: its activations "
                  "are being saved, so count a microbatch from its forward's start")]
        match = next(((c, why) for c, why in known if list(got) == c), None)
        if match is not None:
            why = match[1](next(r for r in range(s.pp) if match[0][r] != want[r]))
        else:
            rank = next((r for r in range(s.pp) if r < len(got) and got[r] != want[r]), 0)
            why = (f"rank {rank}'s count is off: count the chunk activations between a forward's start and its "
                   "backward's end")
        fail(f"{label}: {list(got)} is not what the ranks hold then: {why} {THREE_KINDS}")


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def hidden_alive_cases(rng) -> list:
    def make(r):
        name = r.choice(["1f1b", "gpipe", "interleaved"])
        pp = r.randint(2, 8)
        if name == "interleaved":
            return name, pp, pp * r.randint(1, 3), r.randint(2, 4)
        return name, pp, r.randint(1, 16), 1
    return drawn(rng, 3, make, fixed=[("1f1b", 8, 4, 1), ("interleaved", 4, 4, 2)])


def hidden_lifetime_cases(rng) -> list:
    def make(r):
        pp, m = r.randint(2, 8), r.randint(1, 16)
        return r.choice(["1f1b", "gpipe"]), pp, m, r.randrange(pp), r.randrange(m)
    # GPipe's lifetime tells a schedule-blind answer; 1F1B with M < pp the one without the right schedule
    return drawn(rng, 2, make, fixed=[("1f1b", 8, 4, 2, 3), ("gpipe", 4, 6, 1, 2)])


def hidden_stage_cases(rng) -> list:
    """(layout, spec, pp): pp x chunks stages whose endpoint stages may hold no decoder layer."""
    def make(r):
        pp = r.randint(1, 6)
        counts = draw_counts(r, pp * r.randint(1, 2), most=4)
        return counts_text(counts), draw_spec(r, sum(counts)), pp
    # a 32-bit model first (tells a missing d/2 scaling and logits in the training dtype), then endpoint-only stages
    return drawn(rng, 2, make, fixed=[("Et*2|t*2|L", FP32_SPEC, 3), ("E|t*4|t*4|L", PRESETS["tiny"][0], 4)])


def hidden_resident_cases(rng) -> list:
    """(spec, pp, bytes per parameter): an even split (pp divides the layers); the fixed model ties embeddings."""
    def make(r):
        pp = r.randint(1, 8)
        return draw_spec(r, pp * r.randint(1, 4)), pp, r.choice([2, 4, 12, 16, 18])
    return drawn(rng, 2, make, fixed=[(ModelSpec(layers=6, tie_embeddings=True), 3, 2)])


def hidden_terms_cases(rng) -> list:
    """(spec, pp, M, schedule, bytes per parameter) for 1F1B and GPipe; M < pp among the fixed ones."""
    def make(r):
        pp = r.randint(2, 8)
        return draw_spec(r, pp * r.randint(1, 3)), pp, r.randint(1, 24), r.choice(["1f1b", "gpipe"]), 16
    # M < pp for 1F1B, then GPipe (a schedule-blind alive term), a 32-bit model (stage bytes scale with d)
    return drawn(rng, 2, make, fixed=[(PRESETS["tiny"][0], 4, 2, "1f1b", 12), (PRESETS["tiny"][0], 4, 6, "gpipe", 16),
                                      (FP32_SPEC, 2, 3, "1f1b", 16)])


def _summary(name: str, pp: int, m: int, v: int, mbs: int) -> dict:
    cfg = dict(vocab=128, seq_len=16, hidden=24, heads=2, layers=pp * v, ffn_mult=4, tie_embeddings=False)
    return {"schedule": name, "pp": pp, "microbatches": m, "chunks": v, "config": cfg, "micro_batch_size": mbs}


# GPipe (a schedule-blind peak), 1F1B with M < pp, 1F1B with the last rank sending nothing, interleaved v = 3
FIXED_SUMMARIES = [_summary("gpipe", 3, 5, 1, 2), _summary("1f1b", 4, 2, 1, 3), _summary("interleaved", 2, 4, 3, 1)]


def hidden_summary_cases(rng) -> list[dict]:
    """Summaries of runs the grade did not make (without the measured fields): 1F1B, GPipe and interleaved."""
    def make(r):
        name, pp = r.choice(["1f1b", "gpipe", "interleaved"]), r.randint(2, 4)
        v = r.randint(2, 3) if name == "interleaved" else 1
        m = pp * r.randint(1, 3) if name == "interleaved" else r.randint(1, 8)
        heads = r.choice([2, 4])
        cfg = {"vocab": r.choice([128, 256]), "seq_len": r.choice([16, 24, 32]), "hidden": heads * r.choice([8, 12]),
               "heads": heads, "layers": pp * v * r.randint(1, 2), "ffn_mult": 4, "tie_embeddings": False}
        return {"schedule": name, "pp": pp, "microbatches": m, "chunks": v, "config": cfg,
                "micro_batch_size": r.randint(1, 3)}
    return drawn(rng, 3, make, fixed=FIXED_SUMMARIES)


def hidden_snapshot_cases(rng) -> list[tuple[SimResult, float]]:
    """(simulated run, t) with t inside an op; the fixed ones catch a rank mid-forward (t = 6.3) and a forward
    starting at t (t = 6.0: its activations are live from that instant)."""
    def make(r):
        name, pp = r.choice(["1f1b", "gpipe", "interleaved"]), r.randint(2, 6)
        v = 2 if name == "interleaved" else 1
        m = pp * r.randint(1, 3) if v > 1 else r.randint(1, 10)
        result = simulate(_schedule(pp, m, v, name), fwd=1, bwd=2)
        return result, r.randrange(int(result.makespan)) + r.choice([0.3, 0.5, 0.8])
    fixed = simulate(_schedule(4, 8), fwd=1, bwd=2)
    return drawn(rng, 3, make, fixed=[(fixed, 6.3), (fixed, 6.0)])
