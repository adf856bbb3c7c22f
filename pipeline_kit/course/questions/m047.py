"""M047 (lab 6): building pipeline stages with pre_process/post_process, their parameters and costs.

The reference for every check is the kit itself: ``build_stage`` / ``GPT`` (:mod:`pipeline_kit.runtime`)
for stages, ``stage_costs`` (:mod:`pipeline_kit.layout`) for per-stage parameters, FLOPs and activation
memory, the simulator for "decide by time", and a real ``torchrun --check-grads`` run for the end-to-end
verification.  Students' stages are compared with the single-process model by loading their parameters
into it, so they may initialise freely.
"""

from __future__ import annotations

from ...layout import PRESETS, Layout, ModelSpec, even_layout, stage_costs
from ...schedules import build_schedule
from ...sim import simulate
from .grader_runs import GRAD_RUN, cfg_from_run, check_grad_run, grader_run, spec_of  # noqa: F401 -- the grader's own job
from .live import check_build_stage  # noqa: F401 -- a live-object check: it probes the kernel (live.py)
from ...grading.parts import Parts, plural
from .common import (
    book,
    call,
    check,
    close,
    describe,
    draw_spec,
    drawn,
    expect_keys,
    expect_number,
    expect_type,
    fail,
)

OFFSET = book("stages", "pre_process, post_process and the layer offset")  # where the book teaches it
COUNTED = book("stages", "The endpoint imbalance, counted")


def small_cfg(**kw):
    from ...runtime.model import GPTConfig
    base = {"vocab": 64, "seq_len": 16, "hidden": 32, "heads": 4, "layers": 5, "seed": 7}
    base.update(kw)
    return GPTConfig(**base)


def bank_cfg():
    """The interview question bank's model, bank-pp8, as the runtime's ``GPTConfig`` (lab 6's ``BANK_CFG``)."""
    from ...runtime.model import GPTConfig
    return GPTConfig(vocab=32000, seq_len=512, hidden=768, heads=12, layers=16)


def kit_layout(layers: int, n: int) -> Layout:
    """The layout the runtime builds by default: ``split_layers`` (earlier stages take any extra layer)."""
    from ...runtime.model import default_layout
    return default_layout(layers, n)


def _named_spec(model) -> tuple[ModelSpec, str]:
    """A case's model, a preset's name or a ModelSpec, and how feedback names it."""
    if isinstance(model, str):
        return PRESETS[model][0], f"PRESETS[{model!r}][0]"
    return model, f"<ModelSpec layers={model.layers}, hidden={model.hidden}, vocab={model.vocab}>"


# -- M047 main -----------------------------------------------------------------------------------
def _kit_stage(cfg, stage, n):
    import torch

    from ...runtime.model import build_stage
    with torch.device("meta"):
        return build_stage(cfg, stage, n)


@check
def check_stage_parts(fn, cases) -> None:
    """Three properties, each its own share: the embedding flag, the layer numbers, the head flag."""
    answers = []
    for stage, n, layers in cases:
        what = f"stage_parts({stage}, {n}, {layers})"
        got = call(fn, stage, n, layers, name="stage_parts")
        expect_keys(got, ("embedding", "layers", "head"), what)
        answers.append((what, got, _kit_stage(small_cfg(layers=layers), stage, n), n, layers))
    parts = Parts()
    with parts.part():
        for what, got, ref, n, _ in answers:
            if got["embedding"] is not ref.pre_process:
                fail(f"{what}['embedding'] is {describe(got['embedding'])}: only the first stage (pre_process, "
                     "stage 0) builds the embedding and takes token ids (give a bool)")
    with parts.part():
        for what, got, ref, n, layers in answers:
            want = list(ref.layer_ids)
            expect_type(got["layers"], (list, tuple, range), f"{what}['layers']")
            mine = list(got["layers"])
            if mine == want:
                continue
            if sorted(mine) == want:
                fail(f"{what}['layers'] is {mine}: list the layers in increasing order")
            if len(mine) == len(want) and want and mine == list(range(len(want))):
                fail(f"{what}['layers'] is {mine}: number layers globally, so layer i has the same name and "
                     "parameters wherever it lives")
            if len(mine) != len(want):
                fail(f"{what}['layers'] has {plural(len(mine), 'layer')}, not this stage's share: {layers} layers over "
                     f"{plural(n, 'stage')} give the first stages one extra each when it does not divide "
                     "(split_layers)")
            fail(f"{what}['layers'] is {mine}: the stages hold consecutive global layer numbers, stage 0 the first "
                 "ones, and the first stages take one extra each when the layers do not divide (split_layers)")
    with parts.part():
        for what, got, ref, n, _ in answers:
            if got["head"] is not ref.post_process:
                fail(f"{what}['head'] is {describe(got['head'])}: only the last stage (post_process, stage {n - 1}) "
                     "builds the final norm and the output layer (give a bool)")
    parts.done()


