"""Partial credit: a test cell's points are shared by the independent things it checks.

Why: one wrong function out of three used to cost all three of a cell's points, and its feedback named only the
first failure, so a student could not tell one slip from three.  Two levels share the points, and both list every
failing part (:data:`MAX_LISTED` up front, then "and N more: ..." up to :data:`MAX_ITEMS`):

* **A test cell** is split into its top-level statements.  Each call of a check (``lab08.check_owner(...)``) is a
  part named by the check; a check called twice (the visible cases, then the hidden ones) is one part, failed by
  its first failing call.  The cell's points are shared equally by its parts; a failing import or assignment
  fails every part after it.
* **A check** that tests several independent properties collects them with :class:`Parts` and fails with
  :class:`LabCheckFailed` carrying ``lost``: the share of its part the failing properties cost.

``StudentTimeout`` and ``KernelDied`` are ``BaseException``: they still end the whole cell (its later parts would
only wait on the same dead or stuck kernel).  No torch, no kernel: the engine runs it on the grader's namespace,
and tests run it on an in-process notebook's.
"""

from __future__ import annotations

import ast
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..language import counted, joiner, translated

NOT_ANSWERED = "not answered yet"  # how feedback starts when the student's function is still the stub
MAX_LISTED = 3             # failing parts or cases listed up front, then "and N more: ..." (folded in HTML)
MAX_ITEMS = 12             # failing parts or cases listed at all; beyond them, only counted
PART_FEEDBACK_LIMIT = 300  # characters of one failing property's message (a sentence or two); a listing of several
                           # is cut item by item, never as a whole, so each listed mistake keeps its substance


class LabCheckFailed(AssertionError):
    """A check failed; the message is the student's feedback.  ``lost``: the share of the check's points the
    failure costs (:class:`Parts` sets it when only some of its properties failed).

    The engine's side of the contract with a course's checks: a check passes silently or raises this."""

    def __init__(self, message: str = "", lost: float = 1.0, parts: list[str] | None = None):
        super().__init__(message)
        self.lost = float(lost)
        self.parts = list(parts) if parts else None  # each failing property's own message (from :class:`Parts`)


class OutOfTime(BaseException):
    """A time limit ended the student's code (the grade's per-call limit, or a notebook's check-cell limit).  A
    ``BaseException``, so no check swallows it; a check that tries its cases again stops at it."""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 message"``, ``"2 messages"`` (``many`` for irregular plurals): the one rule for counted words.  In a
    language with a translation of ``word``, that counted form (``"2 条消息"``): the catalog's word carries its
    measure word."""
    return counted(n, word) or f"{n:,} {word if n == 1 else (many or word + 's')}"


# where a listing folds (in each language: :func:`listing`): HTML shows what follows behind a toggle
FOLD = re.compile(r"; and ([0-9,]+) more: |；另有 ([0-9,]+) 条：")


def listing(messages: list[str], limit: int = MAX_LISTED) -> str:
    """Every failing part, one line of feedback: the first ``limit`` up front, then "; and N more: " and the rest
    (up to :data:`MAX_ITEMS` in all, then only counted) -- nothing a student needs is cut, and a page folds the
    rest at :data:`FOLD`."""
    items = [translated(m).strip().rstrip(".。") for m in messages]  # (each item on its own: joined, one could
    # swallow the next into a field of its template)
    sep = joiner()
    text = sep.join(items[:limit])
    if len(items) > limit:
        listed = items[limit:max(limit, MAX_ITEMS)]
        text += translated(f"; and {len(items) - limit:,} more: ") + sep.join(listed)
        if len(items) > limit + len(listed):
            text += translated(f" (and {len(items) - limit - len(listed):,} not listed)")
    return text


class Parts:
    """Independent properties one check tests: each earns its share, and every failing one is listed.

    ::

        parts = Parts()
        with parts.part():
            ...  # fail("...") here costs this property only
        with parts.part():
            ...
        parts.done()  # raises LabCheckFailed(listing, lost=failed/total) if any failed
    """

    def __init__(self):
        self.total = 0
        self.failed: list[str] = []

    @contextmanager
    def part(self):
        self.total += 1
        try:
            yield
        except LabCheckFailed as exc:
            self.failed.append(str(exc))

    def done(self) -> None:
        if self.failed:
            raise LabCheckFailed(listing(self.failed), lost=len(self.failed) / self.total, parts=self.failed)


def fail_choices(missed: list[str], picked: list[str], right: int, wrong: int) -> None:
    """A choice question's mistakes, every one listed: each right option ``missed`` costs 1/``right`` of the
    check's points and each wrong option ``picked`` 1/``wrong`` (``right``/``wrong``: how many options are), all of
    them at most -- so an empty answer, and one that picks every option, earn nothing."""
    if missed or picked:
        share = min(1.0, len(missed) / right + (len(picked) / wrong if wrong else 0.0))
        raise LabCheckFailed(listing(missed + picked, limit=len(missed) + len(picked)), lost=share)


@dataclass
class CellOutcome:
    """What a test cell earned: the share of its points (0..1) and the feedback (empty when it all passed).
    ``failures``: each failing part's ``(check, feedback, exception)``, for the notebook's verdict (the grade
    reads only ``earned`` and ``feedback``)."""

    earned: float
    feedback: str = ""
    failures: list = field(default_factory=list)


def check_name(statement: ast.stmt) -> str | None:
    """The check a top-level statement calls (``lab08.check_owner(...)`` -> ``check_owner``), else None."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if isinstance(name, str) and name.startswith("check"):
            return name
    return None


