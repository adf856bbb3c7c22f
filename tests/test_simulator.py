"""The simulator is exact: the textbook formulas come out to the last digit (with Fractions, exactly)."""

from fractions import Fraction as Fr

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit.schedules import Op, Schedule, build_schedule, gpipe, interleaved, one_f_one_b, zb_h1
from pipeline_kit.sim import CostError, Costs, simulate

costs = st.fractions(min_value=Fr(1, 8), max_value=8, max_denominator=8)
SETTINGS = settings(max_examples=120, deadline=None)


@SETTINGS
@given(st.sampled_from([gpipe, one_f_one_b]), st.integers(1, 8), st.integers(1, 32), costs, costs)
def test_gpipe_and_1f1b_bubble_is_exact_for_any_fb_ratio(gen, pp, m, f, b):
    res = simulate(gen(pp, m), fwd=f, bwd=b)
    assert res.bubble_fraction == Fr(pp - 1, m + pp - 1)
    assert res.makespan == (m + pp - 1) * (f + b)
    assert res.ideal_time == m * (f + b)
    assert res.bubble_over_ideal == Fr(pp - 1, m)


@SETTINGS
@given(st.integers(2, 8), st.integers(1, 4), st.integers(2, 4), costs, costs)
def test_interleaved_bubble_is_exact_when_m_is_a_multiple_of_pp(pp, k, v, f, b):
    m = k * pp
    res = simulate(interleaved(pp, m, v), fwd=f, bwd=b)
    assert res.bubble_fraction == Fr(pp - 1, v * m + pp - 1)


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 32))
def test_peak_live_activations(pp, m):
    assert simulate(one_f_one_b(pp, m)).peak_activations == [min(pp - r, m) for r in range(pp)]
    assert simulate(gpipe(pp, m)).peak_activations == [m] * pp


@SETTINGS
@given(st.integers(2, 8), st.integers(1, 32), costs, costs)
def test_zb_h1_bubble_below_1f1b_with_no_more_peak_memory(pp, m, f, b):
    zb, base = simulate(zb_h1(pp, m), fwd=f, bwd=b), simulate(one_f_one_b(pp, m), fwd=f, bwd=b)
    assert zb.bubble_fraction < base.bubble_fraction
    assert max(zb.peak_activations) <= max(base.peak_activations)


def test_zb_h1_is_a_third_of_1f1b_when_f_i_w_are_equal():
    zb, base = simulate(zb_h1(8, 16), fwd=1, bwd=2), simulate(one_f_one_b(8, 16), fwd=1, bwd=2)
    idle_zb, idle_base = zb.makespan - zb.ideal_time, base.makespan - base.ideal_time
    assert (idle_zb, idle_base) == (7, 21)


def test_bank_case_pp8_m16():
    res = simulate(one_f_one_b(8, 16), fwd=Fr(1), bwd=Fr(2))
    assert res.bubble_fraction == Fr(7, 23)
    assert round(float(res.bubble_fraction), 3) == 0.304


def test_forward_only_bubble_and_memory():
    res = simulate(one_f_one_b(4, 8, forward_only=True), fwd=1)
    assert res.makespan == 8 + 3
    assert res.peak_activations == [0] * 4


def test_timeline_of_1f1b_pp2_m2():
    res = simulate(one_f_one_b(2, 2), fwd=1, bwd=2)
    got = [(e.rank, e.op.text(), e.start, e.end) for e in sorted(res.events, key=lambda e: (e.rank, e.start))]
    assert got == [(0, "F0", 0, 1), (0, "F1", 1, 2), (0, "B0", 4, 6), (0, "B1", 7, 9),
                   (1, "F0", 1, 2), (1, "B0", 2, 4), (1, "F1", 4, 5), (1, "B1", 5, 7)]
    assert [(t.src, t.dst, t.microbatch, t.direction) for t in sorted(res.transfers, key=lambda t: t.start)] == \
        [(0, 1, 0, "forward"), (0, 1, 1, "forward"), (1, 0, 0, "backward"), (1, 0, 1, "backward")]


def test_p2p_latency_costs_gpipe_one_fill_and_one_drain():
    base = simulate(gpipe(4, 8), fwd=1, bwd=2)
    slow = simulate(gpipe(4, 8), fwd=1, bwd=2, p2p_latency=Fr(1, 2))
    # fill and drain each cross pp - 1 boundaries: 2 (pp - 1) hops on the critical path
    assert slow.makespan - base.makespan == 2 * 3 * Fr(1, 2)
    assert len(slow.transfers) == 2 * 3 * 8


def test_p2p_latency_hurts_1f1b_more_than_gpipe():
    # 1F1B's steady state pairs each forward with a backward that needs a round trip to the next
    # rank; with no slack in the warmup, that round trip's latency lands on the critical path
    # again and again (regression value from the simulator; GPipe pays only fill + drain).
    base = simulate(one_f_one_b(4, 8), fwd=1, bwd=2)
    slow = simulate(one_f_one_b(4, 8), fwd=1, bwd=2, p2p_latency=Fr(1, 2))
    assert slow.makespan - base.makespan == 16 * Fr(1, 2)  # vs 2 (pp - 1) = 6 hops for GPipe
    assert slow.makespan > simulate(gpipe(4, 8), fwd=1, bwd=2, p2p_latency=Fr(1, 2)).makespan


def test_bytes_over_bandwidth():
    res = simulate(one_f_one_b(2, 1), fwd=1, bwd=1, p2p_bytes=100, bandwidth=50)
    assert res.makespan == 1 + 2 + 1 + 1 + 2 + 1  # F0, send, F0, B0, send, B0
    assert {t.nbytes for t in res.transfers} == {100}


