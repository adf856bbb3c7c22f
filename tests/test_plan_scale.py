"""The planner at cluster sizes (issue 37): the chunk counts Megatron's rule allows, the lower bound that lets a large
search leave candidates unsimulated, and the proof by comparison that doing so changes no answer.

The real sizes (a 145.6B model on 1,536 GPUs, 70B on 4,096) take seconds each, so they are timed by
``benchmarks/bench_plan.py`` (with ``--check``, against simulating everything); here the mechanism is tested on
small searches, where planning with and without the bound both run in a fraction of a second.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline_kit.layout import load_model_spec
from pipeline_kit.layout.costs import ModelSpec
from pipeline_kit.limits import LIMITS
from pipeline_kit.plan import GB, Hardware, PlanError, plan
from pipeline_kit.plan.bound import pipeline_bound
from pipeline_kit.plan.explain import explain
from pipeline_kit.plan.memory import Training
from pipeline_kit.plan.search import EXACT_TOP, describe_search
from pipeline_kit.plan.shapes import chunk_choices, count_ops
from pipeline_kit.schedules import FAMILIES, ScheduleConfigError, build_schedule
from pipeline_kit.sim import simulate

BANK = load_model_spec("bank-pp8")
FAMILY_NAMES = sorted(FAMILIES)


def test_chunk_counts_follow_megatrons_rule():
    """Every v >= 2 with layers % (pp v) == 0 for the families that take any number (NeMo's VP5 on 80 layers at
    pp = 4 among them), 1 or 2 for the others; a pp no v fits is one refused shape, saying why."""
    assert chunk_choices("interleaved", 80, 4) == [2, 4, 5, 10, 20]
    assert chunk_choices("looped-bfs", 80, 16) == [5] and chunk_choices("interleaved-zb", 80, 3) == []
    assert chunk_choices("zbv", 80, 4) == [2] and chunk_choices("1f1b", 80, 4) == [1]
    small = ModelSpec(layers=80, hidden=64, heads=4, seq_len=32, vocab=256, micro_batch_size=1)
    search = plan(small, Hardware(12, 80 * GB), global_batch=12, schedules=["interleaved"])
    tried = {}
    for c in search.candidates:
        tried.setdefault(c.pp, set()).add(c.chunks)
    assert tried[4] == {2, 4, 5, 10, 20} and tried[2] == {2, 4, 5, 8, 10, 20, 40}
    five = [c for c in search.candidates if c.pp == 4 and c.chunks == 5]
    assert five and all(c.fits and c.layout.count("|") == 19 for c in five)  # 20 stages of 4 layers
    (three,) = [c for c in search.candidates if c.pp == 3]
    assert three.refusal == "layout" and "layers % (pp x v) == 0" in three.why_not and "80 layers" in three.why_not


@settings(max_examples=60, deadline=None)
@given(family=st.sampled_from(FAMILY_NAMES), pp=st.integers(1, 4), m=st.integers(1, 9), v=st.sampled_from([2, 3]),
       costs=st.lists(st.floats(0, 5), min_size=24, max_size=24), p2p=st.floats(0, 2))
def test_the_bound_never_passes_the_simulated_makespan(family, pp, m, v, costs, p2p):
    """Every family, any stage times and P2P: the bound is at most the simulator's makespan, and at least the
    busiest rank's work (what makes it worth having)."""
    chunks = None if FAMILIES[family].chunks == "one" else (2 if FAMILIES[family].chunks == "two" else v)
    try:
        sched = build_schedule(family, pp, m, chunks)
    except ScheduleConfigError:
        assume(False)
    fwd, bwd = costs[:sched.stages], costs[12:12 + sched.stages]  # (at most 4 x 3 stages)
    res = simulate(sched, fwd=fwd, bwd=bwd, p2p_latency=p2p)
    bound = pipeline_bound(sched, fwd, bwd, p2p)
    assert bound <= res.makespan
    assert bound >= max(res.busy) * (1 - 1e-6)


def _answer(search) -> tuple:
    return search.fastest, search.ties, search.best, search.ranked[:EXACT_TOP], explain(search).text


def _same_where_simulated(bounded, full) -> None:
    """A search that left candidates bounded agrees with one that simulated everything: the same answer, the same
    figures wherever both simulated, and every bounded candidate really is as slow as its bound says."""
    assert _answer(bounded) == _answer(full)
    fastest = full.candidates[full.fastest].step_time_s if full.fastest is not None else None
    for b, f in zip(bounded.candidates, full.candidates):
        if b.simulated or not b.fits:
            assert b.to_dict() == f.to_dict()
        else:
            assert b.bound_s <= f.step_time_s and f.step_time_s > fastest * (1 + full.tolerance)
            assert b.bounded.startswith("not simulated: its step takes at least") and b.simulate_args() == []


