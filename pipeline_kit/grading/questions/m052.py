"""M052 (lab 8): what sets each rank's activation memory, and why "parameters / PP" mispredicts it.

Expected values come from the layout cost model (bytes and parameters) and the simulator's live
activations; the checks name GPipe's memory for 1F1B's, "parameters / PP", and the missing endpoint terms.
"""

from __future__ import annotations

import json
from fractions import Fraction

from ...layout import PRESETS, ModelSpec, even_layout, parse_layout, stage_costs
from ...layout.costs import layer_activation_bytes, layer_params, loss_params
from ...schedules import interleaved_warmup
from ...sim import SimResult, simulate
from ...trace import Timeline, live_activations
from .common import (
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
)
from .m051 import _schedule

SEED = {"pp": 8, "microbatches": 16, "bytes_per_param": 16}


# -- M052 main ----------------------------------------------------------------------------------------
def _stage_table(layout_text: str, spec: ModelSpec, pp: int):
    return stage_costs(parse_layout(layout_text), spec, pp)


@check
def check_stage_bytes(stage_bytes, cases) -> None:
    for layout_text, spec, pp in cases:
        for c in _stage_table(layout_text, spec, pp):
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
            ends = (tokens * h * d if st.embedding else 0) + (tokens * V * 4 + tokens * h * d if st.loss else 0)
            why = first_match(got, [
                (n * s * b * h * 34 * d / 2 + ends, ("the attention-scores term 5*a*s/h is missing: without "
                                                     "recomputation each layer keeps its a x s x s score matrices")),
                (n * s * b * h * (34 + 5 * a * s / h) + ends, ("scale by dtype_bytes / 2: the 34 + 5as/h formula is "
                                                              "for 16-bit training")),
                (n * layer + (tokens * h * d if st.embedding else 0)
                 + (tokens * V * d + tokens * h * d if st.loss else 0),
                 "the logits are kept in fp32 for the loss: s*b*V x 4 bytes, whatever the training dtype"),
                (n * layer + (tokens * V * 4 if st.loss else 0) + (tokens * h * d if st.embedding else 0),
                 "the loss stage also keeps its input, s*b*h x dtype_bytes"),
                (n * layer + (tokens * V * 4 + tokens * h * d if st.loss else 0),
                 "the embedding stage keeps its output, s*b*h x dtype_bytes"),
                (n * layer, ("the endpoints are missing: the embedding output on the first stage, the fp32 logits "
                             "(and their input) on the last")),
            ]) or "layers x s*b*h*(34 + 5as/h)*dtype/2, plus the endpoint terms"
            fail(f"stage_bytes for a stage holding {st.text()} (s={s}, b={b}, h={h}, a={a}, V={V}, "
                 f"{d}-byte) = {got:,.0f}, expected {want:,.0f}: {why}")


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
                    why = "that is GPipe's count; 1F1B's rank r holds min(pp - r, M)"
                elif got == min(pp - r - 1, m):
                    why = ("that is the warmup only: the forward right before the first backward is alive too, "
                           "min(pp - r, M)")
                elif got == pp - r:
                    why = f"with M={m} < pp - r there are only M microbatches to hold"
                else:
                    why = "rank r holds min(pp - r, M) microbatches"
            else:
                warm = interleaved_warmup(pp, r, m, v, pp)
                if got == warm:
                    why = "that is the warmup count; one more chunk is alive when the first backward starts"
                elif got == v * min(pp - r, m):
                    why = "interleaving is not 1F1B times v: the warmup is 2(pp - r - 1) + (v - 1)pp chunk forwards"
                else:
                    why = "the warmup plus one, capped at M x v chunks"
            fail(f"{label} = {describe(got)}, the simulator gives {want}: {why}")


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
    expect_type(measurement_steps, (list, tuple), "measurement_steps")
    unknown = [s for s in measurement_steps if s not in MENU]
    if unknown:
        fail(f"measurement_steps has {unknown}, which are not on the menu ({', '.join(MENU)})")
    wrong = {"rank0": "rank 0 is not the only rank that can run out of memory: read every rank",
             "average": "no GPU experiences the mean; the fullest rank is the one that goes out of memory",
             "divide": "ranks are not alike: dividing the job's peak by pp is the 'parameters / PP' mistake again"}
    for step, why in wrong.items():
        if step in measurement_steps:
            fail(f"measurement_steps includes {step!r}: {why}")
    missing = [s for s in STEPS if s not in measurement_steps]
    if missing:
        fail(f"measurement_steps misses {missing}: " + ", ".join(MENU[s] for s in missing))
    order = list(measurement_steps)
    if order.index("reset") < order.index("warmup"):
        fail("measurement_steps resets the peak before the warm-up: the peak would then include one-time "
             "allocations (allocator caches, lazily created optimizer states)")
    if list(measurement_steps) != STEPS:
        fail(f"measurement_steps is in the wrong order: {order}; a peak is reset, then the measured steps run, then "
             "every rank reads its peak, then they are gathered")


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


