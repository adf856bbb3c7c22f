"""The instructor's views of a gradebook (issue 35): the statistics page and the LMS exports, on gradebooks made of
known rows -- every figure checked against the rows, every text escaped, every output written only where allowed."""

from __future__ import annotations

import argparse
import csv
import io
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_kit.argtypes import UsageError
from pipeline_kit.grading import gradebook, gradebook_views
from pipeline_kit.grading.batch import GRADED, MISSING, NOT_GRADED, REFUSED, Row

LAB_A, LAB_B = "lab02_timelines", "lab04_1f1b_generator"
EVIL = '<script>alert("x")</script>'
FORMULA = '=HYPERLINK("http://evil.example","x")'


def _row(student, lab, points, status=GRADED, feedback="wrong order") -> Row:
    if status != GRADED:
        return Row(student, lab, f"{student}.ipynb", None, status=status, error="why")
    checks = [{"name": "m042_main_order", "points": points[0], "max_points": 3.0,
               "feedback": "passed" if points[0] == 3 else feedback},
              {"name": "m042_follow_bubble", "points": points[1], "max_points": 2.0,
               "feedback": "passed" if points[1] == 2 else "bubble"}]
    report = {"score": sum(points), "max_score": 5.0, "checks": checks,
              "questions": {"m042_main": {"points": points[0], "max_points": 3.0},
                            "m042_follow": {"points": points[1], "max_points": 2.0}}}
    return Row(student, lab, f"{student}.ipynb", 1, 1.0, report)


ROWS = [_row("ann", LAB_A, (3, 2)), _row("ben", LAB_A, (0, 2), feedback=EVIL), _row("cat", LAB_A, (0, 1)),
        _row(FORMULA, LAB_A, (1.5, 0)), _row("dan", LAB_A, (0, 0), status=NOT_GRADED),
        _row("eve", LAB_A, (0, 0), status=REFUSED), _row("ann", LAB_B, (3, 0)), _row("fay", LAB_B, (0, 0),
                                                                                  status=MISSING)]


def _view(tmp_path, *argv):
    p = argparse.ArgumentParser()
    gradebook_views.add_view_args(p.add_subparsers(dest="action", required=True))
    return gradebook_views.cmd_view(p.parse_args([str(a) for a in argv]))


@pytest.fixture()
def book(tmp_path):
    folder = tmp_path / "book"
    gradebook.save(folder, ROWS, {})
    return folder


def test_the_report_counts_what_the_rows_hold(book, tmp_path):
    assert _view(tmp_path, "report", book, "-o", tmp_path / "r.html") == 0
    page = (tmp_path / "r.html").read_text()
    scored = [r.score for r in ROWS if r.lab == LAB_A and r.status != NOT_GRADED]
    assert f'id="lab-{LAB_A}"' in page and 'id="not-graded"' in page
    assert f">{round(statistics.mean(scored), 2):g}<" in page and f">{statistics.median(scored):g}<" in page
    assert EVIL not in page and "&lt;script&gt;" in page
    bins = gradebook_views.histogram_bins(scored, 5.0)
    assert sum(c for _, _, c in bins) == len(scored) and len(bins) == 6
    assert page.count('class="bar"') == 2 * (6 + 4 + 3)  # two labs: the score (0-5) and two questions (0-3, 0-2)


def test_the_most_often_failed_check_comes_first_with_its_feedback():
    found = gradebook_views.failed_checks([r for r in ROWS if r.lab == LAB_A])
    assert found[0][:3] == ("m042_main_order", 3, 4) and found[0][3][0] == ("wrong order", 2)
    assert {text for text, _ in found[0][3]} == {"wrong order", EVIL}


@pytest.mark.parametrize("fmt,head", [("csv", ["student", LAB_A, LAB_B, "total"]), ("moodle", ["Username", LAB_A,
                                                                                               LAB_B]),
                                      ("canvas", ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", LAB_A,
                                                  LAB_B])])
def test_each_export_has_the_columns_its_lms_imports(book, tmp_path, fmt, head):
    assert _view(tmp_path, "export", book, "--format", fmt, "-o", tmp_path / "x.csv") == 0
    table = list(csv.reader(io.StringIO((tmp_path / "x.csv").read_text())))
    assert table[0] == head
    body = table[2:] if fmt == "canvas" else table[1:]
    if fmt == "canvas":
        assert table[1][0] == "Points Possible" and table[1][5:] == ["5", "5"]
    by = {r[0]: r for r in body}
    score_at = len(head) - (3 if fmt == "csv" else 2)
    assert by["dan"][score_at] == "" and by["eve"][score_at] == "0" and by["fay"][score_at + 1] == "0"
    assert "'" + FORMULA in by and FORMULA not in by  # a spreadsheet never runs it
    if fmt == "csv":
        assert by["ann"][-1] == "8"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from([LAB_A, LAB_B]),
                          st.floats(0, 3).map(lambda x: round(x, 1)), st.booleans()), max_size=12))
def test_the_total_is_the_sum_of_the_known_scores(entries):
    rows = {(s, lab): _row(s, lab, (p, 2.0), status=GRADED if ok else NOT_GRADED) for s, lab, p, ok in entries}
    table = list(csv.DictReader(io.StringIO(gradebook_views.export_csv(list(rows.values()), "csv"))))
    for line in table:
        known = [r.score for (s, _), r in rows.items() if s == line["student"] and r.status != NOT_GRADED]
        assert float(line["total"]) == pytest.approx(round(sum(known), 2))


def test_outputs_never_replace_an_input_and_damage_is_one_line(book, tmp_path):
    with pytest.raises(UsageError, match="also an input"):
        _view(tmp_path, "export", book, "--format", "csv", "-o", book / "grades.csv")
    (book / "grades.json").write_text('{"format": "pipeline-kit gradebook 1", "rows": [{"student": 1}]}')
    with pytest.raises(UsageError) as err:
        _view(tmp_path, "report", book, "-o", tmp_path / "r.html")
    assert "\n" not in str(err.value) and not (tmp_path / "r.html").exists()
