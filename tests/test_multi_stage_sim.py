"""Validator and simulator on looped BFS, interleaved zero bubble, ZB-V and DualPipe-V: exact times, bubbles, memory.

Costs are chosen so every chunk op takes a whole number of time units (fwd = v, bwd = 2 v: F = 1, B = 2 and,
split, I = W = 1 per chunk), so the expected numbers below are exact.  The first three tests were worked out by
hand from the orders (see the comments); the property tests state what each family promises for any size.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit.schedules import SCHEDULES, Op, Schedule, ScheduleError, build_schedule, validate
from pipeline_kit.sim import simulate
from pipeline_kit.sim.compare import cheat_sheet


def times(res, rank, text):
    """(start, end) of the op written ``text`` (e.g. ``I0c1``) on ``rank``."""
    op = Op.parse(text)
    return next((e.start, e.end) for e in res.events if e.rank == rank and e.op == op)


def test_zbv_pp2_m4_by_hand():
    # rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.  Rank 1's I0c1 (stage 2) waits for rank 0's I0c1
    # (stage 3, the loss stage) which ends at 5; the last W on rank 1 ends at 25, one unit after the ideal 24.
    res = simulate(build_schedule("zbv", 2, 4), fwd=2, bwd=4)
    assert res.makespan == 25 and res.busy == [24, 24]
    assert res.bubble_fraction == 2 / 50 and res.bubble_over_ideal == 1 / 24
    assert times(res, 0, "I0c1") == (4, 5) and times(res, 1, "I0c1") == (5, 6)
    assert times(res, 0, "I0c0") == (10, 11) and times(res, 1, "W3c0") == (24, 25)
    assert res.peak_activations == [4, 4]
    assert not [t for t in res.transfers if {t.boundary} == {1}]  # stage 1 -> 2 is on rank 1: nothing is sent


def test_dualpipev_pp2_m4_by_hand():
    # the pairs F c0 + B c1 run one after the other: rank 0's B1c1 (stage 3) at 8-10 right after F3c0 at 7-8
    res = simulate(build_schedule("dualpipev", 2, 4), fwd=2, bwd=4)
    assert res.makespan == 25 and res.busy == [24, 24]
    assert times(res, 0, "F3c0") == (7, 8) and times(res, 0, "B1c1") == (8, 10)
    assert times(res, 1, "B2c0") == (19, 21) and times(res, 0, "W3c0") == (24, 25)
    assert res.peak_activations == [5, 5]


def test_looped_bfs_pp2_m2_by_hand():
    # forwards fill both chunks (4 live per rank), the last stage turns at 5, backwards run LIFO down to 15
    res = simulate(build_schedule("looped-bfs", 2, 2), fwd=2, bwd=4)
    assert res.makespan == 15 and res.busy == [12, 12]
    assert res.bubble_fraction == 6 / 30 and res.bubble_over_ideal == 0.25
    assert times(res, 1, "B1c1") == (5, 7) and times(res, 0, "B0c0") == (13, 15)
    assert res.peak_activations == [4, 4]


def test_split_backward_keeps_activations_live_until_w():
    # the same ZB-V order with every W moved to the end of its rank: nothing is freed by I, so every
    # microbatch-chunk is live at once (M * 2 = 8), where the real order never holds more than 4
    sched = build_schedule("zbv", 2, 4)
    late_w = [[op for op in ops if op.kind != "W"] + [op for op in ops if op.kind == "W"] for ops in sched.ranks]
    res = simulate(Schedule("late-w", 2, 4, 2, late_w, placement="v"), fwd=2, bwd=4)
    assert res.peak_activations == [8, 8]
    assert simulate(sched, fwd=2, bwd=4).peak_activations == [4, 4]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["zbv", "dualpipev"]), st.integers(1, 8), st.integers(0, 16))
def test_v_schedules_bubble_is_one_forward_ramp(name, pp, extra):
    """F = I = W and M >= 2 pp: the only idle time is the first forward's ramp, (pp - 1) F per rank."""
    m = 2 * pp + extra
    one_f_one_b = simulate(build_schedule("1f1b", pp, m), fwd=2, bwd=4)
    res = simulate(build_schedule(name, pp, m), fwd=2, bwd=4)
    assert res.busy == [6 * m] * pp
    assert res.makespan == 6 * m + (pp - 1)
    assert res.bubble_over_ideal == (pp - 1) / (6 * m)
    if name == "zbv":  # 1F1B's worst-rank memory: pp microbatches of a rank's share (2 pp chunk-activations)
        assert max(res.peak_activations) == 2 * max(one_f_one_b.peak_activations) == 2 * pp
    else:  # DualPipe-V holds one chunk-activation more
        assert max(res.peak_activations) == 2 * pp + 1


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 12))
def test_zbv_never_holds_more_than_1f1b(pp, m):
    one_f_one_b = simulate(build_schedule("1f1b", pp, m), fwd=2, bwd=4)
    res = simulate(build_schedule("zbv", pp, m), fwd=2, bwd=4)
    assert max(res.peak_activations) == 2 * max(one_f_one_b.peak_activations)
    assert res.makespan <= one_f_one_b.makespan


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(1, 4), st.integers(0, 3))
def test_interleaved_zb_and_looped_bfs_bubbles(pp, v, rounds, extra):
    """Interleaved ZB idles (pp - 1) F per rank; looped BFS (pp - 1)(F + B), like interleaved 1F1B, at M v memory."""
    m = rounds * pp + (extra % pp if rounds == 1 else 0)  # sizes PyTorch accepts: one round (pp <= M < 2pp), or pp | M
    zb = simulate(build_schedule("interleaved-zb", pp, m, v), fwd=v, bwd=2 * v)
    assert zb.busy == [3 * m * v] * pp and zb.makespan == 3 * m * v + (pp - 1)
    bfs = simulate(build_schedule("looped-bfs", pp, m, v), fwd=v, bwd=2 * v)
    assert bfs.makespan == 3 * m * v + 3 * (pp - 1)
    assert bfs.peak_activations == [m * v] * pp


