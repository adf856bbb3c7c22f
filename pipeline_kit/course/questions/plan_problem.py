"""Lab 10's problem and its judge: the model, GPUs and budget the student plans for, and the planner's view of a
configuration the student chose.

Why a module of its own: the checks in :mod:`.plan` must judge *any* configuration a student names -- a custom
layout too, not only the even and balanced splits the planner's search visits -- exactly as the planner would
judge it.  So a configuration is checked here the way :mod:`pipeline_kit.plan.search` checks a candidate (the
global batch fixes M, the family must accept it, the layout must have ``pp x v`` stages), sized by
:func:`~pipeline_kit.plan.memory.rank_memory` and predicted by the search's own prediction step; nothing is typed.
The memory cases the hidden tests draw are made here too, fixed edge cases first.
"""

from __future__ import annotations

import functools

from ...layout import ModelSpec, parse_layout
from ...layout.balance import even_split
from ...layout.costs import boundary_bytes
from ...layout.spec import LayoutError
from ...limits import LimitError
from ...plan.memory import Training, rank_memory
from ...plan.search import (Candidate, Hardware, Search, balanced_layout, family_refusal, item_times, plan, predict,
                            size)
from ...schedules import FAMILIES, ScheduleConfigError, build_schedule
from .common import LabCheckFailed, book, describe, drawn, expect_int, expect_keys, expect_type, fail

GB = 1e9
TERMS = ("weights", "gradients", "optimizer", "activations", "wgrad_kept", "p2p_buffers")
CONFIG_KEYS = ("schedule", "pp", "chunks", "microbatches", "layout")

# The lab's problem: a 1.3B-class GPT on 8 GPUs, with 8.1 GB of each GPU left for the training state (the rest is
# the CUDA context, NCCL's buffers and fragmentation), a global batch of 32 sequences.  Chosen so that planning is
# a choice (tests/test_lab10.py holds it to this): about a dozen designs fit, several families come within
# NEAR_BEST of the fastest and trade time for memory, and the budget rules out whole families (GPipe, the
# breadth-first loop) and the fastest design of all.
LAB_MODEL = ModelSpec(vocab=50304, seq_len=1024, hidden=2048, heads=16, layers=24, micro_batch_size=1)
LAB_HARDWARE = Hardware(gpus=8, gpu_memory_bytes=8.1 * GB, tflops=400.0, p2p_gbps=50.0, p2p_latency_us=10.0)
LAB_GLOBAL_BATCH = 32
NEAR_BEST = 0.05  # a choice within 5 % of the planner's best step time is a good choice
PREDICTION = 0.005  # a predicted step time within 0.5 % of the planner's: the same simulator gives it exactly,
# and the smallest part a prediction may leave out (this problem's bubble and P2P) is about 1 %


def problem() -> dict:
    """The lab's problem as plain data (what the given cell shows and every test cell judges against)."""
    hw = LAB_HARDWARE
    return {"model": LAB_MODEL, "gpus": hw.gpus, "gpu_memory_bytes": round(hw.gpu_memory_bytes), "tflops": hw.tflops,
            "p2p_gbps": hw.p2p_gbps, "p2p_latency_us": hw.p2p_latency_us, "global_batch": LAB_GLOBAL_BATCH,
            "optimizer": "adam"}


@functools.lru_cache(maxsize=1)
def lab_search() -> Search:
    """The planner's search of the lab's problem (once per process)."""
    return plan(LAB_MODEL, LAB_HARDWARE, global_batch=LAB_GLOBAL_BATCH, model_name="lab 10's model")


def best() -> Candidate:
    """The fastest configuration that fits (the choice's 5 % are measured from it, not from the planner's pick,
    which may be a simpler design among near-ties)."""
    search = lab_search()
    return search.candidates[search.fastest]


