"""What an instructor looks at after grading: a statistics page of a gradebook, and the file an LMS imports.

Why a page and not a spreadsheet: the questions an instructor asks after a lab -- how did the class do on each
interview question, which check did most students fail and with which mistake, who is still not graded -- need a
distribution and the most common feedback side by side, which a CSV cannot show.  The page is one offline HTML
file (inline CSS and SVG, no script, no network); every text in it came from students' notebooks or their code's
feedback and is escaped.

Why three export formats: Canvas and Moodle each import grades from a CSV of their own shape, and match a row to
a student by an id the kit cannot know is theirs -- so what to check before importing is said here.

* ``canvas``: Canvas's gradebook import (Grades > Import): the columns ``Student, ID, SIS User ID, SIS Login ID,
  Section``, then one column per assignment, and a second row ``Points Possible``.  Canvas matches a row to a
  student by ``ID``, ``SIS User ID`` or ``SIS Login ID``; the kit knows only the student's id (nbgrader's, or the
  folder's name), so it is written as ``SIS Login ID`` (and ``Student``) and the others are blank: check that the
  course's SIS login ids are those ids (a JupyterHub behind the LMS's login), or fill ``ID`` from Canvas's own
  export.  A column is matched to an assignment by its name (Canvas's export writes ``Name (id)``): rename a
  lab's column to its assignment's, or Canvas makes a new assignment.  Canvas shows the changes before it
  applies them: read that preview.
* ``moodle``: Moodle's "Import grades from CSV": a ``Username`` column (map it from ``Username`` to
  ``username`` under "Identify user by"), then one column per lab, each mapped to a grade item (or "new grade
  item") in the import form.  Moodle stops the whole import at a username it does not know, and reads a blank
  cell as "no grade" -- which replaces a grade there -- so leave a lab's column unmapped while rows of it are
  still not graded.
* ``csv``: ``student``, one column per lab, ``total`` (the sum of the known scores; blank where none is).

A row not graded (the machine failed) is blank, never 0, and so is a lab the gradebook has no row of for the
student; any other row (graded, refused, no submission) is its score.  Every text cell is neutralised as a
formula (:func:`.gradebook._cell`); numbers are written as numbers.
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
from .gradebook import FILES, _cell, _number, _utf8, existing_rows, question_columns
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
    e.add_argument("--format", choices=FORMATS, required=True,
                   help="canvas (Canvas's gradebook import), moodle (Moodle's 'Import grades from CSV', users by "
                        "Username) or csv (student, a column per lab, total)")
    e.add_argument("--out", "-o", metavar="FILE", required=True, help="the CSV file to write")


def cmd_view(args: argparse.Namespace) -> int:
    """``gradebook report`` and ``gradebook export``: the output checked first (never one of the gradebook's own
    files), the gradebook read and checked whole (a damaged one: one line, exit 2), the file written whole."""
    folder = Path(args.folder)
    try:
        check_output_path(args.out, "argument --out", [str(folder / name) for name in FILES])
    except InputError as exc:
        raise UsageError(str(exc)) from None
    if not folder.is_dir():
        raise UsageError(f"argument DIR: {printable(args.folder)} is not a gradebook folder")
    meta, rows = existing_rows(folder)
    if not meta:
        raise UsageError(f"argument DIR: {printable(args.folder)} has no grades.json (not a gradebook)")
    text = report_html(rows, printable(args.folder)) if args.action == "report" else export_csv(rows, args.format)
    try:
        write_file_atomically(args.out, _utf8(text))
    except OSError as exc:  # (a full disk, a folder gone meanwhile: the old file, if any, is whole)
        raise UsageError(f"argument --out: cannot write {printable(args.out)}: {exc.strerror or exc}; nothing was "
                         "changed") from None
    print(f"{args.action}: {len(rows)} rows of {len({r.student for r in rows})} student(s), "
          f"{len({r.lab for r in rows})} lab(s) -> {printable(args.out)}")
    return 0


# -- the export ---------------------------------------------------------------------------------------------------

HEADS = {"canvas": ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"], "moodle": ["Username"],
         "csv": ["student"]}


def export_csv(rows: list[Row], fmt: str) -> str:
    """The LMS file (:data:`FORMATS`): a row per student, a column per lab (its score; blank where not graded)."""
    if fmt not in HEADS:
        raise ValueError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
    labs = sorted({r.lab for r in rows})
    by = {(r.student, r.lab): r for r in rows}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([_cell(c) for c in HEADS[fmt] + labs + (["total"] if fmt == "csv" else [])])
    if fmt == "canvas":
        w.writerow(["Points Possible", "", "", "", "", *(_number(possible(rows, lab)) for lab in labs)])
    for student in sorted({r.student for r in rows}):
        scores = [_score(by.get((student, lab))) for lab in labs]
        known = [s for s in scores if s is not None]
        ids = {"canvas": [student, "", "", student, ""], "moodle": [student], "csv": [student]}[fmt]
        total = [_number(round(sum(known), 2)) if known else ""] if fmt == "csv" else []
        w.writerow([_cell(i) for i in ids] + [_number(s) for s in scores] + total)
    return out.getvalue()


def possible(rows: list[Row], lab: str) -> float | None:
    """A lab's points: the max_score of its graded rows (None where none is graded)."""
    return max((r.max_score for r in rows if r.lab == lab and r.status == GRADED and r.max_score is not None),
               default=None)


