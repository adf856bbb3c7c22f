"""Partial credit (issue 27): a test cell's points are shared by its checks, a check's by its parts, and every
failing part is listed -- computed only by the grader's own code (parts.py), never by what a student raises."""

import pytest

from pipeline_kit.grading import parts, remote
from pipeline_kit.course.questions.common import LabCheckFailed, fail


def _checks():
    def check_a(x):
        if x != 1:
            fail(f"a got {x}")

    def check_b(x):
        if x != 2:
            fail(f"b got {x}")

    def check_three(values):
        p = parts.Parts()
        for i, v in enumerate(values):
            with p.part():
                if not v:
                    fail(f"property {i} is wrong")
        p.done()

    return {"check_a": check_a, "check_b": check_b, "check_three": check_three}


def test_a_cells_checks_share_its_points_and_every_failure_is_listed():
    ns = _checks()
    out = parts.run_test_cell("check_a(1)\ncheck_b(3)\n", ns)
    assert (out.earned, out.feedback) == (0.5, "b got 3")
    out = parts.run_test_cell("check_a(0)\ncheck_b(3)\n", ns)
    assert (out.earned, out.feedback) == (0.0, "a got 0; b got 3")
    assert parts.run_test_cell("check_a(1)\ncheck_b(2)\n", ns).earned == 1.0


def test_a_check_called_twice_is_one_part_failed_by_its_first_failing_call():
    out = parts.run_test_cell("check_a(1)\ncheck_a(5)\ncheck_a(6)\ncheck_b(2)\n", _checks())
    assert (out.earned, out.feedback) == (0.5, "a got 5")


def test_a_checks_own_parts_cost_their_share():
    out = parts.run_test_cell("check_three([True, False, True])\n", _checks())
    assert out.earned == pytest.approx(2 / 3) and out.feedback == "property 1 is wrong"
    out = parts.run_test_cell("check_three([False, False, True])\ncheck_a(1)\n", _checks())
    assert out.earned == pytest.approx(1 - (2 / 3) / 2) and out.feedback == "property 0 is wrong; property 1 is wrong"


def test_more_than_three_failures_end_with_how_many_more():
    out = parts.run_test_cell("check_three([False] * 5)\n", _checks())
    assert out.earned == 0.0
    assert out.feedback == ("property 0 is wrong; property 1 is wrong; property 2 is wrong; and 2 more: property 3 is "
                            "wrong; property 4 is wrong")


def test_a_long_listing_names_up_to_max_items_then_counts():
    many = [f"case {i} fails" for i in range(parts.MAX_ITEMS + 3)]
    text = parts.listing(many)
    assert text.startswith("case 0 fails; case 1 fails; case 2 fails; and 12 more: case 3 fails")
    assert f"case {parts.MAX_ITEMS - 1} fails (and 3 not listed)" in text and f"case {parts.MAX_ITEMS} " not in text


def test_a_check_of_cases_lists_every_failing_case_and_costs_the_same():
    """A check fails on its first failing case; the decorator then names every failing one (a slip in two edge
    cases shows in one grade) -- the points are the same, the first listed is the first that failed."""
    from pipeline_kit.course.questions.common import check, fail

    @check
    def check_double(double, cases):
        for x in cases:
            if double(x) != 2 * x:
                fail(f"double({x}) is wrong")

    with pytest.raises(parts.LabCheckFailed) as err:
        check_double(lambda x: 2 * x if x % 3 else x, [1, 3, 4, 6, 9])
    assert str(err.value) == "double(3) is wrong; double(6) is wrong; double(9) is wrong"
    assert err.value.lost == 1.0
    with pytest.raises(parts.LabCheckFailed) as err:
        check_double(lambda x: 0, [1])
    assert str(err.value) == "double(1) is wrong"


def test_a_failing_setup_statement_fails_every_part_after_it_once():
    out = parts.run_test_cell("check_a(1)\nfrom nowhere_at_all import x\ncheck_b(2)\ncheck_three([True])\n", _checks())
    assert out.earned == pytest.approx(1 / 3)
    assert out.feedback == "ModuleNotFoundError: No module named 'nowhere_at_all'"
    out = parts.run_test_cell("y = undefined_name\n", {})
    assert (out.earned, out.feedback) == (0.0, "NameError: name 'undefined_name' is not defined")


def test_a_students_exception_cannot_choose_the_share_it_costs():
    """A student's function raising LabCheckFailed(..., lost=0.01) arrives in the grader as another class (rebuilt
    by remote.py) without the share: the part costs all of its points."""
    forged = remote.rebuild_exception({"type": "LabCheckFailed", "module": "pipeline_kit.course.questions.common",
                                       "message": "almost right", "bases": ["AssertionError"]})
    assert type(forged) is not LabCheckFailed
    forged.lost = 0.01

    def check_forged():
        raise forged

    out = parts.run_test_cell("check_forged()\n", {"check_forged": check_forged})
    assert out.earned == 0.0 and out.feedback == "LabCheckFailed: almost right"
    for bad in (float("nan"), -1.0, 2.0, 0.0):
        def check_bad(share=bad):
            raise LabCheckFailed("x", lost=share)
        assert parts.run_test_cell("check_bad()\n", {"check_bad": check_bad}).earned == 0.0


def test_plural_counts_one_and_many():
    assert parts.plural(1, "true statement") == "1 true statement"
    assert parts.plural(2, "true statement") == "2 true statements"
    assert parts.plural(1200, "message") == "1,200 messages"
    assert parts.plural(3, "microbatch", "microbatches") == "3 microbatches"


def test_three_long_mistakes_are_each_shown_whole():
    """Issue 36: a check with three failing properties of ~200 characters each shows all three in full (each is cut
    on its own, past PART_FEEDBACK_LIMIT only), never one and a half."""
    sentences = [f"mistake {i}: " + "the activation memory term is counted per microbatch in flight " * 3
                 for i in range(3)]

    def check_long():
        p = parts.Parts()
        for text in sentences:
            with p.part():
                fail(text)
        p.done()

    got = parts.run_test_cell("check_long()", {"check_long": check_long})
    assert all(" ".join(s.split()).rstrip(".") in got.feedback for s in sentences), got.feedback
    assert len(got.feedback) > parts.PART_FEEDBACK_LIMIT and "…" not in got.feedback
    long = parts.run_test_cell("check_long()", {"check_long": lambda: fail("x" * 1000)})
    assert len(long.feedback) == parts.PART_FEEDBACK_LIMIT and long.feedback.endswith("…")
