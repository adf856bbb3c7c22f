"""What an instructor looks at after grading: a statistics page of a gradebook, and the file an LMS imports.

Why a page and not a spreadsheet: the questions an instructor asks after a lab -- how did the class do on each
interview question, which check did most students fail and with which mistake, who is still not graded -- need a
distribution and the most common feedback side by side, which a CSV cannot show.  The page is one offline HTML
file (inline CSS and SVG, no script, no network); every text in it came from students' notebooks or their code's
feedback and is escaped.

Why three export formats: Canvas and Moodle each import grades from a CSV of their own shape.

* ``canvas``: Canvas's gradebook import: the columns ``Student, ID, SIS User ID, SIS Login ID, Section``, then one
  column per assignment, and a second row ``Points Possible``.  Canvas matches a row to a student by ``ID``,
  ``SIS User ID`` or ``SIS Login ID``; the kit knows only the student's id (nbgrader's, or the folder's name), so it
  is written as ``SIS Login ID`` (and ``Student``): it matches where the course's logins are those ids (a
  JupyterHub behind the LMS's login).  A column whose name is no assignment of the course becomes a new one.
* ``moodle``: Moodle's "Import grades from CSV": a ``Username`` column to map to the user's username, then one
  column per lab, each mapped to a grade item in the import form.
* ``csv``: ``student``, one column per lab, ``total``.

A row not graded (the machine failed) is blank, never 0; a refused notebook or no submission is 0.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
from collections import Counter
from html import escape
from pathlib import Path

from ..argtypes import UsageError
from ..inputs import InputError, check_output_path
from ..interrupts import write_file_atomically
from .batch import GRADED, NOT_GRADED, Row
from .classlist import printable
from .gradebook import _cell, _number, existing_rows, question_columns
from .report import question_label

FORMATS = ("canvas", "moodle", "csv")
MAX_BINS = 20
TOP_CHECKS, TOP_FEEDBACK = 8, 3


def add_view_args(sub) -> None:
    """``gradebook report`` and ``gradebook export``, on the ``gradebook`` command's subparsers."""
    r = sub.add_parser("report", help="a page of statistics: per lab and question, the checks most often failed",
                       description="write one offline HTML page: per lab and per question the mean, median and a "
                                   "histogram of the scores, the checks most often failed with their most common "
                                   "feedback, and the rows not graded, refused or not handed in")
    r.add_argument("folder", metavar="DIR", help="the gradebook")
    r.add_argument("--out", "-o", metavar="FILE", required=True, help="the page to write (.html)")
    e = sub.add_parser("export", help="one CSV an LMS imports: a row per student, a column per lab",
                       description="write one CSV an LMS imports, a row per student and a column per lab: Canvas's "
                                   "gradebook import, Moodle's grade import, or a plain table with a total")
    e.add_argument("folder", metavar="DIR", help="the gradebook")
    e.add_argument("--format", choices=FORMATS, required=True, help="canvas, moodle or csv")
    e.add_argument("--out", "-o", metavar="FILE", required=True, help="the CSV file to write")


def cmd_view(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"argument DIR: {printable(args.folder)} is not a gradebook folder")
    try:
        check_output_path(args.out, "argument --out", [str(folder / "grades.json"), str(folder / "grades.csv")])
    except InputError as exc:
        raise UsageError(str(exc)) from None
    meta, rows = existing_rows(folder)
    if not meta:
        raise UsageError(f"argument DIR: {printable(args.folder)} has no grades.json (not a gradebook)")
    text = report_html(rows) if args.action == "report" else export_csv(rows, args.format)
    write_file_atomically(args.out, text)
    labs = sorted({r.lab for r in rows})
    print(f"{args.action}: {len(rows)} rows of {len({r.student for r in rows})} student(s), {len(labs)} lab(s) -> "
          f"{printable(args.out)}")
    return 0


# -- the export ---------------------------------------------------------------------------------------------------

