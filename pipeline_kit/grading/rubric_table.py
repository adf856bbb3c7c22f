"""A grade report as a table grouped by question, with each question's subtotal: the one rendering the self-grade
(in the notebook) and the class gradebook's feedback pages (offline HTML files) share.

Why grouped: the labs, the rubric and the interview question bank are organised by question (M042 main 10,
follow-up 5), so that is how a student reads a grade.  A check whose cases include hidden ones shows its points
and feedback and is marked so -- never the hidden cases or a test's source (the grader's feedback names none).
"""

from __future__ import annotations

from html import escape

from .notebook import QUESTIONS, rubric_part
from .verdict import headline, points

# the questions beyond the interview question bank, by their titles for people
BEYOND_THE_BANK = {"zbv": "zero-bubble V (beyond the bank)", "plan": "planning a pipeline (beyond the bank)"}


def _group(name: str) -> str:
    part = rubric_part(name)
    if part is None:
        return "other checks"
    question, kind = part
    title = BEYOND_THE_BANK.get(question, question.upper())
    return f"{title} · {'main question' if kind == 'main' else 'follow-up'}"


def grouped(report: dict) -> list[tuple[str, list[dict]]]:
    """``[(title, checks)]`` by question in the bank's order, main question before follow-up."""
    groups: dict[str, list[dict]] = {}
    order = {q: i for i, q in enumerate(QUESTIONS)}
    for check in report["checks"]:
        groups.setdefault(_group(check["name"]), []).append(check)

    def rank(item):
        part = rubric_part(item[1][0]["name"])
        return (order.get(part[0], 99), part[1] != "main") if part else (100, False)
    return sorted(groups.items(), key=rank)


def _sum(checks: list[dict], key: str) -> float:
    return round(sum(c[key] for c in checks), 2)


def table_text(report: dict, hidden) -> list[str]:
    """The table as lines of text; ``hidden(name)`` says whether a check adds hidden cases."""
    lines = []
    for title, checks in grouped(report):
        lines.append(f"{title}: {points(_sum(checks, 'points'), _sum(checks, 'max_points'))}")
        for c in checks:
            mark = " (hidden cases too)" if hidden(c["name"]) else ""
            lines.append(f"  {headline(c['name'], c['points'], c['max_points'])}{mark}")
            if c["points"] < c["max_points"]:
                lines.append(f"      {c['feedback']}")
    return lines


def table_html(report: dict, hidden) -> str:
    """The table as an HTML ``<table>`` (inline styles only: it is shown in notebooks and in offline files).  Every
    field is escaped: a report may come from a gradebook slice someone edited."""
    rows = []
    for title, checks in grouped(report):
        subtotal = points(_sum(checks, "points"), _sum(checks, "max_points"))
        rows.append(f'<tr class="pk-group"><th colspan="3" style="text-align:left">{escape(title)}</th>'
                    f'<th style="text-align:right;white-space:nowrap">{escape(subtotal)}</th></tr>')
        for c in checks:
            ok = c["points"] >= c["max_points"]
            mark = '<span style="color:#137333">✓</span>' if ok else '<span style="color:#c5221f">✗</span>'
            more = ' <span style="color:#5f6368">(hidden cases too)</span>' if hidden(c["name"]) else ""
            feedback = "passed" if ok else escape(c["feedback"])
            name = f'<code>{escape(c["name"])}</code>'
            earned = escape(f"{c['points']:g} / {c['max_points']:g}")
            rows.append(f'<tr class="pk-check"><td>{mark}</td><td style="text-align:left">{name}{more}</td>'
                        f'<td style="text-align:left">{feedback}</td>'
                        f'<td style="text-align:right;white-space:nowrap">{earned}</td></tr>')
    return f"<table>{''.join(rows)}</table>"