def _io_feedback(what, key, v, t, s, n, mbs, cfg) -> None:
    import torch

    if not (isinstance(v, (tuple, list)) and len(v) == 2):
        fail(f"{what}[{key!r}] must be a pair (shape, dtype): a tuple of ints and a torch dtype, got {describe(v)}")
    shape, dtype = tuple(v[0]) if isinstance(v[0], (tuple, list, torch.Size)) else v[0], v[1]
    want_shape = tuple(t.shape)
    if dtype != t.dtype:
        if key == "input" and s == 0:
            fail(f"{what}: the first stage takes token ids, not {describe(dtype)}: pre_process means "
                 f"the embedding lookup happens here {OFFSET}")
        if key == "input":
            fail(f"{what}: stage {s} takes the previous stage's activation, not {describe(dtype)}")
        fail(f"{what}['output'] dtype is {describe(dtype)}, not what stage {s} returns (give a torch dtype)")
    if shape != want_shape:
        if key == "output" and s == n - 1 and shape == (mbs, cfg.seq_len, cfg.hidden):
            fail(f"{what}: the last stage returns logits over the vocabulary; the loss is applied to them by the "
                 f"caller {OFFSET}")
        if key == "output" and s < n - 1 and shape == (mbs, cfg.seq_len, cfg.vocab):
            fail(f"{what}: only the last stage has the output layer; stage {s} returns hidden states")
        if isinstance(shape, tuple) and len(shape) == len(want_shape) and sorted(shape) == sorted(want_shape):
            fail(f"{what}[{key!r}] shape {shape}: the kit's runtime is batch-first")
        fail(f"{what}[{key!r}] shape is {describe(shape)}, not stage {s}'s tensor (a tuple of ints, batch first)")


@check
def check_stage_io(fn, cases) -> None:
    """Two properties, each its own share: what every stage takes, and what it returns."""
    import torch

    from ...runtime.model import build_stage, make_batch
    answers = []
    for cfg, n, mbs in cases:
        tokens, _ = make_batch(cfg, 1, mbs, 0)
        x = tokens[0]
        for s in range(n):
            with torch.no_grad():
                y = build_stage(cfg, s, n)(x)
            what = f"stage_io(cfg, {s}, {n}, {mbs})"
            got = call(fn, cfg, s, n, mbs, name="stage_io")
            expect_keys(got, ("input", "output"), what)
            answers.append((what, got, x, y, s, n, mbs, cfg))
            x = y
    parts = Parts()
    for key in ("input", "output"):
        with parts.part():
            for what, got, x, y, s, n, mbs, cfg in answers:
                _io_feedback(what, key, got[key], x if key == "input" else y, s, n, mbs, cfg)
    parts.done()


