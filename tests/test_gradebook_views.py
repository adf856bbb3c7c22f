"""The instructor's views of a gradebook (issue 35): the statistics page and the LMS exports, on gradebooks made of
known rows -- every figure checked against the rows, every text escaped, every output written only where allowed."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import subprocess
import sys

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
        return Row(student, lab, f"{student}.ipynb", None, status=status, error=f"why {student}")
    checks = [{"name": "m042_main_order", "points": points[0], "max_points": 3.0,
               "feedback": "passed" if points[0] == 3 else feedback},
              {"name": "m042_follow_bubble", "points": points[1], "max_points": 2.0,
               "feedback": "passed" if points[1] == 2 else "bubble"}]
    report = {"score": sum(points), "max_score": 5.0, "checks": checks,
              "questions": {"m042_main": {"points": points[0], "max_points": 3.0},
                            "m042_follow": {"points": points[1], "max_points": 2.0}}}
    return Row(student, lab, f"{student}.ipynb", 1, 1.0, report)


ROWS = [_row("ann", LAB_A, (3, 2)), _row("ben", LAB_A, (0, 2), feedback=EVIL), _row("cat", LAB_A, (0, 1)),
        _row(FORMULA, LAB_A, (1.5, 0)), _row("gus", LAB_A, (0, 2)), _row("dan", LAB_A, (0, 0), status=NOT_GRADED),
        _row("eve", LAB_A, (0, 0), status=REFUSED), _row("ann", LAB_B, (3, 0)),
        _row("fay", LAB_B, (0, 0), status=MISSING)]
SCORED_A = [r.score for r in ROWS if r.lab == LAB_A and r.status != NOT_GRADED]  # 5, 2, 1, 1.5, 2, 0 (eve)


def _view(*argv):
    p = argparse.ArgumentParser()
    gradebook_views.add_view_args(p.add_subparsers(dest="action", required=True))
    return gradebook_views.cmd_view(p.parse_args([str(a) for a in argv]))


@pytest.fixture()
def book(tmp_path):
    folder = tmp_path / "book"
    gradebook.save(folder, ROWS, {})
    return folder


def _section(page: str, ident: str) -> str:
    return re.search(rf'<section id="{ident}">(.*?)</section>', page, re.S).group(1)


def _cells(section: str, part: str) -> list[str]:
    row = re.search(rf"<tr><td>{re.escape(part)}</td>(.*?)</tr>", section).group(1)
    return re.findall(r"<td[^>]*>(.*?)</td>", row)


def test_the_report_counts_what_the_rows_hold(book, tmp_path, capsys):
    assert _view("report", book, "-o", tmp_path / "r.html") == 0
    assert capsys.readouterr().out.strip() == f"report: 9 rows of 8 student(s), 2 lab(s) -> {tmp_path / 'r.html'}"
    page = (tmp_path / "r.html").read_text()
    assert page.count("<h1>") == 1 and "<script" not in page and "http" not in page.replace(FORMULA, "")
    lab = _section(page, f"lab-{LAB_A}")
    mean, median = round(statistics.mean(SCORED_A), 2), statistics.median(SCORED_A)
    assert _cells(lab, "score") == [str(len(SCORED_A)), f"{mean:g}", f"{median:g}", "0", "5", "5"]
    main = [r.report["questions"]["m042_main"]["points"] for r in ROWS if r.lab == LAB_A and r.status == GRADED]
    assert _cells(lab, "M042 main") == [str(len(main)), f"{round(statistics.mean(main), 2):g}",
                                        f"{statistics.median(main):g}", "0", "3", "3"]
    # a histogram per part, a bar per whole point (0-5: six bins), its counts summing to the rows counted
    figures = re.findall(r"<figure>(.*?)</figure>", lab, re.S)
    bars = [list(map(int, re.findall(r'data-count="(\d+)"', f))) for f in figures]
    assert [len(b) for b in bars] == [6, 4, 3]
    assert bars[0] == [1, 2, 2, 0, 0, 1] and sum(bars[1]) == sum(bars[2]) == len(main)
    assert bars[0] == [c for _, _, c in gradebook_views.histogram_bins(SCORED_A, 5.0)]
    assert ">points (a bar per 1 point;" in figures[0] and ">students</text>" in figures[0]


def test_the_rows_without_a_grade_are_listed_apart(book, tmp_path):
    _view("report", book, "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    missing, zero = _section(page, "not-graded"), _section(page, "zero")
    assert "dan" in missing and "why dan" in missing and "eve" not in missing
    assert "eve" in zero and "fay" in zero and "dan" not in zero and MISSING in zero and REFUSED in zero


def test_every_text_of_a_student_is_escaped(book, tmp_path):
    _view("report", book, "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert EVIL not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    evil = [Row(EVIL, EVIL, "x.ipynb", None, status=NOT_GRADED, error=EVIL), *ROWS]
    html = gradebook_views.report_html(evil, source=EVIL)
    assert "<script" not in html and html.count("&lt;script&gt;") >= 5


def test_the_most_often_failed_check_comes_first_with_its_feedback():
    found = gradebook_views.failed_checks([r for r in ROWS if r.lab == LAB_A])
    assert [f[:3] for f in found] == [("m042_main_order", 4, 5), ("m042_follow_bubble", 2, 5)]
    assert found[0][3] == [("wrong order", 3), (EVIL, 1)] and found[1][3] == [("bubble", 2)]


def test_a_manual_cell_not_scored_yet_is_no_failure():
    row = _row("hal", LAB_A, (3, 2))
    row.report["checks"].append({"name": "m042_written", "points": None, "max_points": 4.0, "feedback": "",
                                 "manual": True})
    row.report["questions"]["m042_written"] = {"points": None, "max_points": 4.0}
    assert gradebook_views.failed_checks([row]) == []
    assert gradebook_views.question_points([row], "m042_written") == ([], 4.0)
    assert 'id="lab-' in gradebook_views.report_html([row])


def test_a_feedback_that_is_no_utf8_is_written(book, tmp_path):
    data = json.loads((book / "grades.json").read_text())
    data["rows"][0]["checks"][0].update(points=0.0, feedback="got \udcff")  # as a report quotes a student's bytes
    (book / "grades.json").write_text(json.dumps(data))  # (ascii: the surrogate stays an escape on disk)
    assert _view("report", book, "-o", tmp_path / "r.html") == 0
    assert "got \\udcff" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("fmt,head", [("csv", ["student", LAB_A, LAB_B, "total"]),
                                      ("moodle", ["Username", LAB_A, LAB_B]),
                                      ("canvas", ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", LAB_A,
                                                  LAB_B])])
def test_each_export_has_the_columns_its_lms_imports(book, tmp_path, fmt, head):
    assert _view("export", book, "--format", fmt, "-o", tmp_path / "x.csv") == 0
    table = list(csv.reader(io.StringIO((tmp_path / "x.csv").read_text())))
    assert table[0] == head
    body = table[2:] if fmt == "canvas" else table[1:]
    if fmt == "canvas":
        assert table[1] == ["Points Possible", "", "", "", "", "5", "5"]
        assert all(r[1] == r[2] == r[4] == "" and r[3] == r[0] for r in body)
    assert len(body) == len({r.student for r in ROWS})
    by = {r[0]: dict(zip(head, r)) for r in body}
    assert by["dan"][LAB_A] == "" and by["dan"][LAB_B] == ""   # not graded; no row
    assert by["eve"][LAB_A] == "0" and by["fay"][LAB_B] == "0"  # refused; no submission
    assert by["ann"][LAB_A] == "5" and by["cat"][LAB_A] == "1" and by["'" + FORMULA][LAB_A] == "1.5"
    assert FORMULA not in by  # a spreadsheet never runs it
    if fmt == "csv":
        assert by["ann"]["total"] == "8" and by["dan"]["total"] == "" and by["fay"]["total"] == "0"


def test_every_text_cell_of_an_export_is_neutralised():
    rows = [_row("=1+1", "@lab", (3, 2)), _row("-2", "+lab", (1, 1))]
    for fmt in gradebook_views.FORMATS:
        for line in csv.reader(io.StringIO(gradebook_views.export_csv(rows, fmt))):
            assert not any(cell[:1] in "=+@" and cell for cell in line), (fmt, line)
            assert "-2" not in line


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from([LAB_A, LAB_B, "lab09_x"]),
                          st.floats(0, 3).map(lambda x: round(x, 1)),
                          st.sampled_from([GRADED, GRADED, NOT_GRADED, REFUSED, MISSING])), max_size=12))
def test_the_total_is_the_sum_of_the_known_scores(entries):
    rows = {(s, lab): _row(s, lab, (p, 2.0), status=status) for s, lab, p, status in entries}
    table = list(csv.DictReader(io.StringIO(gradebook_views.export_csv(list(rows.values()), "csv"))))
    assert sorted(line["student"] for line in table) == sorted({s for s, _ in rows})
    for line in table:
        known = [r.score for (s, _), r in rows.items() if s == line["student"] and r.status != NOT_GRADED]
        assert (line["total"] == "") if not known else float(line["total"]) == pytest.approx(round(sum(known), 2))
        for (s, lab), r in rows.items():
            if s == line["student"]:
                assert line[lab] == ("" if r.status == NOT_GRADED else f"{r.score:g}")


def test_an_output_never_replaces_the_gradebook(book, tmp_path):
    before = (book / "grades.csv").read_bytes()
    for name in ("grades.csv", "grades.json"):
        with pytest.raises(UsageError, match="also an input"):
            _view("export", book, "--format", "csv", "-o", book / name)
    with pytest.raises(UsageError, match="is a folder"):
        _view("report", book, "-o", book)
    assert (book / "grades.csv").read_bytes() == before


def test_a_damaged_gradebook_is_one_line_and_no_file(book, tmp_path):
    (book / "grades.json").write_text('{"format": "pipeline-kit gradebook 1", "rows": [{"student": 1}]}')
    with pytest.raises(UsageError) as err:
        _view("report", book, "-o", tmp_path / "r.html")
    assert "\n" not in str(err.value) and not (tmp_path / "r.html").exists()
    with pytest.raises(UsageError, match="no grades.json"):
        _view("report", tmp_path, "-o", tmp_path / "r.html")


def test_the_command_line_exits_2_in_one_line(book, tmp_path):
    (book / "grades.json").write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "pipeline_kit", "gradebook", "export", str(book), "--format",
                          "moodle", "-o", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert not (tmp_path / "x.csv").exists()


def test_the_views_import_no_plotting_and_no_torch():
    code = ("import sys, pipeline_kit.grading.gradebook_views; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'matplotlib', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