def test_per_stage_costs_slowest_stage_sets_the_beat():
    res = simulate(one_f_one_b(4, 16), fwd=[1, 1, 2, 1], bwd=[2, 2, 4, 2])
    # steady state runs at the slow stage's pace: 16 microbatches x 6 on rank 2
    assert res.busy == [48, 48, 96, 48]
    assert res.ideal_time == 96
    assert res.makespan > 96


def test_chunk_cost_convention():
    # a rank's share costs the same whatever v: each of v chunks takes 1/v
    for v in (2, 4):
        res = simulate(interleaved(4, 8, v), fwd=1, bwd=2)
        assert res.busy == [24] * 4
    # a per-virtual-stage list is taken as is
    res = simulate(interleaved(2, 2, 2), fwd=[1, 1, 3, 3], bwd=[1, 1, 1, 1])
    assert res.busy == [2 * (1 + 3) + 2 * 2] * 2


def test_activation_bytes_follow_chunks():
    res = simulate(interleaved(4, 8, 2), activation_bytes=100)
    assert res.peak_activation_bytes == [p * 50 for p in res.peak_activations]


def test_split_backward_costs_default_to_half():
    res = simulate(zb_h1(1, 1), fwd=1, bwd=4)
    assert [(e.op.kind, e.end - e.start) for e in res.events] == [("F", 1), ("I", 2), ("W", 2)]
    res = simulate(zb_h1(1, 1), fwd=1, bwd=4, wgrad=1)
    assert [(e.op.kind, e.end - e.start) for e in res.events] == [("F", 1), ("I", 3), ("W", 1)]


@pytest.mark.parametrize("kwargs,message", [
    ({"fwd": [1, 2, 3]}, r"fwd has 3 values; expected 1 or 4 \(one per rank\)"),
    ({"bwd": -1}, r"bwd values must be non-negative numbers, got -1"),
    ({"fwd": "x"}, r"fwd must be a number or a list of numbers, got .x."),
    ({"wgrad": 3}, r"wgrad on stage 0 is 3, larger than the whole backward bwd=2"),
    ({"p2p_bytes": 10}, r"p2p_bytes needs a bandwidth"),
    ({"p2p_bytes": [1, 2]}, r"p2p_bytes has 2 values; expected 1 or 3 \(one per boundary\)"),
    ({"bandwidth": 0}, r"bandwidth must be a positive number"),
    ({"p2p_latency": -1}, r"p2p_latency must be a non-negative number"),
])
def test_cost_errors_name_the_argument(kwargs, message):
    with pytest.raises(CostError, match=message):
        simulate(one_f_one_b(4, 4), Costs(**kwargs))


def test_to_dict_contract():
    d = simulate(one_f_one_b(2, 2)).to_dict()
    assert {"makespan", "bubble_fraction", "ideal_time", "ranks", "timeline"} <= set(d)
    assert set(d["ranks"][0]) >= {"busy", "idle", "peak_activations"}
    assert d["timeline"][0] == {"rank": 0, "op": "F0", "kind": "F", "microbatch": 0, "chunk": 0, "stage": 0,
                                "start": 0, "end": 1.0}


def test_hand_made_schedule_simulates():
    s = Schedule.from_text("r0: F0 F1 B0 B1\nr1: F0 B0 F1 B1\n")
    assert simulate(s, fwd=1, bwd=1).makespan == 6
    assert isinstance(s.ranks[0][0], Op)


def test_build_then_simulate_every_family():
    for name, v in (("gpipe", None), ("1f1b", None), ("interleaved", 2), ("zb-h1", None)):
        assert simulate(build_schedule(name, 4, 8, v)).makespan > 0


def test_v_placement_simulates_exactly_with_no_transfer_at_the_turn():
    text = ("# schedule=v pp=2 microbatches=2 chunks=2 placement=v\n"
            "r0: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0\n"
            "r1: F0c0 F0c1 F1c0 F1c1 B0c1 B0c0 B1c1 B1c0\n")
    res = simulate(Schedule.from_text(text), fwd=1, bwd=2)  # each of the 2 chunks: F 0.5, B 1
    starts = {(e.rank, e.op.text(True)): (e.stage, e.start, e.end) for e in res.events}
    assert starts[(1, "F0c1")] == (2, 1.0, 1.5)  # stage 2 follows stage 1 on the same rank, no wait
    assert starts[(0, "F0c1")] == (3, 1.5, 2.0)  # the last stage is back on rank 0
    assert starts[(1, "B0c0")] == (1, 4.0, 5.0)
    assert starts[(0, "B1c0")] == (0, 7.0, 8.0)
    assert res.makespan == 8.0 and res.busy == [6.0, 6.0] and res.bubble_fraction == 0.25
    assert res.peak_activations == [3, 4]
    crossing = sorted((t.src, t.dst, t.direction, t.boundary) for t in res.transfers)
    assert crossing == sorted([(0, 1, "forward", 0), (1, 0, "forward", 2), (0, 1, "backward", 2),
                               (1, 0, "backward", 0)] * 2)


def test_per_rank_costs_follow_the_v_placement():
    # rank 0 holds stages 0 and 3, rank 1 stages 1 and 2; each chunk takes half its rank's share
    res = Costs(fwd=[1, 3], bwd=[2, 6]).resolve(2, 2, "v")
    assert res.fwd == [0.5, 1.5, 1.5, 0.5] and res.bwd == [1.0, 3.0, 3.0, 1.0]