@check
def check_input_grad(fn, cases) -> None:
    for n in cases:
        for s in range(n):
            got = call(fn, s, n, name="needs_input_grad")
            want = not _kit_stage(small_cfg(layers=n), s, n).pre_process
            if got is want:
                continue
            if s == 0:
                fail(f"needs_input_grad(0, {n}) is {describe(got)}: stage 0's input is integer token ids; its backward "
                     "ends at the embedding weights and has nothing to send upstream")
            fail(f"needs_input_grad({s}, {n}) is {describe(got)}: stage {s} must send the gradient of its input back "
                 f"to stage {s - 1}, so the received activation needs requires_grad_()")


def _count_gap(got: int, want: int, cfg, s: int) -> str | None:
    """What a wrong stage parameter count misses (or adds), in the model's terms -- never the count itself."""
    from ...layout.costs import embedding_params, layer_params, loss_params
    spec = spec_of(cfg)
    v, h, seq = cfg.vocab, cfg.hidden, cfg.seq_len
    layer, gap = layer_params(spec), want - got
    named = [(embedding_params(spec), "the embedding (token table V*h and position table s*h)"),
             (loss_params(spec), "the final norm and the output layer"), (v * h, "a V x h matrix"),
             (seq * h, "the position embedding (s*h)"), (2 * h, "the final LayerNorm (2h)")]
    for size, name in named:
        if gap == size:
            return f"misses {name}"
        if gap == -size:
            return f"counts {name} that stage {s} does not build"
    if layer and gap % layer == 0:
        k = abs(gap) // layer
        return f"counts {plural(k, 'decoder layer')} {'too few' if gap > 0 else 'too many'}"
    return None


@check
def check_param_counts(fn, cases) -> None:
    for cfg, n in cases:
        what = f"stage_param_counts(<cfg layers={cfg.layers}, hidden={cfg.hidden}, vocab={cfg.vocab}>, {n})"
        got = call(fn, cfg, n, name="stage_param_counts")
        expect_type(got, (list, tuple), what)
        want = [c.params for c in stage_costs(kit_layout(cfg.layers, n), spec_of(cfg), n)]
        if list(got) == want:
            continue
        if len(got) != n:
            fail(f"{what} has {plural(len(got), 'entry', 'entries')}; give a list of ints, one per stage ({n}), "
                 "stage 0 first")
        for s, (g, w) in enumerate(zip(got, want)):
            if g != w:
                g = expect_number(g, f"{what}[{s}]")
                gap = _count_gap(int(g), w, cfg, s)
                fail(f"{what}[{s}] {gap or f'is {g:,.0f}, not the parameter count of stage {s}'}: count the "
                     "parameters of the stage you build, sum(p.numel() for p in stage.parameters()) (on the meta "
                     "device it costs no memory)")


@check
def check_bank_imbalance(value) -> None:
    spec = PRESETS["bank-pp8"][0]
    params = [c.params for c in stage_costs(even_layout(spec.layers, 8), spec, 8)]
    want = max(params) / min(params)
    got = expect_number(value, "bank_imbalance")
    if close(got, want, rel=1e-4):
        return
    if close(got, 39.1 / 14.2, rel=1e-4):
        fail(f"bank_imbalance is {got:.4f}, the ratio of the rounded figures the interview question bank quotes; "
             "divide the exact per-stage counts (a float, max / min)")
    if close(got, params[-1] / min(params), rel=1e-4):
        fail(f"bank_imbalance is {got:.4f}, the last stage over a middle one; the largest stage is the one whose "
             "extra modules are larger (compare the embedding's V*h + s*h with the head's V*h + 2h)")
    if close(got, min(params) / max(params), rel=1e-4):
        fail(f"bank_imbalance is {got:.4f}, min / max; give max / min (a ratio above 1)")
    fail(f"bank_imbalance is {got:.4f}; it is max/min of the per-stage parameter counts of bank-pp8 on pp=8 "
         "(a float)")