def _message(exc: BaseException) -> str:
    """A failing part's feedback: each of its failing properties (the grader's own :class:`LabCheckFailed` from
    :class:`Parts`) cut to :data:`PART_FEEDBACK_LIMIT` on its own and listed, so three mistakes show three."""
    if type(exc) is LabCheckFailed and exc.parts:
        return listing([_shortened(translated(m)) for m in exc.parts])
    return _shortened(translated(str(exc)) if isinstance(exc, LabCheckFailed) else f"{type(exc).__name__}: {exc}")


def _shortened(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= PART_FEEDBACK_LIMIT else text[: PART_FEEDBACK_LIMIT - 1] + "…"


def _lost(exc: BaseException) -> float:
    """The share of its part a failure costs: ``lost`` of the grader's own ``LabCheckFailed`` (a student's
    exception of that name is rebuilt as another class, so it cannot bring one), else all of it."""
    share = exc.lost if type(exc) is LabCheckFailed else 1.0
    return share if isinstance(share, float) and 0.0 < share <= 1.0 else 1.0


def run_test_cell(source: str, namespace: dict, filename: str = "<test cell>") -> CellOutcome:
    """Run a canonical test cell statement by statement in ``namespace``; its parts share its points."""
    tree = ast.parse(source, filename)
    statements = [(check_name(s), s) for s in tree.body]
    names = list(dict.fromkeys(n for n, _ in statements if n is not None)) or [None]
    lost: dict[str | None, tuple[float, str]] = {}  # part -> (share of the part lost, its feedback)
    errors: dict[str | None, BaseException] = {}
    broken = None  # a failing import or assignment: every part after it fails with its message
    for name, statement in statements:
        if name in lost:
            continue
        if broken is not None:
            if name is not None:
                lost[name] = (1.0, broken)
                errors[name] = errors[None]
            continue
        code = compile(ast.Module(body=[statement], type_ignores=[]), filename, "exec")
        try:
            exec(code, namespace)  # noqa: S102 -- a statement of a canonical test cell, never the student's
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- a failed check: its message is the feedback
            share = _lost(exc)
            errors[name] = exc
            if name is None:
                broken = _message(exc)
                if names == [None]:
                    lost[None] = (1.0, broken)
            else:
                lost[name] = (share, _message(exc))
    if not lost:
        return CellOutcome(1.0)
    earned = 1.0 - sum(share for share, _ in lost.values()) / len(names)
    failures = [(name, text, errors[name]) for name, (_, text) in lost.items()]
    return CellOutcome(max(0.0, earned), listing(list(dict.fromkeys(text for _, text in lost.values()))), failures)
