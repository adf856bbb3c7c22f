"""Lab 9 (ZB-V and the V placement): typical wrong answers lose exactly their points, with feedback naming the
mistake; the checks' expected values are the kit's (placement rule, message plan, simulator, refusals)."""

import random
from fractions import Fraction

import pytest
from lab_grading import assert_partial, grade_answers

from pipeline_kit.course.labs import lab09
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.layout import even_layout
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

LAB = "lab09_zero_bubble_v"


def v_stage(rank, chunk, pp):
    return rank if chunk == 0 else 2 * pp - 1 - rank


def right_peaks(pp, m):
    return [min(m + 1 + r, 2 * m, 2 * pp) for r in range(pp)]


# -- one whole notebook, graded: each wrong answer costs exactly its checks -------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """The looped placement, every boundary counted as a message, 1F1B's bubble, 1F1B's memory doubled and a
    'fewer messages' belief -- each in its own answer cell; the speedup and refusals answered right, differently
    written (floats, a lookup of the kit's refusal)."""
    answers = {
        "placement": """
def v_stage(rank, chunk, pp):
    return chunk * pp + rank

def v_owner(stage, pp):
    return stage % pp, stage // pp

def v_rank_layers(rank, pp, layers):
    stages = even_layout(layers, 2 * pp).stages
    return sorted(i for c in (0, 1) for i in stages[v_stage(rank, c, pp)].layers)
""",
        "messages": "def v_messages(pp, M):\n    return 2 * M * (2 * pp - 1)\n",
        "bubble": "def zbv_bubble(pp, M):\n    return (pp - 1) / (M + pp - 1)\n",
        "vs_1f1b": "def zbv_speedup(pp, M):\n    return 6.0 * (M + pp - 1) / (6 * M + pp - 1)\n",
        "memory": "def zbv_peaks(pp, M):\n    return [2 * min(pp - r, M) for r in range(pp)]\n",
        "why": 'v_buys = ["ends_together", "local_turn", "even_memory", "tied_local", "fewer_messages"]\n',
        "refusal": """
def v_accepted(name, pp, M, chunks):
    try:
        build_schedule(name, pp, M, chunks)
    except ScheduleConfigError:
        return False
    return True
""",
    }
    report = grade_answers(tmp_path, LAB, answers, timeout=120)
    assert_partial(report, {"zbv_main_placement": "looped placement",
                            "zbv_main_messages": "inside rank pp-1",
                            "zbv_main_bubble": "1F1B's bubble",
                            "zbv_follow_memory": "the deepest rank is the last one",
                            "zbv_follow_why": "more P2P messages than 1F1B, not fewer"})
    placement = next(c for c in report.checks if c.name == "zbv_main_placement")
    # v_stage is looped; v_owner (its inverse) and v_rank_layers follow it: one mistake, one point of 3
    assert placement.points == 2
    why = next(c for c in report.checks if c.name == "zbv_follow_why")
    assert why.points == 1.5  # one false statement picked: a quarter of 2 points


# -- the checks themselves, called directly (milliseconds) ------------------------------------
def test_placement_is_the_kits_v():
    pps = [1, 2, 4, 7]
    lab09.check_v_stage(v_stage, pps)
    lab09.check_v_owner(lambda s, pp: (s, 0) if s < pp else (2 * pp - 1 - s, 1), pps)
    for pp in pps:  # the check's rule is the schedule's: ZB-V's rank r runs stages r and 2pp-1-r
        sched = build_schedule("zbv", pp, 2)
        assert [sched.stages_of(r) for r in range(pp)] == [[v_stage(r, 0, pp), v_stage(r, 1, pp)] for r in range(pp)]
    with pytest.raises(LabCheckFailed, match="chunks are swapped"):
        lab09.check_v_stage(lambda r, c, pp: v_stage(r, 1 - c, pp), [3])
    with pytest.raises(LabCheckFailed, match="one too far"):
        lab09.check_v_stage(lambda r, c, pp: r if c == 0 else 2 * pp - r, [3])
    with pytest.raises(LabCheckFailed, match="must be an integer"):
        lab09.check_v_stage(lambda r, c, pp: float(v_stage(r, c, pp)), [2])
    with pytest.raises(LabCheckFailed, match="return \\(rank, chunk\\), in that order"):
        lab09.check_v_owner(lambda s, pp: (0, s) if s < pp else (1, 2 * pp - 1 - s), [3])


def test_rank_layers():
    def right(rank, pp, layers):
        st = even_layout(layers, 2 * pp).stages
        return sorted([*st[v_stage(rank, 0, pp)].layers, *st[v_stage(rank, 1, pp)].layers])
    lab09.check_v_rank_layers(right, [(4, 16), (1, 4), (3, 12)])
    assert right(0, 4, 16) == [0, 1, 14, 15]
    with pytest.raises(LabCheckFailed, match="return them as a list sorted ascending"):
        lab09.check_v_rank_layers(lambda r, pp, n: sorted(right(r, pp, n), reverse=True), [(4, 16)])
    with pytest.raises(LabCheckFailed, match="contiguous block"):
        lab09.check_v_rank_layers(lambda r, pp, n: list(range(r * n // pp, (r + 1) * n // pp)), [(4, 16)])


def test_messages_count_only_what_crosses_ranks():
    lab09.check_v_messages(lambda pp, m: 4 * m * (pp - 1), [(1, 4), (4, 8), (5, 3)])
    with pytest.raises(LabCheckFailed, match="forward activations only"):
        lab09.check_v_messages(lambda pp, m: 2 * m * (pp - 1), [(4, 8)])


def test_bubble_and_speedup():
    cases = [(2, 4), (4, 8), (8, 16), (3, 11)]
    lab09.check_zbv_bubble(lambda pp, m: Fraction(pp - 1, 6 * m + pp - 1), cases)
    lab09.check_zbv_bubble(lambda pp, m: round((pp - 1) / (6 * m + pp - 1), 12), cases)
    for wrong, text in [(lambda pp, m: 0, "zero bubble is not zero idle"),
                        (lambda pp, m: Fraction(pp - 1, 6 * m), "over the ideal time"),
                        (lambda pp, m: Fraction(pp - 1, 2 * m + pp - 1), "interleaved schedule's with v = 2"),
                        (lambda pp, m: Fraction(pp - 1, 3 * m + pp - 1), "both chunks' F, I and W")]:
        with pytest.raises(LabCheckFailed, match=text):
            lab09.check_zbv_bubble(wrong, [(4, 8)])
    lab09.check_zbv_speedup(lambda pp, m: Fraction(6 * (m + pp - 1), 6 * m + pp - 1), cases)
    with pytest.raises(LabCheckFailed, match="upside down"):
        lab09.check_zbv_speedup(lambda pp, m: Fraction(6 * m + pp - 1, 6 * (m + pp - 1)), [(4, 8)])
    with pytest.raises(LabCheckFailed, match="a schedule that never idles"):
        lab09.check_zbv_speedup(lambda pp, m: Fraction(m + pp - 1, m), [(4, 8)])
    with pytest.raises(ValueError, match="M >= 2pp"):  # a case outside the formulas' domain is the lab's bug
        lab09.check_zbv_bubble(lambda pp, m: 0, [(4, 7)])


def test_peaks_follow_the_simulator_for_any_m():
    cases = [(pp, m) for pp in range(1, 7) for m in range(1, 3 * pp + 2)]
    lab09.check_zbv_peaks(right_peaks, cases)
    with pytest.raises(LabCheckFailed, match="1F1B's min"):
        lab09.check_zbv_peaks(lambda pp, m: simulate(build_schedule("1f1b", pp, m)).peak_activations, [(4, 8)])
    with pytest.raises(LabCheckFailed, match="fewer to keep"):
        lab09.check_zbv_peaks(lambda pp, m: [2 * pp] * pp, [(4, 3)])
    with pytest.raises(LabCheckFailed, match="one count per rank"):
        lab09.check_zbv_peaks(lambda pp, m: right_peaks(pp, m)[:-1], [(4, 8)])


def test_what_the_v_buys():
    lab09.check_v_buys(set(lab09.V_TRUE))
    lab09.check_v_buys(sorted(lab09.V_TRUE))
    with pytest.raises(LabCheckFailed, match="misses 1 true statement:"):
        lab09.check_v_buys(set(lab09.V_TRUE) - {"tied_local"})
    for false in set(lab09.V_MENU) - lab09.V_TRUE:
        with pytest.raises(LabCheckFailed, match=f"includes {false!r}"):
            lab09.check_v_buys(set(lab09.V_TRUE) | {false})
    with pytest.raises(LabCheckFailed, match="choose from"):
        lab09.check_v_buys({"the_v_is_fast"})


def test_refusals_quote_the_kit():
    def rule(name, pp, m, chunks):
        return chunks == 2 and (name == "zbv" or m >= 2 * pp)
    cases = [(name, pp, m, c) for name in ("zbv", "dualpipev") for pp in (1, 2, 4) for m in (1, 3, 8)
             for c in (1, 2, 3)]
    lab09.check_v_accepted(rule, cases)
    with pytest.raises(LabCheckFailed, match="DualPipeV requires at least as many microbatches as stages"):
        lab09.check_v_accepted(lambda name, pp, m, c: c == 2, [("dualpipev", 4, 6, 2)])
    with pytest.raises(LabCheckFailed, match="do not need the same number of microbatches: check ZB-V.s own rule"):
        lab09.check_v_accepted(lambda name, pp, m, c: c == 2 and m >= 2 * pp, [("zbv", 4, 6, 2)])
    with pytest.raises(LabCheckFailed, match="return a bool, True or False \\(its truth value is right\\)"):
        lab09.check_v_accepted(lambda name, pp, m, c: int(rule(name, pp, m, c)), [("zbv", 4, 6, 2)])


def test_hidden_cases_change_with_the_seed():
    draws = {tuple(lab09.hidden_bubble_cases(random.Random(seed))) for seed in range(8)}
    assert len(draws) > 1
    for cases in draws:
        assert all(m >= 2 * pp for pp, m in cases) and (8, 16) in cases


# -- fairness (issue 27): a helper's mistake costs once, partial credit, feedback that says what is wrong ------
def test_a_wrong_v_stage_costs_its_own_point_only():
    def looped(rank, chunk, pp):
        return chunk * pp + rank

    def owner(stage, pp):  # built on the student's own v_stage
        return next((r, c) for r in range(pp) for c in (0, 1) if looped(r, c, pp) == stage)

    def layers(rank, pp, n):
        st = even_layout(n, 2 * pp).stages
        return sorted(i for c in (0, 1) for i in st[looped(rank, c, pp)].layers)
    lab09.check_v_owner(owner, [1, 2, 4], looped)
    lab09.check_v_rank_layers(layers, [(4, 16), (2, 12)], looped)
    with pytest.raises(LabCheckFailed, match="looped placement"):
        lab09.check_v_owner(owner, [4])  # without the student's v_stage: judged against the kit's
    with pytest.raises(LabCheckFailed, match="looped placement"):
        lab09.check_v_rank_layers(layers, [(4, 16)], v_stage)  # the right v_stage: no excuse
    # a v_stage off the end: the rank it gives no legal stage is not judged again
    def too_far(rank, chunk, pp):
        return rank if chunk == 0 else 2 * pp - rank

    def far_layers(rank, pp, n):  # raises IndexError on rank 0, as a v_rank_layers built on too_far does
        st = even_layout(n, 2 * pp).stages
        return sorted(i for c in (0, 1) for i in st[too_far(rank, c, pp)].layers)
    lab09.check_v_rank_layers(far_layers, [(4, 16)], too_far)


def test_the_placement_cell_shares_its_points():
    from pipeline_kit.grading.parts import run_test_cell
    source = ("from pipeline_kit.course.labs import lab09\n"
              "lab09.check_v_stage(v_stage, [4])\n"
              "lab09.check_v_owner(v_owner, [4], v_stage)\n"
              "lab09.check_v_rank_layers(v_rank_layers, [(4, 16)], v_stage)\n")
    good_owner = lambda s, pp: (s, 0) if s < pp else (2 * pp - 1 - s, 1)
    good_layers = lambda r, pp, n: lab09.expected_rank_layers(r, pp, n)
    out = run_test_cell(source, {"v_stage": v_stage, "v_owner": lambda s, pp: good_owner(s, pp)[::-1],
                                 "v_rank_layers": good_layers})
    assert round(out.earned, 6) == round(2 / 3, 6) and "in that order" in out.feedback
    out = run_test_cell(source, {"v_stage": v_stage, "v_owner": good_owner, "v_rank_layers": good_layers})
    assert out.earned == 1.0


def test_speedup_follows_the_students_own_bubble():
    own = lambda pp, m: (pp - 1) / (m + pp - 1)  # 1F1B's bubble: wrong, charged in zbv_main_bubble

    def from_bubble(pp, m):
        return (1 - own(pp, m)) / (1 - (pp - 1) / (m + pp - 1))
    lab09.check_zbv_speedup(from_bubble, [(4, 8), (2, 4)], own)
    with pytest.raises(LabCheckFailed, match="kept 1F1B's bubble"):
        lab09.check_zbv_speedup(from_bubble, [(4, 8)])
    # typical wrong speedups are named, not shown as two numbers
    for wrong, text in [(lambda pp, m: 6 * (m + pp - 1) - (6 * m + pp - 1), "difference of the step times"),
                        (lambda pp, m: 3 * (m + pp - 1) / (6 * m + pp - 1), "F = 1 and B = 2"),
                        (lambda pp, m: 2 * (m + pp - 1) / (2 * m + pp - 1), "interleaved schedule's gain"),
                        (lambda pp, m: 1.5, "ratio of the simulated step times is lower")]:
        with pytest.raises(LabCheckFailed, match=text) as info:
            lab09.check_zbv_speedup(wrong, [(4, 8)])
        assert "66" not in str(info.value) and "51" not in str(info.value)


def test_v_buys_each_mistake_costs_a_quarter():
    with pytest.raises(LabCheckFailed) as info:
        lab09.check_v_buys(set(lab09.V_TRUE) - {"tied_local"} | {"no_idle", "less_memory"})
    assert info.value.lost == 0.75
    assert "'less_memory'" in str(info.value) and "'no_idle'" in str(info.value) and "misses 1 true" in str(info.value)
    with pytest.raises(LabCheckFailed) as info:
        lab09.check_v_buys(set())
    assert info.value.lost == 1.0 and "misses 4 true statements" in str(info.value)
    with pytest.raises(LabCheckFailed, match="fewer_messages") as info:
        lab09.check_v_buys(set(lab09.V_TRUE) | {"fewer_messages"})
    assert "4M" not in str(info.value) and "2M" not in str(info.value)
    with pytest.raises(LabCheckFailed, match="give a set of V_MENU's keys"):
        lab09.check_v_buys("ends_together")


def test_refusal_rules_are_separate_parts():
    with pytest.raises(LabCheckFailed) as info:
        lab09.check_v_accepted(lambda name, pp, m, c: c == 2 and m >= 2 * pp,
                               [("zbv", 4, 8, 3), ("dualpipev", 4, 6, 2), ("zbv", 4, 6, 2)])
    assert round(info.value.lost, 6) == round(1 / 3, 6) and "check ZB-V's own rule" in str(info.value)


def test_hidden_cases_start_with_the_fixed_edge_cases():
    for seed in range(5):
        rng = random.Random(seed)
        assert lab09.hidden_pp_cases(rng)[:3] == [1, 2, 3]
        assert lab09.hidden_layer_cases(rng)[:3] == [(2, 12), (3, 6), (1, 4)]
        assert lab09.hidden_message_cases(rng)[:2] == [(3, 5), (1, 4)]
        assert lab09.hidden_bubble_cases(rng)[:3] == [(8, 16), (2, 4), (3, 7)]
        assert lab09.hidden_peak_cases(rng)[:4] == [(4, 3), (8, 16), (3, 1), (5, 7)]
        assert lab09.hidden_accepted_cases(rng)[:2] == [("zbv", 4, 8, 1), ("zbv", 4, 3, 2)]