def export_csv(rows: list[Row], fmt: str) -> str:
    """The LMS file: a row per student, a column per lab (score; blank where not graded)."""
    labs = sorted({r.lab for r in rows})
    by = {(r.student, r.lab): r for r in rows}
    possible = {lab: max((r.max_score for r in rows if r.lab == lab and r.max_score is not None), default=None)
                for lab in labs}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    head = {"canvas": ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"], "moodle": ["Username"],
            "csv": ["student"]}[fmt]
    w.writerow([_cell(c) for c in head + labs + (["total"] if fmt == "csv" else [])])
    if fmt == "canvas":
        w.writerow(["Points Possible", "", "", "", "", *(_number(possible[lab]) for lab in labs)])
    for student in sorted({r.student for r in rows}):
        scores = [_score(by.get((student, lab))) for lab in labs]
        ids = {"canvas": [student, "", "", student, ""], "moodle": [student], "csv": [student]}[fmt]
        total = [_number(round(sum(s for s in scores if s is not None), 2))] if fmt == "csv" else []
        w.writerow([_cell(i) for i in ids] + [_number(s) for s in scores] + total)
    return out.getvalue()


def _score(row: Row | None) -> float | None:
    return None if row is None or row.status == NOT_GRADED else row.score


# -- the report ---------------------------------------------------------------------------------------------------

STYLE = ("body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#202124}"
         "table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #e0e0e0;text-align:left;"
         "vertical-align:top}td.n{text-align:right}.note{color:#5f6368}"
         "figure{display:inline-block;margin:0 1rem 1rem 0}figcaption{font-size:.9rem}")


def report_html(rows: list[Row]) -> str:
    """The page: a section per lab (``id="lab-<lab>"``) and the rows without a score (``id="not-graded"``)."""
    labs = sorted({r.lab for r in rows})
    body = [f"<h1>Gradebook report</h1><p class=\"note\">{len(rows)} rows: {len({r.student for r in rows})} "
            f"student(s), {len(labs)} lab(s). The statistics count every row with a score (graded, refused and no "
            "submission, as the exports do); the rows not graded are listed at the end.</p>"]
    body += [_lab_section(lab, [r for r in rows if r.lab == lab]) for lab in labs]
    body.append(_without_score(rows))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Gradebook report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def _lab_section(lab: str, rows: list[Row]) -> str:
    scored = [r for r in rows if r.status != NOT_GRADED]
    top = max((r.max_score for r in scored if r.max_score is not None), default=0.0)
    parts = [f'<section id="lab-{escape(lab)}"><h2>{escape(lab)}</h2>',
             "<table><tr><th>part</th><th>rows</th><th>mean</th><th>median</th><th>min</th><th>max</th>"
             "<th>of</th></tr>", _stats_row("score", [r.score for r in scored], top)]
    figures = [_histogram("score", [r.score for r in scored], top)]
    for key in question_columns(scored):
        values = [r.report["questions"][key]["points"] for r in scored if r.report and key in r.report["questions"]]
        most = max(r.report["questions"][key]["max_points"] for r in scored
                   if r.report and key in r.report["questions"])
        parts.append(_stats_row(question_label(key), values, most))
        figures.append(_histogram(question_label(key), values, most))
    parts.append("</table>")
    parts += ["<div>", *figures, "</div>", _failed_checks(scored), "</section>"]
    return "".join(parts)


def _stats_row(name: str, values: list[float], most: float) -> str:
    if not values:
        return f"<tr><td>{escape(name)}</td><td class=\"n\">0</td><td colspan=\"5\">no scores</td></tr>"
    cells = (len(values), round(statistics.mean(values), 2), statistics.median(values), min(values), max(values),
             most)
    return f"<tr><td>{escape(name)}</td>" + "".join(f"<td class=\"n\">{escape(_number(v))}</td>" for v in cells) + \
        "</tr>"