def test_validator_names_the_op_in_v_and_mixed_backward_schedules():
    sched = build_schedule("dualpipev", 2, 4)  # full B and split I + W in one schedule
    ops = sched.ranks[0]
    i = ops.index(Op("I", 2, 0))
    ops[i], ops[i + 1] = ops[i + 1], ops[i]
    with pytest.raises(ScheduleError, match=r"^rank 0 runs W2c0 \(op 16\) before I2c0 \(op 17\), but W2c0 waits for "
                                            r"I2c0: a weight-grad \(W\) needs its input-grad \(I\) first$"):
        validate(sched)
    sched = build_schedule("zbv", 2, 4)  # the turn of the V: stage 2 (rank 1, chunk 1) needs stage 1 (chunk 0)
    sched.ranks[1].insert(0, sched.ranks[1].pop(sched.ranks[1].index(Op("F", 0, 1))))
    with pytest.raises(ScheduleError, match=r"^rank 1 runs F0c1 \(op 1\) before F0c0 \(op 2\), but F0c1 waits "
                                            r"for F0c0"):
        validate(sched)
    sched = build_schedule("zbv", 2, 4)
    sched.ranks[0].remove(Op("W", 1, 1))
    with pytest.raises(ScheduleError, match=r"^rank 0 never runs W1c1 \(microbatch 1, stage 3\)"):
        validate(sched)


def test_simulation_json_says_v_placement_and_each_ops_stage():
    out = simulate(build_schedule("zbv", 2, 4), fwd=2, bwd=4).to_dict()
    assert out["placement"] == "v"
    placed = {(e["rank"], e["chunk"], e["stage"]) for e in out["timeline"]}
    assert placed == {(0, 0, 0), (0, 1, 3), (1, 0, 1), (1, 1, 2)}
    assert "placement" not in simulate(build_schedule("interleaved", 2, 4), fwd=2, bwd=4).to_dict()


def test_cheat_sheet_figures():
    """The book's table: exact bubbles (F = I = W), worst-rank memory in rank shares, messages between ranks."""
    rows = {row.name: row for row in cheat_sheet()}
    assert list(rows) == list(SCHEDULES)
    for pp, m in ((4, 8), (8, 16)):
        assert rows["1f1b"].bubble[pp, m] == pytest.approx((pp - 1) / (m + pp - 1))
        assert rows["zbv"].bubble[pp, m] == pytest.approx((pp - 1) / (6 * m + pp - 1))  # one forward ramp
        assert rows["1f1b"].peak_activations[pp, m] == rows["zbv"].peak_activations[pp, m] == pp
        assert rows["dualpipev"].peak_activations[pp, m] == pp + 0.5
        assert rows["gpipe"].peak_activations[pp, m] == rows["looped-bfs"].peak_activations[pp, m] == m
        for name, row in rows.items():  # 2 M messages per boundary between ranks; the V's turn is not one
            boundaries = {"looped": pp * row.chunks - 1, "v": 2 * pp - 2}[row.placement]
            assert row.p2p_messages[pp, m] == 2 * m * boundaries, name
    assert (rows["zbv"].placement, rows["zbv"].torch_class) == ("v", "ScheduleZBVZeroBubble")
