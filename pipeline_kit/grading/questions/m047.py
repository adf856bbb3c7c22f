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
from .common import (
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


def small_cfg(**kw):
    from ...runtime.model import GPTConfig
    base = {"vocab": 64, "seq_len": 16, "hidden": 32, "heads": 4, "layers": 5, "seed": 7}
    base.update(kw)
    return GPTConfig(**base)


def seed_cfg():
    """The seeds' model, seed-pp8, as the runtime's ``GPTConfig`` (lab 6's ``SEED_CFG``)."""
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
    for stage, n, layers in cases:
        what = f"stage_parts({stage}, {n}, {layers})"
        got = call(fn, stage, n, layers, name="stage_parts")
        expect_keys(got, ("embedding", "layers", "head"), what)
        ref = _kit_stage(small_cfg(layers=layers), stage, n)
        if got["embedding"] is not ref.pre_process:
            fail(f"{what}['embedding'] is {describe(got['embedding'])}: only the first stage (pre_process, stage 0) "
                 "builds the embedding and takes token ids")
        if got["head"] is not ref.post_process:
            fail(f"{what}['head'] is {describe(got['head'])}: only the last stage (post_process, stage {n - 1}) builds "
                 "the final norm and the output layer")
        want = list(ref.layer_ids)
        expect_type(got["layers"], (list, tuple, range), f"{what}['layers']")
        mine = list(got["layers"])
        if mine == want:
            continue
        if mine == list(range(len(want))) and want[0] != 0:
            fail(f"{what}['layers'] is {mine}: number layers globally ({want}), so layer i has the same name and "
                 "parameters wherever it lives")
        if len(mine) != len(want):
            fail(f"{what}['layers'] has {len(mine)} layers, expected {len(want)}: {layers} layers over {n} stages "
                 "give the first stages one extra each when it does not divide (split_layers)")
        fail(f"{what}['layers'] is {mine}, expected {want}")


@check
def check_stage_io(fn, cases) -> None:
    import torch

    from ...runtime.model import build_stage, make_batch
    for cfg, n, mbs in cases:
        tokens, _ = make_batch(cfg, 1, mbs, 0)
        x = tokens[0]
        for s in range(n):
            stage = build_stage(cfg, s, n)
            y = stage(x)
            what = f"stage_io(cfg, {s}, {n}, {mbs})"
            got = call(fn, cfg, s, n, mbs, name="stage_io")
            expect_keys(got, ("input", "output"), what)
            for key, t in (("input", x), ("output", y)):
                v = got[key]
                if not (isinstance(v, (tuple, list)) and len(v) == 2):
                    fail(f"{what}[{key!r}] must be (shape, dtype), got {describe(v)}")
                shape, dtype = tuple(v[0]) if isinstance(v[0], (tuple, list, torch.Size)) else v[0], v[1]
                want_shape = tuple(t.shape)
                if dtype != t.dtype:
                    if key == "input" and s == 0:
                        fail(f"{what}: the first stage takes token ids ({t.dtype}), not {dtype}: pre_process means "
                             "the embedding lookup happens here")
                    if key == "input":
                        fail(f"{what}: stage {s} takes the previous stage's activation ({t.dtype}), not {dtype}")
                    fail(f"{what}['output'] dtype is {dtype}, expected {t.dtype}")
                if shape != want_shape:
                    if key == "output" and s == n - 1 and shape == (mbs, cfg.seq_len, cfg.hidden):
                        fail(f"{what}: the last stage returns logits over the vocabulary ({want_shape}); the loss is "
                             "applied to them by the caller")
                    if key == "output" and s < n - 1 and shape == (mbs, cfg.seq_len, cfg.vocab):
                        fail(f"{what}: only the last stage has the output layer; stage {s} returns hidden states")
                    if len(shape) == len(want_shape) and sorted(shape) == sorted(want_shape):
                        fail(f"{what}[{key!r}] shape {shape}: the kit's runtime is batch-first, {want_shape}")
                    fail(f"{what}[{key!r}] shape is {shape}, expected {want_shape}")
            x = y.detach()


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
                 "to stage {s - 1}, so the received activation needs requires_grad_()")


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
            fail(f"{what} has {len(got)} entries; one per stage, {n}")
        for s, (g, w) in enumerate(zip(got, want)):
            if g != w:
                fail(f"{what}[{s}] is {describe(g)}, expected {w:,} (count the parameters of the stage you build: "
                     "sum(p.numel() for p in stage.parameters()); on the meta device it costs no memory)")