def _score(row: Row | None) -> float | None:
    return None if row is None or row.status == NOT_GRADED else row.score


# -- the report ---------------------------------------------------------------------------------------------------

STYLE = ("body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#202124}"
         "table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #e0e0e0;text-align:left;"
         "vertical-align:top}td.n{text-align:right}.note{color:#5f6368}ul{margin:0;padding-left:1.2rem}"
         "figure{display:inline-block;margin:0 1rem 1rem 0}figcaption{font-size:.9rem}svg text{fill:#3c4043}")


def report_html(rows: list[Row], source: str = "") -> str:
    """The page: a section per lab (``id="lab-<lab>"``), the rows not graded (``id="not-graded"``) and the rows
    refused or not handed in (``id="zero"``)."""
    labs = sorted({r.lab for r in rows})
    where = f" of <code>{escape(source)}</code>" if source else ""
    body = [f"<h1>Gradebook report</h1><p>What the class scored in the gradebook{where}: {len(rows)} rows, "
            f"{len({r.student for r in rows})} student(s), {len(labs)} lab(s). Per lab, the score and each "
            "question's points (count, mean, median, min, max, and a histogram: how many students scored in each "
            "range of points), then the checks most often failed with their most common feedback.</p>"
            "<p class=\"note\">A lab's score counts every row with a score: graded, refused and no submission (0 "
            "points), as the exports do; a question counts the graded notebooks. The rows not graded (the machine "
            "failed) have no score and are listed at the end: rerun them.</p>"]
    body += [_lab_section(lab, [r for r in rows if r.lab == lab]) for lab in labs]
    body.append(_not_graded(rows))
    body.append(_zero(rows))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Gradebook report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def question_points(rows: list[Row], key: str) -> tuple[list[float], float]:
    """A question's points in the rows that have it (a manual cell not scored yet is left out), and its most."""
    values, most = [], 0.0
    for r in rows:
        q = (r.report or {}).get("questions", {}).get(key)
        if q:
            most = max(most, q["max_points"] or 0.0)
            if q["points"] is not None:
                values.append(q["points"])
    return values, most


def _lab_section(lab: str, rows: list[Row]) -> str:
    scored = [r for r in rows if r.status != NOT_GRADED]
    top = possible(rows, lab) or 0.0
    parts = [f'<section id="lab-{escape(lab)}"><h2>{escape(lab)}</h2>',
             "<table><tr><th>part</th><th>count</th><th>mean</th><th>median</th><th>min</th><th>max</th>"
             "<th>out of</th></tr>", _stats_row("score", [r.score for r in scored], top)]
    figures = [_histogram("score", [r.score for r in scored], top)]
    for key in question_columns(scored):
        values, most = question_points(scored, key)
        parts.append(_stats_row(question_label(key), values, most))
        figures.append(_histogram(question_label(key), values, most))
    parts.append("</table>")
    parts += ["<div>", *figures, "</div>", _failed_checks(scored), "</section>"]
    return "".join(parts)


def _stats_row(name: str, values: list[float], most: float) -> str:
    if not values:
        return f"<tr><td>{escape(name)}</td><td class=\"n\">0</td><td colspan=\"5\">no scores</td></tr>"
    cells = (len(values), round(statistics.mean(values), 2), round(statistics.median(values), 2), min(values),
             max(values), most)
    return f"<tr><td>{escape(name)}</td>" + "".join(f"<td class=\"n\">{escape(_number(v))}</td>" for v in cells) + \
        "</tr>"