@check
def check_cost_table(fn, cases) -> None:
    """Three properties, each its own share: the parameters, the forward FLOPs and the activation bytes."""
    answers = []
    for model, pp in cases:
        spec, name = _named_spec(model)
        what = f"cost_table({name}, {pp})"
        got = call(fn, spec, pp, name="cost_table")
        expect_keys(got, ("params", "fwd_flops", "activation_bytes"), what)
        answers.append((what, got, spec, pp, stage_costs(even_layout(spec.layers, pp), spec, pp)))
    parts = Parts()
    for key in ("params", "fwd_flops", "activation_bytes"):
        with parts.part():
            for what, got, spec, pp, costs in answers:
                _cost_column(what, key, got[key], [getattr(c, key) for c in costs], spec, pp)
    parts.done()


def _cost_column(what, key, g, want, spec, pp) -> None:
    expect_type(g, (list, tuple), f"{what}[{key!r}]")
    if len(g) != pp:
        fail(f"{what}[{key!r}] has {plural(len(g), 'entry', 'entries')}; give a list with one number per stage "
             f"({pp}), stage 0 first")
    for s, (a, b) in enumerate(zip(g, want)):
        a = expect_number(a, f"{what}[{key!r}][{s}]")
        if close(a, b, rel=1e-9):
            continue
        if key == "fwd_flops" and close(a, 2 * b, rel=1e-9):
            fail(f"{what}['fwd_flops'][{s}] is the backward's FLOPs (2x forward); give the forward")
        if key == "fwd_flops" and close(a, 3 * b, rel=1e-9):
            fail(f"{what}['fwd_flops'][{s}] is forward + backward (3x forward); give the forward only")
        if key == "fwd_flops" and close(a, b / (spec.seq_len * spec.micro_batch_size), rel=1e-9):
            fail(f"{what}['fwd_flops'][{s}] is per token; give it per microbatch (x s*b)")
        if key == "activation_bytes" and close(a, b * pp, rel=1e-9):
            fail(f"{what}['activation_bytes'][{s}] is {pp}x stage_costs' value: give the bytes kept per microbatch")
        if close(a, b / 1e6, rel=1e-6) or close(a, b / 2 ** 20, rel=1e-6) or close(a, b / 1e9, rel=1e-6):
            fail(f"{what}[{key!r}][{s}] is scaled (millions or MiB?): give the plain count, a number per stage")
        fail(f"{what}[{key!r}][{s}] is {a:,.0f}, not what stage_costs(even_layout(spec.layers, pp), spec, pp) "
             f"gives for stage {s}")


# -- M047 follow-up ------------------------------------------------------------------------------
def _bank_costs(pp=8):
    spec = PRESETS["bank-pp8"][0]
    return spec, stage_costs(even_layout(spec.layers, pp), spec, pp)


@check
def check_baseline(layers, params) -> None:
    """Two properties, each its own share: the layers of a stage, and a middle stage's parameters."""
    spec, costs = _bank_costs()
    middle = costs[1]
    per_stage = len(middle.spec.layers)
    parts = Parts()
    with parts.part():
        got_l = expect_number(layers, "baseline_layers")
        if got_l != per_stage:
            fail(f"baseline_layers is {got_l:g}: how many of the {spec.layers} decoder layers does one of the 8 "
                 f"stages hold? (an int) {COUNTED}")
    with parts.part():
        got_p = expect_number(params, "baseline_params")
        if got_p != middle.params:
            if got_p == middle.params // per_stage:
                fail(f"baseline_params is {got_p:,.0f}, one decoder layer; a middle stage holds baseline_layers of "
                     "them")
            if got_p in (middle.params / 1e6, round(middle.params / 1e6, 1), round(middle.params / 1e6, 2)):
                fail(f"baseline_params is {got_p:g}, in millions; give the exact count (an int)")
            fail(f"baseline_params is {got_p:,.0f}; count (4 + 2f)h^2 + (9 + f)h per decoder layer (or stage_costs)")
    parts.done()