def histogram_bins(values: list[float], most: float) -> list[tuple[float, float, int]]:
    """``[(low, high, count)]``: bins of whole points from 0 (wider where a part is worth more than
    :data:`MAX_BINS`), the last one holding full marks."""
    width = max(1, -(-int(most) // MAX_BINS))
    n = int(most // width) + 1
    counts = [0] * n
    for v in values:
        counts[min(n - 1, max(0, int(v // width)))] += 1
    return [(i * width, (i + 1) * width, c) for i, c in enumerate(counts)]


def _histogram(name: str, values: list[float], most: float) -> str:
    """An inline SVG bar chart of ``values`` (x: points, y: rows)."""
    bins = histogram_bins(values, most)
    high = max((c for _, _, c in bins), default=0) or 1
    w, h, left, bottom = 260, 120, 28, 22
    bar = (w - left - 4) / len(bins)
    shapes = [f'<line x1="{left}" y1="{h - bottom}" x2="{w - 4}" y2="{h - bottom}" stroke="#5f6368"/>',
              f'<text x="{left - 4}" y="{h - bottom}" font-size="10" text-anchor="end">0</text>',
              f'<text x="{left - 4}" y="12" font-size="10" text-anchor="end">{high}</text>']
    for i, (low, _, count) in enumerate(bins):
        bh = (h - bottom - 12) * count / high
        x = left + i * bar
        label = f"{low:g}" + ("+" if i == len(bins) - 1 else f"–{bins[i][1]:g}")
        shapes.append(f'<rect class="bar" x="{x + 1:.1f}" y="{h - bottom - bh:.1f}" width="{bar - 2:.1f}" '
                      f'height="{bh:.1f}" fill="#1a73e8"><title>{escape(label)} points: {count} row(s)</title></rect>')
    shapes.append(f'<text x="{left}" y="{h - 6}" font-size="10">0</text>'
                  f'<text x="{w - 4}" y="{h - 6}" font-size="10" text-anchor="end">{escape(_number(most))} points'
                  f'</text><text x="{w / 2:.0f}" y="{h - 6}" font-size="10" text-anchor="middle">rows per score</text>')
    return (f'<figure><svg width="{w}" height="{h}" role="img" aria-label="{escape(name)}: distribution">'
            f'{"".join(shapes)}</svg><figcaption>{escape(name)}</figcaption></figure>')


def failed_checks(rows: list[Row]) -> list[tuple[str, int, int, list[tuple[str, int]]]]:
    """``[(check, failed, rows, [(feedback, count)])]``, the most often failed first: a check failed where it earned
    less than its points; the feedback texts counted as they are."""
    seen: dict[str, list[str]] = {}
    total: Counter = Counter()
    for r in rows:
        if r.status != GRADED or not r.report:
            continue
        for c in r.report["checks"]:
            total[c["name"]] += 1
            if c["points"] < c["max_points"]:
                seen.setdefault(c["name"], []).append(c["feedback"])
    ranked = sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(name, len(fb), total[name], Counter(fb).most_common(TOP_FEEDBACK)) for name, fb in ranked[:TOP_CHECKS]]


def _failed_checks(rows: list[Row]) -> str:
    found = failed_checks(rows)
    if not found:
        return "<p>No check was failed by a graded notebook.</p>"
    out = ["<h3>Checks most often failed</h3><table><tr><th>check</th><th>failed</th><th>most common feedback</th>"
           "</tr>"]
    for name, failed, total, common in found:
        items = "".join(f"<li>{escape(text)} <span class=\"note\">({count}×)</span></li>" for text, count in common)
        out.append(f"<tr><td><code>{escape(name)}</code></td><td class=\"n\">{failed} of {total} "
                   f"({100 * failed / total:.0f}%)</td><td><ul>{items}</ul></td></tr>")
    return "".join(out) + "</table>"


def _without_score(rows: list[Row]) -> str:
    odd = sorted((r for r in rows if r.status != GRADED), key=lambda r: (r.status, r.student, r.lab))
    if not odd:
        return '<section id="not-graded"><h2>Rows without a grade</h2><p>None: every row is graded.</p></section>'
    items = "".join(f"<tr><td>{escape(r.status)}</td><td>{escape(r.student)}</td><td>{escape(r.lab)}</td>"
                    f"<td>{escape(r.error)}</td></tr>" for r in odd)
    return ('<section id="not-graded"><h2>Rows without a grade</h2><p class="note">Not graded: the machine failed, '
            'rerun them. Refused and no submission: 0 points.</p><table><tr><th>status</th><th>student</th>'
            f'<th>lab</th><th>why</th></tr>{items}</table></section>')