# -- a configuration the student names ------------------------------------------------------------------------
def _config(config, what: str = "my_config") -> tuple[str, int, int, int, str]:
    expect_type(config, dict, what)
    expect_keys(config, CONFIG_KEYS, what)
    name = config["schedule"]
    expect_type(name, str, f"{what}['schedule']")
    if name not in FAMILIES:
        fail(f"{what}['schedule'] = {describe(name)} is not one of the kit's families ({', '.join(FAMILIES)})")
    pp = expect_int(config["pp"], f"{what}['pp']")
    chunks = expect_int(config["chunks"], f"{what}['chunks']")
    m = expect_int(config["microbatches"], f"{what}['microbatches']")
    expect_type(config["layout"], str, f"{what}['layout']")
    return name, pp, chunks, m, config["layout"]


def schedule_of(name: str, pp: int, chunks: int, m: int, what: str = "my_config"):
    """The family's schedule, or feedback quoting the family's refusal (PyTorch's and Megatron's reason)."""
    if FAMILIES[name].chunks == "one" and chunks != 1:
        fail(f"{what}: {name} runs one chunk per rank; set 'chunks' to 1, got {chunks}")
    try:
        return build_schedule(name, pp, m, chunks if FAMILIES[name].chunks != "one" else None)
    except (ScheduleConfigError, LimitError) as exc:
        fail(f"{what}: {family_refusal(name, pp, m, chunks, exc)}")


def layout_of(text: str, model: ModelSpec, stages: int, what: str = "my_config"):
    try:
        layout = parse_layout(text, layers=model.layers)
    except LayoutError as exc:
        fail(f"{what}['layout'] = {text!r} is not a legal layout of the model's {model.layers} layers: {exc}")
    if layout.num_stages != stages:
        fail(f"{what}['layout'] has {layout.num_stages} stages; pp x chunks = {stages} stages need one each")
    return layout


def sized(model: ModelSpec, config, what: str = "config"):
    """``rank_memory`` of a configuration of ``model`` (any M: the memory cases are not tied to a batch)."""
    name, pp, chunks, m, text = _config(config, what)
    if pp < 1 or chunks < 1 or m < 1:
        fail(f"{what}: pp, chunks and microbatches must be at least 1")
    sched = schedule_of(name, pp, chunks, m, what)
    return rank_memory(model, layout_of(text, model, pp * chunks, what), sched, Training())


def runnable(config, what: str = "my_config") -> Candidate:
    """The student's configuration of the lab's problem, sized and predicted as the planner does, fitting or not;
    LabCheckFailed (saying why) where it cannot run at all."""
    name, pp, chunks, m, text = _config(config, what)
    hw, model = LAB_HARDWARE, LAB_MODEL
    if pp < 1 or hw.gpus % pp:
        fail(f"{what}['pp'] = {pp} does not divide the {hw.gpus} GPUs: the ranks left over would form no replica")
    dp = hw.gpus // pp
    per_replica = dp * model.micro_batch_size
    want_m = LAB_GLOBAL_BATCH // per_replica
    if LAB_GLOBAL_BATCH % per_replica or m != want_m:
        whole = f" (at pp = {pp} that is not a whole number)" if LAB_GLOBAL_BATCH % per_replica else ""
        fail(f"{what}['microbatches'] = {m}, but M follows from the global batch: PROBLEM['global_batch'] sequences "
             "a step, shared by dp = gpus / pp data-parallel replicas, each fed in micro-batches of "
             f"model.micro_batch_size{whole} {book('planning', 'What the planner does')}")
    if chunks < 1:
        fail(f"{what}['chunks'] must be at least 1, got {chunks}")
    sched = schedule_of(name, pp, chunks, m, what)
    layout = layout_of(text, model, pp * chunks, what)
    training = Training()
    p2p_bytes = boundary_bytes(model)
    cand = Candidate(schedule=name, pp=pp, dp=dp, chunks=chunks, microbatches=m, layout=str(layout),
                     layout_kind="yours", p2p_time_s=hw.p2p_seconds(p2p_bytes), p2p_bytes=p2p_bytes)
    size(cand, model, hw, training, layout, sched)  # the planner's sizing and refusal, fitting or not ...
    predict(cand, model, hw, training, LAB_GLOBAL_BATCH, item_times(model, hw, training), layout, sched)
    return cand  # ... and its prediction either way: a config that does not fit still has a step time to judge


