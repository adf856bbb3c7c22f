"""A grade report as a table grouped by question, with each question's subtotal: the one rendering the self-grade
(in the notebook) and the class gradebook's feedback pages (offline HTML files) share.

Why grouped: the labs, the rubric and the interview question bank are organised by question (M042 main 10,
follow-up 5), so that is how a student reads a grade.  A check whose cases include hidden ones shows its points
and feedback and is marked so -- each failing case by its inputs, never a test's source or the value it expects.  A
manually graded cell (the report's ``manual`` list) shows in its question as "graded by your instructor" with its
points possible (and, on a feedback page, the instructor's score once given): never a ✗ or a 0, and never in the
automatic subtotal.
"""

from __future__ import annotations

from html import escape

from . import parts
from ..language import joiner, translated
from .notebook import QUESTIONS, rubric_part
from .report import MANUAL_NOTE
from .verdict import headline, manual_headline, points

# the questions beyond the interview question bank, by their titles for people
BEYOND_THE_BANK = {"zbv": "zero-bubble V (beyond the bank)", "plan": "planning a pipeline (beyond the bank)"}


def _group(name: str) -> str:
    part = rubric_part(name)
    if part is None:
        return translated("other checks")
    question, kind = part
    title = translated(BEYOND_THE_BANK[question]) if question in BEYOND_THE_BANK else question.upper()
    return f"{title} · {translated('main question') if kind == 'main' else translated('follow-up')}"


def sections(report: dict) -> list[tuple[str, list[dict], list[dict]]]:
    """``[(title, checks, manual cells)]`` by question in the bank's order, main question before follow-up (a manual
    cell, from the report's ``manual`` list, sits in its question beside that question's checks)."""
    groups: dict[str, tuple[list[dict], list[dict]]] = {}
    order = {q: i for i, q in enumerate(QUESTIONS)}
    for check in report["checks"]:
        groups.setdefault(_group(check["name"]), ([], []))[0].append(check)
    for cell in report.get("manual") or []:
        groups.setdefault(_group(cell["name"]), ([], []))[1].append(cell)

    def rank(item):
        checks, manual = item[1]
        part = rubric_part((checks or manual)[0]["name"])
        return (order.get(part[0], 99), part[1] != "main") if part else (100, False)
    return [(title, checks, manual) for title, (checks, manual) in sorted(groups.items(), key=rank)]


def grouped(report: dict) -> list[tuple[str, list[dict]]]:
    """``[(title, checks)]``: the automatic checks alone, by question (:func:`sections` adds the manual cells)."""
    return [(title, checks) for title, checks, _ in sections(report) if checks]


def _sum(checks: list[dict], key: str) -> float:
    return round(sum(c[key] for c in checks), 2)


def _scored(cell: dict) -> float | None:
    """The instructor's points for a manual cell (a feedback page's, once given in formgrader), else None."""
    got = cell.get("points")
    return got if isinstance(got, (int, float)) and not isinstance(got, bool) else None


def _subtotal(checks: list[dict], manual: list[dict]) -> str:
    """``5 / 5 points``, ``5 / 5 points + 2 graded by your instructor`` (``+ 1.5 / 2`` once scored)."""
    auto = points(_sum(checks, "points"), _sum(checks, "max_points")) if checks else ""
    if not manual:
        return auto
    possible = _sum(manual, "max_points")
    scored = [_scored(m) for m in manual]
    amount = f"{round(sum(scored), 2):g} / {possible:g}" if all(s is not None for s in scored) else f"{possible:g}"
    hand = f"{amount} {translated(MANUAL_NOTE)}" if checks else translated(f"{amount} points {MANUAL_NOTE}")
    return f"{auto} + {hand}" if auto else hand


def _manual_state(cell: dict) -> str:
    if _scored(cell) is not None:
        return translated(MANUAL_NOTE)
    return translated(f"{MANUAL_NOTE} (answered)") if cell.get("answered") else \
        translated(f"{MANUAL_NOTE} (not answered yet)")


def table_text(report: dict, hidden) -> list[str]:
    """The table as lines of text; ``hidden(name)`` says whether a check adds hidden cases."""
    lines = []
    for title, checks, manual in sections(report):
        lines.append(f"{title}: {_subtotal(checks, manual)}")
        for c in checks:
            mark = translated(" (hidden cases too)") if hidden(c["name"]) else ""
            lines.append(f"  {headline(c['name'], c['points'], c['max_points'])}{mark}")
            if c["points"] < c["max_points"]:
                lines.append(f"      {c['feedback']}")
        for m in manual:
            lines.append(f"  {manual_headline(m['name'], m['max_points'], bool(m.get('answered')), _scored(m))}")
    return lines


def folded_html(feedback: str) -> str:
    """A check's feedback, escaped, with its long listing folded: the first items in sight, the rest behind an
    "and N more" toggle (``<details>``, no script: it opens in a notebook and in an offline page alike)."""
    found = parts.FOLD.search(feedback)
    if found is None:
        return escape(feedback)
    head, rest = feedback[:found.start()], feedback[found.end():]
    more = translated(f"and {found.group(1) or found.group(2)} more")
    return (f'{escape(head)}{joiner().rstrip()} <details class="pk-more"><summary style="'
            f'cursor:pointer;color:#1a73e8">{escape(more)}</summary> {escape(rest)}</details>')


def table_html(report: dict, hidden) -> str:
    """The table as an HTML ``<table>`` (inline styles only: it is shown in notebooks and in offline files).  Every
    field is escaped: a report may come from a gradebook slice someone edited."""
    rows = []
    for title, checks, manual in sections(report):
        subtotal = _subtotal(checks, manual)
        rows.append(f'<tr class="pk-group"><th colspan="3" style="text-align:left">{escape(title)}</th>'
                    f'<th style="text-align:right;white-space:nowrap">{escape(subtotal)}</th></tr>')
        for c in checks:
            ok = c["points"] >= c["max_points"]
            mark = '<span style="color:#137333">✓</span>' if ok else '<span style="color:#c5221f">✗</span>'
            more = f' <span style="color:#5f6368">{escape(translated(" (hidden cases too)").strip())}</span>' \
                if hidden(c["name"]) else ""
            feedback = escape(translated("passed")) if ok else folded_html(c["feedback"])
            name = f'<code>{escape(c["name"])}</code>'
            earned = escape(f"{c['points']:g} / {c['max_points']:g}")
            rows.append(f'<tr class="pk-check"><td>{mark}</td><td style="text-align:left">{name}{more}</td>'
                        f'<td style="text-align:left">{feedback}</td>'
                        f'<td style="text-align:right;white-space:nowrap">{earned}</td></tr>')
        for m in manual:
            got = _scored(m)
            earned = escape(f"{'—' if got is None else format(got, 'g')} / {m['max_points']:g}")
            rows.append(f'<tr class="pk-manual"><td><span style="color:#5f6368">✎</span></td>'
                        f'<td style="text-align:left"><code>{escape(str(m["name"]))}</code></td>'
                        f'<td style="text-align:left;color:#5f6368">{escape(_manual_state(m))}</td>'
                        f'<td style="text-align:right;white-space:nowrap">{earned}</td></tr>')
    return f"<table>{''.join(rows)}</table>"
