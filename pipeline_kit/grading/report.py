"""A rubric report: named checks with points earned, points possible and specific feedback, and the manually graded
cells beside them (points possible, whether answered: the instructor scores them, the kit does not grade words)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..language import translated


@dataclass
class Check:
    name: str
    points: float
    max_points: float
    feedback: str


@dataclass
class ManualCheck:
    """A manually graded cell (nbgrader's ``grade`` and ``solution``): the instructor scores it in nbgrader's
    formgrader; the report says only its points possible and whether the student answered it."""

    name: str
    max_points: float
    answered: bool


MANUAL_NOTE = "graded by your instructor"


@dataclass
class Report:
    """What a grader returns; ``to_dict`` is the ``--json`` contract shared by every grading command."""

    notebook: str
    checks: list[Check] = field(default_factory=list)
    lab: str | None = None    # set by the notebook grader, with the seed its hidden cases were drawn from: the
    seed: int | None = None   # instructor's (``to_dict``, the gradebook), never in the text a student may see
    sandbox: dict | None = None  # how the student's code was isolated (the notebook grader's, decided by it)
    manual: list[ManualCheck] = field(default_factory=list)  # not in score or max_score: the instructor's to score
    language: str = "en"      # the language of the feedback: the notebook's (metadata.pipeline_kit.language)

    @property
    def score(self) -> float:
        return round(sum(c.points for c in self.checks), 2)  # (shares of points: 1.5 + 0.67 + ... stays readable)

    @property
    def max_score(self) -> float:
        return round(sum(c.max_points for c in self.checks), 2)

    def questions(self) -> dict[str, dict]:
        """Per-question subtotals, ``{"m043_main": {"points", "max_points"}, ...}``, in the bank's order (main before
        follow-up); checks not named after a rubric point (``m0xx_main_...``) are left out."""
        from .notebook import QUESTIONS, rubric_part
        sums: dict[tuple[str, str], list[float]] = {}
        for c in self.checks:
            part = rubric_part(c.name)
            if part is not None:
                total = sums.setdefault(part, [0.0, 0.0])
                total[0] += c.points
                total[1] += c.max_points
        order = {q: i for i, q in enumerate(QUESTIONS)}
        keys = sorted(sums, key=lambda k: (order.get(k[0], len(order)), k[1] != "main"))
        return {f"{q}_{kind}": {"points": round(sums[q, kind][0], 2), "max_points": round(sums[q, kind][1], 2)}
                for q, kind in keys}

    def add(self, name: str, max_points: float, ok: bool | float, feedback: str) -> None:
        points = max_points * (float(ok) if not isinstance(ok, bool) else (1.0 if ok else 0.0))
        self.checks.append(Check(name, round(points, 2), max_points, feedback))

    def to_dict(self) -> dict:
        head = {"notebook": self.notebook}
        if self.lab is not None:
            head.update(lab=self.lab, seed=self.seed, language=self.language)
        if self.sandbox is not None:
            head.update(sandbox=self.sandbox)
        by_question = {"questions": self.questions()} if self.lab is not None else {}  # (a lab's report)
        manual = {"manual": [{"name": m.name, "max_points": m.max_points, "answered": m.answered}
                             for m in self.manual]} if self.manual else {}
        return {**head, "score": self.score, "max_score": self.max_score, **by_question,
                "checks": [{"name": c.name, "points": c.points, "max_points": c.max_points, "feedback": c.feedback}
                           for c in self.checks], **manual}

    def text(self) -> str:
        width = max((len(c.name) for c in [*self.checks, *self.manual]), default=10)
        lines = [f"{self.notebook}: {self.score:g} / {self.max_score:g}"]
        for c in self.checks:
            lines.append(f"  {c.name:<{width}}  {c.points:>4g} / {c.max_points:<3g} {c.feedback}")
        for m in self.manual:
            lines.append(f"  {m.name:<{width}}  {'—':>4} / {m.max_points:<3g} {MANUAL_NOTE} "
                         f"({'answered' if m.answered else 'not answered yet'})")
        if self.manual:
            total = sum(m.max_points for m in self.manual)
            lines.append(f"{total:g} more point{'' if total == 1 else 's'} {MANUAL_NOTE}, not in this score")
        by_question = self.questions()
        if by_question:
            lines.append("by question: " + ", ".join(
                f"{question_label(key)} {q['points']:g} / {q['max_points']:g}" for key, q in by_question.items()))
        if self.lab is not None:
            lines.append(f"lab {self.lab}, hidden cases drawn afresh for this grade (--json records their seed, for "
                         "the instructor)")
        if self.sandbox is not None:
            box = self.sandbox
            lines.append(f"sandbox: {box.get('mode')} ({box.get('limits')})" if box.get("isolated") else
                         f"sandbox: OFF ({box.get('why')}): the student's code ran unisolated")
        return "\n".join(lines)


def question_label(key: str) -> str:
    """``m043_main`` -> ``M043 main``, ``zbv_follow`` -> ``ZBV follow-up``, ``plan_main`` -> ``PLAN main``: a
    subtotal's name for people (in the feedback's language: ``M043 主问题``)."""
    question, _, kind = key.partition("_")
    return f"{question.upper()} {translated('main') if kind == 'main' else translated('follow-up')}"