@settings(max_examples=8, deadline=None)
@given(gpus=st.sampled_from([4, 8]), batch=st.sampled_from([8, 16, 32]), budget=st.sampled_from([1.2, 2.0, 80.0]),
       tp=st.sampled_from([1, 2]), tolerance=st.sampled_from([0.0, 0.02, 0.1]), overlap=st.booleans(),
       p2p_us=st.sampled_from([0.0, 10.0, 2000.0]))
def test_bounding_changes_no_answer(gpus, batch, budget, tp, tolerance, overlap, p2p_us):
    hw = Hardware(gpus, budget * GB, p2p_latency_us=p2p_us)
    training = Training(tp=tp, overlap_grad_reduce=overlap, distributed_optimizer=overlap)
    kw = dict(global_batch=batch, tolerance=tolerance)
    _same_where_simulated(plan(BANK, hw, training, simulate_all=False, **kw),
                          plan(BANK, hw, training, simulate_all=True, **kw))


def test_a_bounded_search_says_what_it_left_out_and_reranks_like_planning_again():
    """On the bank's model with 32 microbatches most candidates cannot tie: they are bounded, and said to be; under
    a budget that drops the fastest, within() simulates what now could tie, as planning again does."""
    hw = Hardware(8, 80 * GB)
    wide = plan(BANK, hw, global_batch=32, simulate_all=False)
    full = plan(BANK, hw, global_batch=32)  # (below SIMULATE_ALL_OPS: everything simulated)
    assert not full.bounded and len(wide.bounded) > len(wide.ranked) > EXACT_TOP
    _same_where_simulated(wide, full)
    doc = wide.candidates[wide.bounded[0]].to_dict()
    assert doc["fits"] and not doc["simulated"] and doc["step_time_s"] is None and doc["step_time_bound_s"] > 0
    assert (f"fit ({len(wide.ranked)} simulated; {len(wide.bounded)} bounded, not simulated: a lower bound puts "
            "each more than 2 % over the fastest and past the 8th)") in describe_search(wide)
    fastest = wide.candidates[wide.fastest]
    budget = fastest.worst_memory_bytes * (1 - 1e-9)  # the fastest no longer fits
    narrow = wide.within(budget)
    again = plan(BANK, Hardware(8, budget), global_batch=32, simulate_all=False)
    assert [c.to_dict() for c in narrow.candidates] == [c.to_dict() for c in again.candidates]
    assert any(not w.simulated and n.simulated for w, n in zip(wide.candidates, narrow.candidates))
    _same_where_simulated(narrow, plan(BANK, Hardware(8, budget), global_batch=32))


GPT_145B = ModelSpec(vocab=51200, seq_len=2048, hidden=12288, heads=96, layers=80, micro_batch_size=1)


@pytest.mark.parametrize("model, gpus, batch", [(GPT_145B, 1536, 2304), (GPT_145B, 1536, 4608),
                                                ("llama-70b-ish", 4096, 4096)])
def test_the_cluster_sizes_of_issue_37_are_within_the_limit(model, gpus, batch):
    """Narayanan et al.'s 145.6B model on 1,536 GPUs (at twice the batch too) and the 70B preset on 4,096, all at
    tp = 8: the schedules they build are within MAX_PLAN_OPS, so they are planned, not refused
    (benchmarks/bench_plan.py times them); the 145.6B model at four times the batch is refused."""
    m = load_model_spec(model) if isinstance(model, str) else model
    ops = count_ops(m, gpus // 8, batch, list(FAMILIES))
    assert 1_000_000 < ops <= LIMITS["MAX_PLAN_OPS"] < count_ops(GPT_145B, 1536 // 8, 4 * 2304, list(FAMILIES))


def test_past_the_limit_a_plan_is_refused_before_it_starts_saying_what_to_change():
    with pytest.raises(PlanError, match=r"^the search \(10,581,600 ops in the schedules of all its candidates\) is "
                                        r"more than the limit of 6,000,000 ops \(MAX_PLAN_OPS\); try fewer "
                                        r"--schedules, a smaller --global-batch or a larger --micro-batch-size$"):
        plan(GPT_145B, Hardware(1536, 80 * GB), Training(tp=8), 4 * 2304)
