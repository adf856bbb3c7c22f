"""The validator accepts every generated schedule and rejects each kind of broken one with a precise message."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit.schedules import Op, Schedule, ScheduleError, build_schedule, interleaved, validate
from pipeline_kit.sim import simulate


def sched(text, **kw):
    return Schedule.from_text(text, **kw)


def error_of(text):
    with pytest.raises(ScheduleError) as info:
        validate(sched(text))
    return info.value


def test_accepts_a_hand_written_1f1b():
    validate(sched("r0: F0 F1 B0 B1\nr1: F0 B0 F1 B1\n"))


def test_duplicate_op():
    err = error_of("r0: F0 F1 F1 B0 B1\nr1: F0 B0 F1 B1\n")
    assert err.kind == "duplicate" and err.rank == 0 and err.op == Op("F", 1)
    assert str(err) == "rank 0: F1 appears twice (op 2 and op 3); each op must run exactly once"


def test_missing_op():
    err = error_of("r0: F0 F1 B0 B1\nr1: F0 B0 F1\n")
    assert err.kind == "missing" and (err.rank, err.op) == (1, Op("B", 1))
    assert str(err) == "rank 1 never runs B1 (microbatch 1, stage 1); every op must run exactly once"


def test_out_of_range_microbatch_and_chunk():
    s = Schedule("x", 1, 1, 1, [[Op("F", 0), Op("B", 0), Op("F", 1)]])
    with pytest.raises(ScheduleError, match=r"rank 0, op 3 \(F1\): microbatch 1 is out of range; this schedule has "
                                            r"microbatches 0..0"):
        validate(s)
    s = Schedule("x", 1, 1, 1, [[Op("F", 0, 1)]])
    with pytest.raises(ScheduleError, match=r"chunk 1 is out of range"):
        validate(s)


def test_backward_before_own_forward_on_same_rank():
    err = error_of("r0: F0 B0 F1 B1\nr1: B0 F0 F1 B1\n")
    assert err.kind == "order" and (err.rank, err.op, err.waits_for) == (1, Op("B", 0), Op("F", 0))
    assert str(err) == ("rank 1 runs B0 (op 1) before F0 (op 2), but B0 waits for F0: a backward needs its own "
                        "forward's saved activations")


def test_forward_chain_order_on_one_rank_with_chunks():
    # pp = 1 with two chunks: F0c1 (stage 1) needs F0c0 (stage 0) on the same rank
    err = error_of("# schedule=x pp=1 microbatches=1 chunks=2\nr0: F0c1 F0c0 B0c1 B0c0\n")
    assert err.kind == "order"
    assert "F0c1 waits for F0c0: a forward needs the activation of the previous stage" in str(err)


def test_weight_grad_before_input_grad():
    err = error_of("r0: F0 W0 I0\n")
    assert (err.kind, err.op, err.waits_for) == ("order", Op("W", 0), Op("I", 0))
    assert "a weight-grad (W) needs its input-grad (I) first" in str(err)


def test_mixing_full_and_split_backward_for_one_op():
    with pytest.raises(ScheduleError, match=r"microbatch 0 on stage 0 has both a full backward B0 and I0"):
        validate(sched("r0: F0 B0 I0 W0\n"))
    with pytest.raises(ScheduleError, match=r"rank 0 never runs I0"):
        validate(sched("r0: F0 W0\n"))


def test_circular_wait_names_every_blocked_rank():
    # rank 0 waits for B0 from rank 1 before sending F1; rank 1 waits for F1 before running B0
    err = error_of("r0: F0 B0 F1 B1\nr1: F0 F1 B0 B1\n")
    assert err.kind == "deadlock"
    assert err.blocked == {0: (Op("B", 0), Op("B", 0)), 1: (Op("F", 1), Op("F", 1))}
    assert str(err) == ("deadlock, circular wait rank 0 -> rank 1 -> rank 0: rank 0 is blocked at B0 (op 2) "
                        "waiting for B0 from rank 1; rank 1 is blocked at F1 (op 2) waiting for F1 from rank 0")


def test_cycle_between_two_ranks_still_names_the_rank_waiting_on_it():
    # ranks 1 and 2 wait on each other; rank 0 is stuck behind them (waiting for rank 1's B0)
    err = error_of("r0: F0 F1 F2 B0 B1 B2\nr1: F0 B0 F1 F2 B1 B2\nr2: F0 F1 B0 F2 B1 B2\n")
    assert err.kind == "deadlock" and set(err.blocked) == {0, 1, 2}
    assert str(err).startswith("deadlock, circular wait rank 1 -> rank 2 -> rank 1: rank 0 is blocked at B0 (op 4) "
                               "waiting for B0 from rank 1; rank 1 is blocked at B0 (op 2) waiting for B0 from rank 2; "
                               "rank 2 is blocked at F1 (op 2) waiting for F1 from rank 1")


def test_split_backward_gradient_comes_from_input_grad():
    err = error_of("r0: F0 I0 W0\nr1: W0 F0 I0\n")
    assert err.kind == "order" and err.op == Op("W", 0)


@pytest.mark.parametrize("name,chunks", [("gpipe", None), ("1f1b", None), ("interleaved", 2), ("interleaved", 4),
                                         ("zb-h1", None)])
def test_validate_returns_schedule_for_chaining(name, chunks):
    s = build_schedule(name, 4, 8, chunks)
    assert validate(s) is s


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["gpipe", "1f1b", "zb-h1", "interleaved"]), st.integers(2, 5), st.integers(1, 3),
       st.data())
def test_random_swaps_are_either_valid_or_a_schedule_error(name, pp, k, data):
    """Property: perturbing an order never crashes the validator, and validity agrees with the simulator."""
    s = build_schedule(name, pp, k * pp, 2 if name == "interleaved" else None)
    r = data.draw(st.integers(0, pp - 1))
    ops = s.ranks[r]
    i = data.draw(st.integers(0, len(ops) - 1))
    j = data.draw(st.integers(0, len(ops) - 1))
    ops[i], ops[j] = ops[j], ops[i]
    try:
        validate(s)
        valid = True
    except ScheduleError as err:
        valid = False
        assert err.rank is not None and err.op is not None and str(err)
    try:
        simulate(s)
        simulated = True
    except ScheduleError:
        simulated = False
    assert valid == simulated


def test_interleaved_pp2_both_directions_join_the_same_two_ranks():
    validate(interleaved(2, 4, 2))


# A V-placed pipeline on 2 ranks: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
V_PP2 = ("# schedule=v pp=2 microbatches=2 chunks=2 placement=v\n"
         "r0: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0\n"
         "r1: F0c0 F0c1 F1c0 F1c1 B0c1 B0c0 B1c1 B1c0\n")


def test_v_placement_follows_the_stages_down_and_back_up():
    validate(sched(V_PP2))
    # the same op lists under the looped placement (rank 1 would hold stage 3) cannot run
    with pytest.raises(ScheduleError):
        validate(sched(V_PP2.replace(" placement=v", "")))


def test_v_placement_errors_name_the_op_on_the_same_rank():
    # stage 2 (rank 1's chunk 1) needs stage 1's activation, which rank 1 itself makes later
    err = error_of(V_PP2.replace("r1: F0c0 F0c1", "r1: F0c1 F0c0"))
    assert err.kind == "order" and err.rank == 1 and err.op == Op("F", 0, 1) and err.waits_for == Op("F", 0, 0)
    assert str(err) == ("rank 1 runs F0c1 (op 1) before F0c0 (op 2), but F0c1 waits for F0c0: a forward needs the "
                        "activation of the previous stage")