@check
def check_predict_run(predict_run, summaries) -> None:
    for summary in summaries:
        measured = "peak_activations" in summary
        plain = {k: summary[k] for k in ("schedule", "pp", "microbatches", "chunks", "config", "micro_batch_size")}
        label = ("the real run" if measured else
                 f"a hidden run ({summary['schedule']}, pp={summary['pp']}, M={summary['microbatches']}, "
                 f"v={summary['chunks']})")
        got = call(predict_run, plain, name="predict_run")
        expect_keys(got, ("peak_activations", "deallocated_output_bytes"), f"predict_run on {label}")
        want = expected_run(summary)
        if measured:  # the real run reports exactly what the model predicts
            want = {k: summary[k] for k in want}
        v = summary["chunks"]
        peaks = list(got["peak_activations"])
        if peaks != list(want["peak_activations"]):
            why = ("count chunk activations per rank with the simulator: simulate(schedule).peak_activations"
                   if summary["schedule"] != "gpipe" else "GPipe keeps all M on every rank")
            fail(f"predict_run on {label}: peak_activations {peaks}, {'measured' if measured else 'expected'} "
                 f"{list(want['peak_activations'])}: {why}")
        freed = list(got["deallocated_output_bytes"])
        exp = list(want["deallocated_output_bytes"])
        if freed == exp:
            continue
        cfg = summary["config"]
        one = cfg["seq_len"] * summary["micro_batch_size"] * cfg["hidden"]
        if freed and freed[-1] and v == 1:
            why = "the last rank sends no output (it computes the loss), so it frees nothing"
        elif freed == [x // 2 for x in exp]:
            why = "the runtime trains in fp32: 4 bytes per element, not 2"
        elif v > 1 and freed[-1] == 0:
            why = ("with v chunks the last rank still sends the outputs of its chunks 0..v-2 (virtual stages "
                   "pp-1, 2pp-1, ...); only the very last virtual stage sends nothing")
        else:
            why = (f"each sent output is s*b*h = {one:,} fp32 elements, freed once per microbatch and per chunk that "
                   "sends")
        fail(f"predict_run on {label}: deallocated_output_bytes {freed}, {'measured' if measured else 'expected'} "
             f"{exp}: {why}")


# -- M052 follow-up -------------------------------------------------------------------------------------
def expected_terms(spec: ModelSpec, pp: int, m: int, schedule: str, bpp: float) -> dict[str, list]:
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    return {"resident": [c.params * bpp for c in costs],
            "bytes_per_microbatch": [c.activation_bytes for c in costs],
            "alive": simulate(_schedule(pp, m, 1, schedule)).peak_activations}


@check
def check_terms(memory_terms, cases) -> None:
    for spec, pp, m, schedule, bpp in cases:
        label = f"memory_terms({spec.layers}-layer model, pp={pp}, M={m}, {schedule!r}, {bpp})"
        got = call(memory_terms, spec, pp, m, schedule, bpp, name="memory_terms")
        want = expected_terms(spec, pp, m, schedule, bpp)
        expect_keys(got, want, label)
        for key, exp in want.items():
            values = got[key]
            expect_type(values, (list, tuple), f"{label}[{key!r}]")
            if len(values) == pp and all(close(expect_number(g, f"{label}[{key!r}] entry"), w)
                                         for g, w in zip(values, exp)):
                continue
            if len(values) == pp and all(close(g, sum(exp) / pp) for g in values):
                why = f"the ranks are not alike: an even split of the {key} term is exactly the mistake to avoid"
            elif key == "resident":
                why = "local parameters (with the endpoints) x bytes per parameter"
            elif key == "bytes_per_microbatch":
                why = ("each stage's activation bytes: stage_costs(...)[r].activation_bytes (the last includes the "
                       "logits)")
            else:
                why = "GPipe keeps M on every rank" if schedule == "gpipe" else "1F1B keeps min(pp - r, M) on rank r"
            shown = (lambda xs: [int(x) for x in xs]) if key == "alive" else \
                (lambda xs: "[" + ", ".join(f"{float(x) / 2**20:.1f}" for x in xs) + "] MiB")
            fail(f"{label}[{key!r}] = {shown(values)}, expected {shown(exp)}: {why}")


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
        fail(f"lifetime({schedule!r}, pp={pp}, M={m}, rank={rank}, mb={mb}) = {got:g}, expected {float(want):g}: {why}")


def seed_totals(schedule: str) -> tuple[list[float], float]:
    spec = PRESETS["seed-pp8"][0]
    pp, m, bpp = SEED["pp"], SEED["microbatches"], SEED["bytes_per_param"]
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    r = simulate(_schedule(pp, m, 1, schedule), activation_bytes=[c.activation_bytes for c in costs])
    totals = [c.params * bpp + a for c, a in zip(costs, r.peak_activation_bytes)]
    naive = sum(c.params for c in costs) * bpp / pp
    return totals, naive


@check
def check_fullest(fullest, fullest_over_naive) -> None:
    expect_keys(fullest, ("1f1b", "gpipe"), "fullest")
    for schedule in ("1f1b", "gpipe"):
        totals, _ = seed_totals(schedule)
        want = totals.index(max(totals))
        got = fullest[schedule]
        if got == want:
            continue
        why = ("rank 0 adds the embedding's parameters to the deepest warmup (pp microbatches alive)"
               if schedule == "1f1b" else
               "every rank keeps all M microbatches, so the largest bytes per microbatch (the last stage's fp32 "
               "logits) decide")
        fail(f"fullest[{schedule!r}] = {describe(got)}, expected rank {want}: {why}. The fullest rank depends on the "
             "schedule, not only on parameters")
    totals, naive = seed_totals("1f1b")
    got = expect_number(fullest_over_naive, "fullest_over_naive")
    want = max(totals) / naive
    if close(got, want, rel=1e-3):
        return
    gpipe_totals, _ = seed_totals("gpipe")
    why = first_match(got, [
        (max(gpipe_totals) / naive, "that is GPipe's fullest rank; the question is about 1F1B"),
        (naive / max(totals), "the ratio is upside down: fullest rank over the naive prediction"),
        (max(totals) / (sum(totals) / len(totals)), ("divide by the 'parameters / PP' prediction (resident only), not "
                                                     "the mean of the real totals")),
    ], rel=1e-3) or "max over ranks of (resident + 1F1B peak activations) / (all parameters x 16 / pp)"
    fail(f"fullest_over_naive = {got:.4g}, expected {want:.3f}: {why}")


def expected_snapshot(result: SimResult, t: float) -> list[int]:
    tl = Timeline.from_sim(result)
    out = []
    for r in range(tl.pp):
        steps = live_activations(tl, r)
        out.append([n for time, n in steps if time <= t][-1])
    return out


@check
def check_snapshot(snapshot, cases) -> None:
    for result, t in cases:
        got = call(snapshot, result, t, name="snapshot")
        expect_type(got, (list, tuple), "snapshot(...)")
        want = expected_snapshot(result, t)
        if list(got) == want:
            continue
        s = result.schedule
        label = f"snapshot of {s.name} pp={s.pp} M={s.microbatches}" + (f" v={s.chunks}" if s.chunks > 1 else "") + \
            f" at t={t}"
        by_end = []
        for r in range(s.pp):
            evs = result.rank_events(r)
            by_end.append(sum(1 for e in evs if e.op.kind == "F" and e.end <= t)
                          - sum(1 for e in evs if e.op.kind == "B" and e.end <= t))
        if list(got) == by_end:
            rank = next(r for r in range(s.pp) if by_end[r] != want[r])
            why = (f"rank {rank} is in the middle of a forward: its activations are being saved, so count a "
                   "microbatch from its forward's start")
        else:
            rank = next((r for r in range(s.pp) if r < len(got) and got[r] != want[r]), 0)
            why = f"rank {rank} has {want[rank]} microbatch-chunks between a forward's start and its backward's end"
        fail(f"{label}: {list(got)}, expected {want}: {why}")


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
    return drawn(rng, 2, make, fixed=[("1f1b", 8, 4, 2, 3)])


def hidden_stage_cases(rng) -> list:
    """(layout, spec, pp): pp x chunks stages whose endpoint stages may hold no decoder layer."""
    def make(r):
        pp = r.randint(1, 6)
        counts = draw_counts(r, pp * r.randint(1, 2), most=4)
        return counts_text(counts), draw_spec(r, sum(counts)), pp
    return drawn(rng, 2, make, fixed=[("E|t*4|t*4|L", PRESETS["tiny"][0], 4)])


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
    return drawn(rng, 2, make, fixed=[(PRESETS["tiny"][0], 4, 2, "1f1b", 12)])


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
    return drawn(rng, 3, make)


def hidden_snapshot_cases(rng) -> list[tuple[SimResult, float]]:
    """(simulated run, t) with t inside an op (never on a boundary); the fixed one catches a rank mid-forward."""
    def make(r):
        name, pp = r.choice(["1f1b", "gpipe", "interleaved"]), r.randint(2, 6)
        v = 2 if name == "interleaved" else 1
        m = pp * r.randint(1, 3) if v > 1 else r.randint(1, 10)
        result = simulate(_schedule(pp, m, v, name), fwd=1, bwd=2)
        return result, r.randrange(int(result.makespan)) + r.choice([0.3, 0.5, 0.8])
    return drawn(rng, 3, make, fixed=[(simulate(_schedule(4, 8), fwd=1, bwd=2), 6.3)])