def histogram_bins(values: list[float], most: float) -> list[tuple[float, float, int]]:
    """``[(low, high, count)]``: bins of whole points from 0 (wider where a part is worth more than
    :data:`MAX_BINS`), the last one holding full marks; a value outside 0..most counts in the nearest bin."""
    width = max(1, -(-int(most) // MAX_BINS))
    n = int(most // width) + 1
    counts = [0] * n
    for v in values:
        counts[min(n - 1, max(0, int(v // width)))] += 1
    return [(i * width, (i + 1) * width, c) for i, c in enumerate(counts)]


def _histogram(name: str, values: list[float], most: float) -> str:
    """An inline SVG bar chart of ``values``: x the points (a bar per bin), y how many students."""
    bins = histogram_bins(values, most)
    high = max((c for _, _, c in bins), default=0) or 1
    w, h, left, bottom, top = 280, 140, 40, 34, 10
    plot = h - bottom - top
    bar = (w - left - 6) / len(bins)
    shapes = [f'<line x1="{left}" y1="{h - bottom}" x2="{w - 6}" y2="{h - bottom}" stroke="#5f6368"/>',
              f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#5f6368"/>',
              f'<text x="{left - 4}" y="{h - bottom}" font-size="10" text-anchor="end">0</text>',
              f'<text x="{left - 4}" y="{top + 8}" font-size="10" text-anchor="end">{high}</text>',
              f'<text x="10" y="{top + plot / 2:.0f}" font-size="10" text-anchor="middle" '
              f'transform="rotate(-90 10 {top + plot / 2:.0f})">students</text>']
    step = -(-len(bins) // 11)  # a label under every bar, or every other one where there are many
    for i, (low, high_, count) in enumerate(bins):
        bh = plot * count / high
        x = left + i * bar
        label = f"{low:g}" + ("+" if i == len(bins) - 1 else f"–{high_:g}")
        shapes.append(f'<rect class="bar" data-count="{count}" x="{x + 1:.1f}" y="{h - bottom - bh:.1f}" '
                      f'width="{max(bar - 2, 1):.1f}" height="{bh:.1f}" fill="#1a73e8"><title>{escape(label)} '
                      f'points: {count} student(s)</title></rect>')
        if i % step == 0 or i == len(bins) - 1:
            shapes.append(f'<text x="{x + bar / 2:.1f}" y="{h - bottom + 12}" font-size="10" '
                          f'text-anchor="middle">{low:g}</text>')
    shapes.append(f'<text x="{left + (w - left) / 2:.0f}" y="{h - 6}" font-size="10" text-anchor="middle">points '
                  f'(a bar per {bins[0][1]:g} point{"s" if bins[0][1] != 1 else ""}; the last: full marks)</text>')
    return (f'<figure><svg width="{w}" height="{h}" role="img" aria-label="{escape(name)}: how many students '
            f'scored each range of points">{"".join(shapes)}</svg><figcaption>{escape(name)}</figcaption></figure>')


def failed_checks(rows: list[Row]) -> list[tuple[str, int, int, list[tuple[str, int]]]]:
    """``[(check, failed, rows, [(feedback, count)])]``, the most often failed first: a check failed where it earned
    less than its points; the feedback texts counted as they are.  A check without points yet (a manual cell the
    instructor has not scored) is left out."""
    seen: dict[str, list[str]] = {}
    total: Counter = Counter()
    for r in rows:
        if r.status != GRADED or not r.report:
            continue
        for c in r.report.get("checks") or []:
            if c.get("points") is None or c.get("max_points") is None:
                continue
            total[c["name"]] += 1
            if c["points"] < c["max_points"]:
                seen.setdefault(c["name"], []).append(c.get("feedback") or "")
    ranked = sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(name, len(fb), total[name], Counter(fb).most_common(TOP_FEEDBACK)) for name, fb in ranked[:TOP_CHECKS]]


def _failed_checks(rows: list[Row]) -> str:
    found = failed_checks(rows)
    if not found:
        return "<p>No check was failed by a graded notebook.</p>"
    out = ["<h3>Checks most often failed</h3><table><tr><th>check</th><th>failed</th><th>most common feedback</th>"
           "</tr>"]
    for name, failed, total, common in found:
        items = "".join(f"<li>{escape(text) or '<i>(no feedback)</i>'} <span class=\"note\">({count}×)</span></li>"
                        for text, count in common)
        out.append(f"<tr><td><code>{escape(name)}</code></td><td class=\"n\">{failed} of {total} "
                   f"({100 * failed / total:.0f}%)</td><td><ul>{items}</ul></td></tr>")
    return "".join(out) + "</table>"


def _rows_table(rows: list[Row], status: bool) -> str:
    head = "<th>status</th>" if status else ""
    items = "".join(f"<tr>{f'<td>{escape(r.status)}</td>' if status else ''}<td>{escape(r.student)}</td>"
                    f"<td>{escape(r.lab)}</td><td>{escape(r.error)}</td></tr>"
                    for r in sorted(rows, key=lambda r: (r.status, r.student, r.lab)))
    return f"<table><tr>{head}<th>student</th><th>lab</th><th>why</th></tr>{items}</table>"


def _not_graded(rows: list[Row]) -> str:
    odd = [r for r in rows if r.status == NOT_GRADED]
    text = ("<p>None: every row has a score.</p>" if not odd else
            f"<p class=\"note\">{len(odd)} row(s) without a score: the grader's machine failed, not the notebook. "
            "Grade them again; the exports leave them blank.</p>" + _rows_table(odd, False))
    return f'<section id="not-graded"><h2>Not graded</h2>{text}</section>'


def _zero(rows: list[Row]) -> str:
    odd = [r for r in rows if r.status not in (GRADED, NOT_GRADED)]
    text = ("<p>None.</p>" if not odd else
            f"<p class=\"note\">{len(odd)} row(s) scored 0: the notebook was refused (why: the last column), or "
            "nothing was handed in.</p>" + _rows_table(odd, True))
    return f'<section id="zero"><h2>Refused or not handed in</h2>{text}</section>'