@check
def check_endpoint_extra(fn, models) -> None:
    """Two properties, each its own share: the first stage's extra parameters, and the last stage's."""
    answers = []
    for model in models:
        spec, name = _named_spec(model)
        pp = max(2, min(8, spec.layers // 2))
        costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
        layer = costs[1].params // len(costs[1].spec.layers)
        want = {"first": costs[0].params - len(costs[0].spec.layers) * layer,
                "last": costs[-1].params - len(costs[-1].spec.layers) * layer}
        what = f"endpoint_extra({name})"
        got = call(fn, spec, name="endpoint_extra")
        expect_keys(got, ("first", "last"), what)
        answers.append((what, got, want, spec))
    parts = Parts()
    for key in ("first", "last"):
        with parts.part():
            for what, got, want, spec in answers:
                _extra_feedback(what, key, got[key], want[key], spec)
    parts.done()


def _extra_feedback(what, key, got, want, spec) -> None:
    g = expect_number(got, f"{what}[{key!r}]")
    if g == want:
        return
    v, h, s = spec.vocab, spec.hidden, spec.seq_len
    if key == "first" and g == v * h:
        fail(f"{what}['first'] is V*h only: the first stage also holds the position embedding {COUNTED}")
    if key == "first" and g == v * h + s * h + 2 * h:
        fail(f"{what}['first'] counts a LayerNorm the first stage does not have: the embedding is two tables only")
    if key == "last" and g == v * h:
        fail(f"{what}['last'] is V*h only: the last stage also holds the final LayerNorm (weight and bias, 2h)")
    if key == "last" and g in (v * h + v, v * h + 2 * h + v):
        fail(f"{what}['last'] counts a bias of the output layer; it has none (bias=False, as in Megatron)")
    if key == "last" and g == v * h + s * h:
        fail(f"{what}['last'] counts a position table; the last stage holds the final LayerNorm and the output "
             "layer")
    fail(f"{what}[{key!r}] is {g:,.0f}: write it in V, h and s from the modules the {key} stage holds beyond its "
         "decoder layers (an int)")


@check
def check_tied(fn, cases) -> None:
    """Two properties, each its own share: the per-stage counts, and the unique total."""
    import torch

    from ...runtime.model import GPT, build_stage
    answers = []
    for cfg, n in cases:
        what = f"tied_counts(<cfg tie_embeddings=True, layers={cfg.layers}>, {n})"
        got = call(fn, cfg, n, name="tied_counts")
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            fail(f"{what} must return a pair (per-stage counts, unique total): a list of ints and an int, "
                 f"got {describe(got)}")
        with torch.device("meta"):
            want_per = [build_stage(cfg, s, n).num_params() for s in range(n)]
            want_unique = sum(p.numel() for p in GPT(cfg).parameters())
        answers.append((what, got, want_per, want_unique, cfg))
    parts = Parts()
    with parts.part():
        for what, (per, _), want_per, _, cfg in answers:
            expect_type(per, (list, tuple), f"{what}[0]")
            if list(per) == want_per:
                continue
            if len(per) != len(want_per):
                fail(f"{what}[0] has {plural(len(per), 'entry', 'entries')}; one count per stage "
                     f"({len(want_per)}), stage 0 first")
            if list(per[:-1]) == want_per[:-1] and per[-1] == want_per[-1] - cfg.vocab * cfg.hidden:
                fail(f"{what}: the last stage still holds its own copy of the V x h matrix; tying shares values "
                     "(the copies' gradients are summed each step), not memory across ranks")
            fail(f"{what}[0] is {describe(list(per))}: count what build_stage(cfg, s, n) builds on each stage")
    with parts.part():
        for what, (_, unique), want_per, want_unique, cfg in answers:
            u = expect_number(unique, f"{what}[1]")
            if u == want_unique:
                continue
            if u == sum(want_per):  # one stage holding both ends shares the matrix: the sum is right
                fail(f"{what}[1] is the sum over stages; in the model the two copies are one parameter, so count "
                     "the tied matrix once")
            fail(f"{what}[1] is {u:,.0f}: count the distinct parameters of GPT(cfg) (model.parameters() lists a "
                 "shared tensor once)")
    parts.done()


def decide_by_time_expected(spec, pp, m):
    costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
    params = [c.params for c in costs]
    flops = [c.fwd_flops for c in costs]
    sched = build_schedule("1f1b", pp, m)
    equal = simulate(sched, fwd=1, bwd=2).makespan
    w = [f / min(flops) for f in flops]
    by_flops = simulate(sched, fwd=w, bwd=[2 * x for x in w]).makespan
    return {"by_params": params.index(max(params)), "by_time": flops.index(max(flops)),
            "makespan_ratio": by_flops / equal}


@check
def check_decide_by_time(fn, cases) -> None:
    """Three properties, each its own share: the stage by parameters, the stage by time, the makespan ratio."""
    answers = []
    for model, pp, m in cases:
        spec, name = _named_spec(model)
        what = f"decide_by_time({name}, {pp}, {m})"
        got = call(fn, spec, pp, m, name="decide_by_time")
        expect_keys(got, ("by_params", "by_time", "makespan_ratio"), what)
        answers.append((what, got, decide_by_time_expected(spec, pp, m)))
    parts = Parts()
    with parts.part():
        for what, got, want in answers:
            if got["by_params"] != want["by_params"]:
                fail(f"{what}['by_params'] is {describe(got['by_params'])}: give the index (an int, stage 0 first) "
                     "of the stage with the most parameters")
    with parts.part():
        for what, got, want in answers:
            if got["by_time"] == want["by_time"]:
                continue
            if got["by_time"] == want["by_params"]:
                fail(f"{what}['by_time'] is the stage heaviest in parameters: its embedding is a lookup and costs "
                     "almost no FLOPs; the output layer's h x V matmul per token does")
            fail(f"{what}['by_time'] is {describe(got['by_time'])}: give the index (an int, stage 0 first) of the "
                 "stage with the most forward FLOPs")
    with parts.part():
        for what, got, want in answers:
            r = expect_number(got["makespan_ratio"], f"{what}['makespan_ratio']")
            if close(r, want["makespan_ratio"], rel=1e-6):
                continue
            if close(r, 1 / want["makespan_ratio"], rel=1e-6):
                fail(f"{what}['makespan_ratio'] is {r:.4f}, the balanced makespan over the FLOPs-weighted one; "
                     "divide the other way (a ratio of at least 1)")
            fail(f"{what}['makespan_ratio'] is {r:.4f}, not the FLOPs-weighted makespan over the balanced one: "
                 "simulate 1F1B with each stage's fwd proportional to its forward FLOPs (bwd = 2 x fwd) and divide "
                 "by the makespan with fwd=1, bwd=2 on every stage")
    parts.done()


# -- hidden cases, drawn per grade (``hidden_rng(<grade id>)``) -------------------------------------------
def draw_cfg(r, layers: int | None = None, **kw):
    """A tiny runtime model (fp32) the checks build for real in a moment: at most 6 layers, hidden <= 32."""
    heads = r.choice([1, 2, 4])
    fields = {"vocab": r.randint(8, 64), "seq_len": r.choice([4, 8, 12, 16]), "hidden": heads * r.choice([4, 8]),
              "heads": heads, "layers": layers or r.randint(1, 6), "seed": r.randrange(1000)}
    return small_cfg(**{**fields, **kw})


def _big_cfg(r, **kw):
    """A runtime model of any size, for checks that build it on the meta device only."""
    spec = draw_spec(r, r.randint(2, 24))
    return small_cfg(**{k: getattr(spec, k) for k in ("vocab", "seq_len", "hidden", "heads", "layers", "ffn_mult")},
                     **kw)


def _with_stages(r, cfg):
    return cfg, r.randint(1, cfg.layers)


def hidden_parts_cases(rng) -> list:
    """(stage, stages, layers).  Fixed first, so a known wrong answer fails on the same case under every seed:
    the last of 4 stages over 6 layers (the first two take one extra: a split giving the extra to the last
    stages, or local numbering, fails here), a middle stage (an embedding or head on every stage fails), and
    one stage holding everything."""
    def make(r):
        layers = r.randint(1, 16)
        n = r.randint(1, layers)
        return r.randrange(n), n, layers
    return drawn(rng, 3, make, fixed=[(3, 4, 6), (1, 4, 6), (0, 1, 3)])


def hidden_build_cases(rng) -> list:
    return drawn(rng, 2, lambda r: _with_stages(r, draw_cfg(r)), fixed=[(small_cfg(layers=2), 1)])


def hidden_io_cases(rng) -> list:
    """(cfg, stages, mbs).  Fixed first: one stage that is first and last at once (token ids in, logits out), and
    three stages with one sequence each and a vocabulary unlike the hidden size."""
    return drawn(rng, 2, lambda r: (*_with_stages(r, draw_cfg(r)), r.randint(1, 5)),
                 fixed=[(small_cfg(layers=1), 1, 3), (small_cfg(layers=3, vocab=40), 3, 1)])


def hidden_input_grad_cases(rng) -> list:
    return drawn(rng, 2, lambda r: r.randint(2, 12), fixed=[1, 2])


def hidden_param_cases(rng) -> list:
    """Models of any size (counted on the meta device).  Fixed first: GPT-2 medium's shape, 7 layers on 3 stages
    (uneven: an even-split-only count fails here), and one stage holding everything."""
    from ...runtime.model import GPTConfig
    return drawn(rng, 2, lambda r: _with_stages(r, _big_cfg(r)),
                 fixed=[(GPTConfig(vocab=50304, seq_len=1024, hidden=1024, heads=16, layers=24), 8),
                        (small_cfg(layers=7, vocab=1000), 3), (small_cfg(layers=2), 1)])


def _even_case(r) -> tuple[ModelSpec, int]:
    pp = r.randint(2, 8)
    return draw_spec(r, pp * r.randint(1, 4)), pp


def hidden_cost_cases(rng) -> list:
    """(model, pp).  Fixed first: the runtime's default model, and a 4-byte model with 3 sequences per microbatch
    and ffn_mult 2 (a cost table that assumes 2 bytes, one sequence or ffn_mult 4 fails here)."""
    odd = ModelSpec(vocab=1000, seq_len=128, hidden=256, heads=4, layers=6, ffn_mult=2, micro_batch_size=3,
                    dtype_bytes=4)
    return drawn(rng, 2, _even_case, fixed=[("tiny", 2), (odd, 3)])


def hidden_endpoint_models(rng) -> list:
    """Models whose layers split evenly over max(2, min(8, layers // 2)) >= 3 stages (a middle stage exists)."""
    odd = ModelSpec(vocab=1000, seq_len=128, hidden=256, heads=4, layers=6, ffn_mult=2)
    return drawn(rng, 2, lambda r: draw_spec(r, r.choice([6, 8, 10, 12, 14, 16, 24, 32])), fixed=["tiny", odd])


def hidden_tied_cases(rng) -> list:
    """Fixed first: one stage holding both ends (the tied matrix is one tensor there), and two stages."""
    return drawn(rng, 2, lambda r: _with_stages(r, _big_cfg(r, tie_embeddings=True)),
                 fixed=[(small_cfg(layers=1, tie_embeddings=True), 1), (small_cfg(layers=4, tie_embeddings=True), 2)])


def hidden_time_cases(rng) -> list:
    """Fixed first: the runtime's default model on 4 stages, and one microbatch on 2 stages."""
    return drawn(rng, 2, lambda r: (*_even_case(r), r.randint(1, 32)), fixed=[("tiny", 4, 6), ("tiny", 2, 1)])
