"""Generators: the per-rank orders are exactly Megatron-LM's (and torch.distributed.pipelining's)."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit.schedules import (
    SCHEDULES,
    ScheduleConfigError,
    build_schedule,
    gpipe,
    interleaved,
    interleaved_table,
    interleaved_warmup,
    no_pipelining,
    one_f_one_b,
    select_schedule,
    validate,
    zb_h1,
)


def rows(sched):
    return [" ".join(sched.op_text(op) for op in ops) for ops in sched.ranks]


def test_1f1b_pp4_m8_exact_orders():
    assert rows(one_f_one_b(4, 8)) == [
        "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
        "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
        "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
    ]


def test_gpipe_all_forwards_then_all_backwards():
    assert rows(gpipe(2, 3)) == ["F0 F1 F2 B0 B1 B2"] * 2


def test_1f1b_fewer_microbatches_than_stages_warmup_is_capped():
    # warmup = min(pp - r - 1, M): rank 0 of pp=4 with M=2 runs both forwards first
    assert rows(one_f_one_b(4, 2)) == ["F0 F1 B0 B1"] * 3 + ["F0 B0 F1 B1"]


def test_interleaved_pp2_m4_v2_exact_orders():
    assert rows(interleaved(2, 4, 2)) == [
        "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0",
        "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0",
    ]


def test_interleaved_table_and_warmup_follow_megatron():
    # Megatron's own docstring example: PP2, group 3, M5, VP2
    assert interleaved_table(5, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1),
                                          (4, 1)]
    assert [interleaved_warmup(4, r, 8, 2, 4) for r in range(4)] == [10, 8, 6, 4]
    assert interleaved_warmup(4, 0, 4, 2, 4) == 8  # capped at M * v: all forwards first


@pytest.mark.parametrize("pp,m,v", [(4, 8, 2), (4, 16, 3), (2, 6, 4), (8, 16, 2)])
def test_interleaved_structure(pp, m, v):
    sched = interleaved(pp, m, v)
    for r, ops in enumerate(sched.ranks):
        warmup = interleaved_warmup(pp, r, m, v, pp)
        assert all(op.kind == "F" for op in ops[:warmup])
        first_b = next(i for i, op in enumerate(ops) if op.kind == "B")
        assert first_b == warmup + 1  # steady state starts with one forward, then the first backward
        assert ops[first_b].chunk == v - 1  # backwards start on the last chunk
        fwd = [op for op in ops if op.kind == "F"]
        assert [(op.microbatch, op.chunk) for op in fwd] == interleaved_table(m, v, pp)
        bwd = [op for op in ops if op.kind == "B"]
        assert [(op.microbatch, v - 1 - op.chunk) for op in bwd] == interleaved_table(m, v, pp)


@pytest.mark.parametrize("args,message", [
    ((4, 6, 2), r"last group would hold 2 < pp=4 microbatches.*use a multiple of 4 such as 4 or 8"),
    ((4, 3, 2), r"group size in \[pp=4, microbatches=3\].*microbatches must be at least pp"),
    ((1, 4, 2), r"interleaved needs pp >= 2"),
    ((4, 8, 1), r"chunks .* >= 2"),
])
def test_interleaved_refuses_what_megatron_refuses(args, message):
    with pytest.raises(ScheduleConfigError, match=message):
        interleaved(*args)


def test_interleaved_larger_group_allows_non_multiples():
    # group 6 with pp 4: M = 10 leaves a last group of 4 >= pp, which Megatron accepts
    sched = validate(interleaved(4, 10, 2, group=6))
    assert sched.num_ops == 4 * 10 * 2 * 2
    with pytest.raises(ScheduleConfigError, match="group size in"):
        interleaved(4, 8, 2, group=3)


def test_zb_h1_follows_the_papers_triples():
    # steady-state triple on rank r: (F x, I x-(pp-1-r), W x-(pp-1))
    assert rows(zb_h1(4, 8))[0] == "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7"
    assert rows(zb_h1(4, 8))[3] == "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7"


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_forward_only_variants(name):
    sched = build_schedule(name, 4, 8, forward_only=True)
    assert sched.forward_only and sched.name == f"{name}-forward-only"
    assert sched.num_ops == 4 * 8 * sched.chunks
    validate(sched)
    full = build_schedule(name, 4, 8)
    assert sched.ranks == [[op for op in ops if op.kind == "F"] for ops in full.ranks]
    assert sched.placement == full.placement


def test_build_schedule_errors():
    with pytest.raises(ScheduleConfigError, match="unknown schedule 'pipedream'; choose one of gpipe, 1f1b"):
        build_schedule("pipedream", 2, 2)
    with pytest.raises(ScheduleConfigError, match="--chunks 2 only applies to interleaved, looped-bfs, interleaved-zb, "
                                                  "zbv, dualpipev; 1f1b has one chunk per rank"):
        build_schedule("1f1b", 2, 2, chunks=2)
    with pytest.raises(ScheduleConfigError, match="group size only applies to the interleaved schedule, not zbv"):
        build_schedule("zbv", 2, 4, group=2)
    with pytest.raises(ScheduleConfigError, match="microbatches must be a positive integer"):
        build_schedule("1f1b", 2, 0)


def test_select_schedule_mirrors_get_forward_backward_func():
    f = select_schedule(1)
    assert (f.name, f.uses_p2p, f.loss_rank) == ("no-pipelining", False, 0)
    assert [op.text() for op in f(3).ranks[0]] == ["F0", "B0", "F1", "B1", "F2", "B2"]
    assert select_schedule(1, vpp=2).name == "no-pipelining"
    f = select_schedule(4)
    assert (f.name, f.uses_p2p, f.loss_rank) == ("1f1b", True, 3)
    assert f(8).ranks == one_f_one_b(4, 8).ranks
    f = select_schedule(4, vpp=2)
    assert (f.name, f.chunks) == ("interleaved", 2)
    assert f(8).ranks == interleaved(4, 8, 2).ranks
    assert select_schedule(4, forward_only=True)(8).forward_only
    assert no_pipelining(2, forward_only=True).ranks == [[op for op in no_pipelining(2).ranks[0] if op.kind == "F"]]
    with pytest.raises(ScheduleConfigError, match="pp must be a positive integer"):
        select_schedule(0)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["gpipe", "1f1b", "zb-h1"]), st.integers(1, 8), st.integers(1, 32), st.booleans())
def test_every_generated_schedule_validates(name, pp, m, fwd_only):
    validate(build_schedule(name, pp, m, forward_only=fwd_only))


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 8), st.integers(1, 4), st.integers(2, 4), st.integers(0, 3), st.booleans())
def test_every_generated_interleaved_schedule_validates(pp, k, v, extra, fwd_only):
    group = pp + extra
    m = k * group
    validate(interleaved(pp, m, v, fwd_only, group=group))


# -- the families PyTorch ships beyond interleaved 1F1B (orders cross-checked against torch in
#    test_torch_pipelining_orders; here a few pinned by hand so a reader sees them) ----------------------------

def test_looped_bfs_runs_each_chunk_breadth_first_and_backwards_last_in_first_out():
    assert rows(build_schedule("looped-bfs", 2, 3)) == [
        "F0c0 F1c0 F2c0 F0c1 F1c1 F2c1 B2c1 B1c1 B0c1 B2c0 B1c0 B0c0"] * 2


def test_interleaved_zb_pp2_m4_exact_orders():
    # warmup (v-1)*round + pp-1-r forwards; then F, I pairs with each W r input-grads late
    assert rows(build_schedule("interleaved-zb", 2, 4)) == [
        "F0c0 F1c0 F0c1 F1c1 I0c1 W0c1 F2c0 I1c1 W1c1 F3c0 I0c0 W0c0 F2c1 I1c0 W1c0 F3c1 I2c1 W2c1 I3c1 W3c1 I2c0 W2c0 "
        "I3c0 W3c0",
        "F0c0 F1c0 F0c1 I0c1 F1c1 I1c1 W0c1 F2c0 I0c0 W1c1 F3c0 I1c0 W0c0 F2c1 I2c1 W1c0 F3c1 I3c1 W2c1 I2c0 W3c1 I3c0 "
        "W2c0 W3c0",
    ]


def test_zbv_pp2_m4_exact_orders_and_v_placement():
    sched = build_schedule("zbv", 2, 4)
    assert sched.placement == "v" and sched.stages_of(0) == [0, 3] and sched.stages_of(1) == [1, 2]
    assert rows(sched) == [
        "F0c0 F1c0 F2c0 F0c1 I0c1 W0c1 F1c1 I1c1 W1c1 F3c0 I0c0 W0c0 F2c1 I2c1 W2c1 I1c0 W1c0 F3c1 I3c1 W3c1 I2c0 W2c0 "
        "I3c0 W3c0",
        "F0c0 F0c1 F1c0 F1c1 I0c1 W0c1 F2c0 I0c0 W0c0 F2c1 I1c1 W1c1 F3c0 I1c0 W1c0 F3c1 I2c1 W2c1 I2c0 I3c1 I3c0 W2c0 "
        "W3c1 W3c0",
    ]


def test_dualpipev_pp2_m4_pairs_a_forward_with_the_other_chunks_backward():
    assert rows(build_schedule("dualpipev", 2, 4)) == [
        "F0c0 F1c0 F2c0 F0c1 I0c1 W0c1 F1c1 F3c0 B1c1 F2c1 B0c0 B2c1 F3c1 B1c0 B3c1 I2c0 W2c0 I3c0 W3c0",
        "F0c0 F0c1 F1c0 F1c1 F2c0 B0c1 F2c1 B0c0 F3c0 B1c1 F3c1 B1c0 B2c1 B2c0 I3c1 I3c0 W3c1 W3c0",
    ]


@pytest.mark.parametrize("args,message", [
    (("zbv", 4, 8, 3), r"^zbv needs --chunks 2, got 3: \"ZBV requires exactly 2 stages per rank, but got 3\.\""),
    (("dualpipev", 4, 8, 1), r"^dualpipev needs --chunks 2, got 1: \"ZBV requires exactly 2 stages per rank"),
    (("dualpipev", 4, 7, 2), r"^dualpipev needs microbatches >= 2\*pp = 8, got 7: \"DualPipeV requires at least as "
                             r"many microbatches as stages, but got 7 microbatches and 8 stages\.\"$"),
    (("interleaved-zb", 4, 9, 2), r"^interleaved-zb refuses microbatches=9 with pp=4: \"Zero bubble requires the "
                                  r"number of microbatches to be a multiple of the number of rounds \(2\), "
                                  r"but got 9\.\""),
])
def test_new_families_refuse_what_pytorch_refuses(args, message):
    with pytest.raises(ScheduleConfigError, match=message):
        build_schedule(*args)


def test_interleaved_zb_accepts_pytorchs_flexible_rounds():
    # M = 10 on pp = 4: two rounds of 5 (Megatron's interleaved refuses it, PyTorch does not)
    assert validate(build_schedule("interleaved-zb", 4, 10)).num_ops == 4 * 10 * 2 * 3
    assert validate(build_schedule("zbv", 4, 3)).num_ops == 4 * 3 * 2 * 3  # ZB-V drops the planned microbatches >= M


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["looped-bfs", "interleaved-zb", "zbv", "dualpipev"]), st.integers(1, 8), st.integers(1, 32),
       st.integers(1, 4), st.booleans())
def test_every_accepted_multi_stage_schedule_validates(name, pp, m, v, fwd_only):
    """Accepted: every op once, no deadlock (validate).  Refused: one line quoting PyTorch's reason."""
    try:
        sched = build_schedule(name, pp, m, v, forward_only=fwd_only)
    except ScheduleConfigError as exc:
        assert re.fullmatch(r'[^\n]*: "[^"\n]+\."[^\n]*', str(exc)), str(exc)
        return
    validate(sched)
    assert sched.placement == ("v" if name in ("zbv", "dualpipev") else "looped")
    assert sched.splits_backward == (not fwd_only and name != "looped-bfs")