@check
def check_seed_imbalance(value) -> None:
    spec = PRESETS["seed-pp8"][0]
    params = [c.params for c in stage_costs(even_layout(spec.layers, 8), spec, 8)]
    want = max(params) / min(params)
    got = expect_number(value, "seed_imbalance")
    if close(got, want, rel=1e-4):
        return
    if close(got, 39.1 / 14.2, rel=1e-4):
        fail(f"seed_imbalance is {got:.4f}, the ratio of the rounded seed figures; the exact counts "
             f"{max(params):,} / {min(params):,} give {want:.4f}")
    if close(got, params[-1] / min(params), rel=1e-4):
        fail(f"seed_imbalance is {got:.4f}, the last stage over a middle one; the largest stage is stage 0 "
             "(embedding: V*h + s*h is larger than the head's V*h + 2h)")
    fail(f"seed_imbalance is {got:.4f}; it is max/min of the per-stage parameter counts of seed-pp8 on pp=8")


@check
def check_cost_table(fn, cases) -> None:
    for model, pp in cases:
        spec, name = _named_spec(model)
        what = f"cost_table({name}, {pp})"
        got = call(fn, spec, pp, name="cost_table")
        expect_keys(got, ("params", "fwd_flops", "activation_bytes"), what)
        costs = stage_costs(even_layout(spec.layers, pp), spec, pp)
        want = {"params": [c.params for c in costs], "fwd_flops": [c.fwd_flops for c in costs],
                "activation_bytes": [c.activation_bytes for c in costs]}
        for key in ("params", "fwd_flops", "activation_bytes"):
            g = got[key]
            expect_type(g, (list, tuple), f"{what}[{key!r}]")
            if len(g) != pp:
                fail(f"{what}[{key!r}] has {len(g)} entries, one per stage: {pp}")
            for s, (a, b) in enumerate(zip(g, want[key])):
                a = expect_number(a, f"{what}[{key!r}][{s}]")
                if close(a, b, rel=1e-9):
                    continue
                if key == "fwd_flops" and close(a, 2 * b, rel=1e-9):
                    fail(f"{what}['fwd_flops'][{s}] is the backward's FLOPs (2x forward); give the forward")
                if key == "fwd_flops" and close(a, b / (spec.seq_len * spec.micro_batch_size), rel=1e-9):
                    fail(f"{what}['fwd_flops'][{s}] is per token; give it per microbatch (x s*b)")
                fail(f"{what}[{key!r}][{s}] is {a:,.0f}, stage_costs gives {b:,.0f}")


# -- M047 follow-up ------------------------------------------------------------------------------
def _seed_costs(pp=8):
    spec = PRESETS["seed-pp8"][0]
    return spec, stage_costs(even_layout(spec.layers, pp), spec, pp)


@check
def check_baseline(layers, params) -> None:
    spec, costs = _seed_costs()
    middle = costs[1]
    got_l = expect_number(layers, "baseline_layers")
    if got_l != len(middle.spec.layers):
        fail(f"baseline_layers is {got_l:g}: {spec.layers} decoder layers over 8 stages is "
             f"{len(middle.spec.layers)} per stage")
    got_p = expect_number(params, "baseline_params")
    if got_p == middle.params:
        return
    if got_p == middle.params // len(middle.spec.layers):
        fail(f"baseline_params is {got_p:,.0f}, one decoder layer; a middle stage holds "
             f"{len(middle.spec.layers)}")
    fail(f"baseline_params is {got_p:,.0f}; count (4 + 2f)h^2 + (9 + f)h per decoder layer (or stage_costs)")


@check
def check_endpoint_extra(fn, models) -> None:
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
        v, h, s = spec.vocab, spec.hidden, spec.seq_len
        for key in ("first", "last"):
            g = expect_number(got[key], f"{what}[{key!r}]")
            if g == want[key]:
                continue
            if key == "first" and g == v * h:
                fail(f"{what}['first'] is V*h only: the first stage also holds the position embedding, s*h = {s * h:,}")
            if key == "last" and g == v * h:
                fail(f"{what}['last'] is V*h only: the last stage also holds the final LayerNorm (weight and bias, 2h)")
            if key == "last" and g in (v * h + v, v * h + 2 * h + v):
                fail(f"{what}['last'] counts a bias of the output layer; it has none (bias=False, as in Megatron)")
            fail(f"{what}[{key!r}] is {g:,.0f}, expected {want[key]:,}")