def try_runnable(config) -> Candidate | None:
    try:
        return runnable(config)
    except LabCheckFailed:
        return None


def baseline_of(pp: int) -> Candidate:
    """Plain 1F1B with the even split at ``pp`` (the planner's baseline for a pick at that pp)."""
    m = LAB_GLOBAL_BATCH // (LAB_HARDWARE.gpus // pp * LAB_MODEL.micro_batch_size)
    return runnable({"schedule": "1f1b", "pp": pp, "chunks": 1, "microbatches": m,
                     "layout": str(even_split(LAB_MODEL.layers, pp))}, "the baseline")


# -- the memory cases ------------------------------------------------------------------------------------------
def _case(model: ModelSpec, name: str, pp: int, m: int, chunks: int = 1, layout=None) -> tuple[ModelSpec, dict]:
    stages = pp * chunks
    text = str(layout if layout is not None else even_split(model.layers, stages))
    return model, {"schedule": name, "pp": pp, "chunks": chunks, "microbatches": m, "layout": text}


SMALL = ModelSpec(vocab=1000, seq_len=128, hidden=256, heads=4, layers=8, micro_batch_size=2)


def memory_cases() -> list[tuple[ModelSpec, dict]]:
    """The visible cases: the lab's model under plain 1F1B and under ZB-H1 (a split backward), pp = 8, M = 12."""
    return [_case(LAB_MODEL, "1f1b", 8, 12), _case(LAB_MODEL, "zb-h1", 8, 12)]


def _balanced(model: ModelSpec, stages: int):
    return balanced_layout(model, item_times(model, LAB_HARDWARE, Training()), stages)


def _draw(r) -> tuple[ModelSpec, dict]:
    heads = r.choice([2, 4, 8])
    model = ModelSpec(vocab=r.choice([128, 1000, 32000]), seq_len=r.choice([16, 128, 512]),
                      hidden=heads * r.choice([16, 32, 64]), heads=heads, layers=r.randint(4, 16),
                      ffn_mult=r.choice([2, 4]), tie_embeddings=r.random() < 0.3, micro_batch_size=r.randint(1, 4))
    while True:
        name = r.choice(list(FAMILIES))
        kind = FAMILIES[name].chunks
        chunks = 1 if kind == "one" else 2 if kind == "two" else r.choice([2, 3])
        pp = r.randint(1, 4)
        if pp * chunks > model.layers + 2:
            continue
        m = r.randint(1, 3 * pp)
        try:
            build_schedule(name, pp, m, chunks if kind != "one" else None)
        except ScheduleConfigError:
            continue
        layout = _balanced(model, pp * chunks) if r.random() < 0.5 else even_split(model.layers, pp * chunks)
        try:  # even_split can leave a stage empty when the stages outnumber the layers: draw again
            parse_layout(str(layout), layers=model.layers)
        except LayoutError:
            continue
        return _case(model, name, pp, m, chunks, layout)


def hidden_memory_cases(rng) -> list[tuple[ModelSpec, dict]]:
    """Fixed first: ZB-V on the lab's model (W's kept gradients, a balanced layout), 1F1B with M < pp (the ranks
    differ), interleaved and ZB-H1 on a small model, and pp = 1 (no P2P buffers); then drawn cases."""
    fixed = [_case(LAB_MODEL, "zbv", 8, 12, 2, _balanced(LAB_MODEL, 16)), _case(SMALL, "1f1b", 4, 2),
             _case(SMALL, "interleaved", 2, 4, 2), _case(SMALL, "zb-h1", 4, 6), _case(SMALL, "gpipe", 1, 3)]
    return drawn(rng, 4, _draw, fixed=fixed)