@check
def check_tied(fn, cases) -> None:
    import torch

    from ...runtime.model import GPT, build_stage
    for cfg, n in cases:
        what = f"tied_counts(<cfg tie_embeddings=True, layers={cfg.layers}>, {n})"
        got = call(fn, cfg, n, name="tied_counts")
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            fail(f"{what} must return (per-stage counts, unique total), got {describe(got)}")
        per, unique = got
        with torch.device("meta"):
            want_per = [build_stage(cfg, s, n).num_params() for s in range(n)]
            want_unique = sum(p.numel() for p in GPT(cfg).parameters())
        expect_type(per, (list, tuple), f"{what}[0]")
        vh = cfg.vocab * cfg.hidden
        if list(per) != want_per:
            if list(per[:-1]) == want_per[:-1] and per[-1] == want_per[-1] - vh:
                fail(f"{what}: the last stage still holds its own copy of the V x h matrix; tying shares values "
                     "(the copies' gradients are summed each step), not memory across ranks")
            fail(f"{what}[0] is {describe(list(per))}, expected {want_per}")
        u = expect_number(unique, f"{what}[1]")
        if u == sum(want_per) != want_unique:  # one stage holding both ends shares the matrix: the sum is right
            fail(f"{what}[1] is the sum over stages; in the model the two copies are one parameter, so the unique "
                 f"count is {vh:,} smaller")
        if u != want_unique:
            fail(f"{what}[1] is {u:,.0f}, expected {want_unique:,} (sum(p.numel() for p in GPT(cfg).parameters()))")


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
    for model, pp, m in cases:
        spec, name = _named_spec(model)
        what = f"decide_by_time({name}, {pp}, {m})"
        got = call(fn, spec, pp, m, name="decide_by_time")
        expect_keys(got, ("by_params", "by_time", "makespan_ratio"), what)
        want = decide_by_time_expected(spec, pp, m)
        if got["by_params"] != want["by_params"]:
            fail(f"{what}['by_params'] is {describe(got['by_params'])}, expected stage {want['by_params']}")
        if got["by_time"] != want["by_time"]:
            if got["by_time"] == want["by_params"]:
                fail(f"{what}['by_time'] is stage {got['by_time']}, the heaviest in parameters: its embedding is a "
                     "lookup and costs almost no FLOPs; the output layer's h x V matmul per token does")
            fail(f"{what}['by_time'] is {describe(got['by_time'])}, expected stage {want['by_time']}")
        r = expect_number(got["makespan_ratio"], f"{what}['makespan_ratio']")
        if not close(r, want["makespan_ratio"], rel=1e-6):
            fail(f"{what}['makespan_ratio'] is {r:.4f}, expected {want['makespan_ratio']:.4f}: simulate 1F1B with "
                 "each stage's fwd proportional to its forward FLOPs (bwd = 2 x fwd) and divide by the balanced "
                 "simulation's makespan")


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
    """(stage, stages, layers); the fixed case splits 6 layers over 4 stages (the first two take one extra)."""
    def make(r):
        layers = r.randint(1, 16)
        n = r.randint(1, layers)
        return r.randrange(n), n, layers
    return drawn(rng, 3, make, fixed=[(3, 4, 6)])


def hidden_build_cases(rng) -> list:
    return drawn(rng, 2, lambda r: _with_stages(r, draw_cfg(r)), fixed=[(small_cfg(layers=2), 1)])


def hidden_io_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (*_with_stages(r, draw_cfg(r)), r.randint(1, 5)))


def hidden_input_grad_cases(rng) -> list:
    return drawn(rng, 2, lambda r: r.randint(2, 12), fixed=[1])


def hidden_param_cases(rng) -> list:
    """Models of any size (counted on the meta device); the fixed one is GPT-2 medium's shape."""
    from ...runtime.model import GPTConfig
    return drawn(rng, 2, lambda r: _with_stages(r, _big_cfg(r)),
                 fixed=[(GPTConfig(vocab=50304, seq_len=1024, hidden=1024, heads=16, layers=24), 8)])


def _even_case(r) -> tuple[ModelSpec, int]:
    pp = r.randint(2, 8)
    return draw_spec(r, pp * r.randint(1, 4)), pp


def hidden_cost_cases(rng) -> list:
    return drawn(rng, 2, _even_case, fixed=[("tiny", 2)])


def hidden_endpoint_models(rng) -> list:
    """Models whose layers split evenly over max(2, min(8, layers // 2)) >= 3 stages (a middle stage exists)."""
    return drawn(rng, 2, lambda r: draw_spec(r, r.choice([6, 8, 10, 12, 14, 16, 24, 32])), fixed=["tiny"])


def hidden_tied_cases(rng) -> list:
    return drawn(rng, 2, lambda r: _with_stages(r, _big_cfg(r, tie_embeddings=True)),
                 fixed=[(small_cfg(layers=1, tie_embeddings=True), 1)])


def hidden_time_cases(rng) -> list:
    return drawn(rng, 2, lambda r: (*_even_case(r), r.randint(1, 32)), fixed=[("tiny", 4, 6)])
