"""Grading a hand-drawn pipeline timeline (M042, M043).

The drawing is a text grid, one row per rank, one op per time slot, ``.`` for an idle slot::

    r0: F0 F1 F2 F3 .  .  .  B0 ...
    r1: .  F0 F1 F2 F3 .  B0 ...

By default a forward and a backward each take one slot (``--fwd-slots`` / ``--bwd-slots`` change
that; an op longer than one slot is written once and continued with ``-``), and an op may take the
slot right after the op it depends on (P2P is free).  In a split-backward (zb-h1) drawing each half
of a backward, ``I`` and ``W``, takes ``bwd_slots`` -- F = I = W by default, as the zero-bubble
paper draws it -- and a full ``B`` there takes both halves' slots.  The grader checks that every op appears
exactly once, that no op starts before what it depends on has finished, that each rank runs the
ops in the named schedule's order, and whether the drawing reaches the schedule's shortest
makespan.  Feedback names the first violation: rank, slot, op and the op it waited for.
"""

from __future__ import annotations

import re

from ..inputs import InputError, check_text_size, excerpt
from ..limits import MAX_OPS, MAX_RANKS, LimitError, check_schedule_size, ops_per_microbatch_stage
from ..schedules import Op, OpParseError, Schedule, ScheduleConfigError, ScheduleError, build_schedule
from ..schedules.validate import check_ops, dataflow
from ..sim import simulate
from .report import Report

RUBRIC = {"every op exactly once": 3, "dependencies respected": 4, "schedule order": 1, "shortest makespan": 2}


class GridError(ValueError):
    """The drawing cannot be read; the message gives the row and column."""


def parse_grid(text: str, fwd_slots: int = 1, bwd_slots: int = 1,
               split_backward: bool = False) -> dict[int, list[tuple[int, Op]]]:
    """``{rank: [(start slot, op), ...]}`` from the text grid (columns count from 1 in errors).

    ``split_backward``: the drawing is graded against a zero-bubble schedule (see :func:`slot_table`).
    """
    slots = slot_table(fwd_slots, bwd_slots, split_backward)
    try:
        check_text_size(text, "the drawing")
    except (InputError, LimitError) as exc:
        raise GridError(str(exc)) from None
    rows: dict[int, list[tuple[int, Op]]] = {}
    count = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _ROW_RE.match(line)
        if not match:
            raise GridError(f"row {lineno}: expected 'rK: op op ...' (e.g. 'r0: F0 F1 . B0'), got {excerpt(line)}")
        if len(match.group(1)) > 6 or int(match.group(1)) >= MAX_RANKS:
            raise GridError(f"row {lineno}: rank r{match.group(1)[:12]} is beyond the limit of {MAX_RANKS:,} ranks "
                            f"(MAX_RANKS)")
        rank = int(match.group(1))
        if rank in rows:
            raise GridError(f"row {lineno}: rank r{rank} is drawn twice")
        ops, pending, last = [], 0, None
        for col, cell in enumerate(_CELL_RE.finditer(line, match.end()), start=1):
            token = cell.group()
            count += 1
            if count > MAX_OPS:
                raise GridError(f"row {lineno}: the drawing has more than the limit of {MAX_OPS:,} cells (MAX_OPS)")
            if token == "-":
                if pending == 0:
                    lengths = ", ".join(f"{k} takes {n}" for k, n in slots.items() if split_backward or k in "FB")
                    raise GridError(f"row {lineno} (r{rank}), column {col}: '-' continues an op, but no op here is "
                                    f"that long ({lengths} slot(s))")
                pending -= 1
                continue
            if pending:
                raise GridError(f"row {lineno} (r{rank}), column {col}: {last} takes {slots[last[0]]} "
                                f"slots; write it followed by {slots[last[0]] - 1} '-'")
            if token == ".":
                continue
            try:
                op = Op.parse(token)
            except OpParseError as exc:
                raise GridError(f"row {lineno} (r{rank}), column {col}: {exc}") from None
            ops.append((col - 1, op))
            last, pending = token, slots[op.kind] - 1
        if pending:
            raise GridError(f"row {lineno} (r{rank}): the row ends inside {last}, which takes "
                            f"{slots[last[0]]} slots")
        rows[rank] = ops
    if not rows:
        raise GridError("no rows found: draw one row per rank, like 'r0: F0 F1 . B0 B1'")
    return rows


_ROW_RE = re.compile(r"^r(?:ank\s*)?(\d+)\s*:")
_CELL_RE = re.compile(r"\S+")


def slot_table(fwd_slots: int, bwd_slots: int, split_backward: bool = False) -> dict[str, int]:
    """Slots each kind of op takes: F ``fwd_slots``, B ``bwd_slots``; against a split-backward schedule
    each half I and W takes ``bwd_slots`` and a full B both halves' worth, so every drawing does the
    same work."""
    return {"F": fwd_slots, "B": 2 * bwd_slots if split_backward else bwd_slots, "I": bwd_slots, "W": bwd_slots}


def check_timeline(text: str, pp: int, microbatches: int, schedule: str = "1f1b", fwd_slots: int = 1,
                   bwd_slots: int = 1, name: str = "timeline") -> Report:
    """Grade a drawing against ``schedule`` on ``pp`` ranks and ``microbatches`` microbatches.

    Raises :class:`ScheduleConfigError` for sizes beyond :mod:`pipeline_kit.limits`, before reading the grid.
    """
    try:
        check_schedule_size(pp, microbatches, 1, ops_per_microbatch_stage(schedule))
    except LimitError as exc:
        raise ScheduleConfigError(str(exc)) from None
    report = Report(name)
    reference = build_schedule(schedule, pp, microbatches)
    slots = slot_table(fwd_slots, bwd_slots, reference.splits_backward)
    try:
        rows = parse_grid(text, fwd_slots, bwd_slots, reference.splits_backward)
        missing = [r for r in range(pp) if r not in rows]
        extra = [r for r in rows if r >= pp]
        if missing or extra:
            lacking = f"; missing {[f'r{r}' for r in missing]}" if missing else ""
            unexpected = f"; unexpected {[f'r{r}' for r in extra]}" if extra else ""
            raise GridError(f"expected rows r0..r{pp - 1}{lacking}{unexpected}")
    except GridError as exc:
        for check, pts in RUBRIC.items():
            report.add(check, pts, False, f"the drawing cannot be read: {exc}")
        return report

    drawn = Schedule("drawing", pp, microbatches, 1, [[op for _, op in rows[r]] for r in range(pp)])
    start = {(r, op): slot for r in range(pp) for slot, op in rows[r]}

    try:
        check_ops(drawn)
        report.add("every op exactly once", RUBRIC["every op exactly once"], True,
                   f"all {drawn.num_ops} ops are drawn once")
        complete = True
    except ScheduleError as exc:
        report.add("every op exactly once", RUBRIC["every op exactly once"], False, str(exc))
        complete = False

    timing = (_first_timing_violation(drawn, start, slots) if complete
              else "not assessed until every op is drawn exactly once")
    report.add("dependencies respected", RUBRIC["dependencies respected"], timing is None,
               timing or "no op starts before what it depends on has finished")

    order = _first_order_difference(drawn, reference)
    report.add("schedule order", RUBRIC["schedule order"], order is None,
               order or f"every rank runs the {schedule} order")

    best = simulate(reference, fwd=slots["F"], bwd=slots["I"] + slots["W"] if reference.splits_backward else slots["B"],
                    wgrad=slots["W"]).makespan
    if complete and timing is None:
        end = max(slot + slots[op.kind] for (r, op), slot in start.items())
        idle = "" if end <= best else \
            f": {end - best:g} slot(s) of avoidable idle — start each op as soon as its inputs are there"
        report.add("shortest makespan", RUBRIC["shortest makespan"], end <= best,
                   f"the drawing ends after slot {end}; the shortest {schedule} step is {best:g} slots{idle}")
    else:
        report.add("shortest makespan", RUBRIC["shortest makespan"], False,
                   f"not assessed until every op is drawn once with its dependencies respected (the shortest "
                   f"{schedule} step is {best:g} slots)")
    return report


def _first_timing_violation(drawn: Schedule, start: dict, slots: dict[str, int]) -> str | None:
    """The first op (by slot) that starts before one of its inputs has finished, as a sentence."""
    problems = []
    try:
        for r, op, _, deps in dataflow(drawn):
            for dep in deps:
                src_rank, src = dep.rank, dep.op
                ends = start[(src_rank, src)] + slots[src.kind]
                if start[(r, op)] < ends:
                    if op.kind == "W":
                        what = f"its input-grad {src.text()} first"
                    elif dep.kind == "F" and src_rank == r and op.kind != "F":
                        what = f"its own forward {src.text()}"
                    elif dep.kind == "F":
                        what = f"the activation of {src.text()} from rank {src_rank}"
                    else:
                        what = f"the gradient of {src.text()} from rank {src_rank}"
                    message = (f"rank {r}, slot {start[(r, op)] + 1}: {op.text()} is too early — it needs {what}, "
                               f"which finishes in slot {ends}; the earliest slot for it is {ends + 1}")
                    problems.append((start[(r, op)], r, message))
    except ScheduleError as exc:
        if exc.kind == "order":  # one rank stuck on its own list, not a circular wait between ranks
            return f"this order can never run: {exc}"
        return f"these ranks wait on each other and never finish: {exc}"
    return min(problems)[2] if problems else None


def timeline_grid(result) -> str:
    """A simulated step (whole-number op times, e.g. ``fwd=1, bwd=1``) drawn as a grid: the model answer."""
    pp, end = result.schedule.pp, int(result.makespan)
    rows = [["."] * end for _ in range(pp)]
    for e in result.events:
        a, b = int(e.start), int(e.end)
        if a != e.start or b != e.end:
            raise ValueError("timeline_grid needs whole-number op times (simulate with integer costs)")
        rows[e.rank][a] = e.op.text()
        for t in range(a + 1, b):
            rows[e.rank][t] = "-"
    width = max(len(c) for row in rows for c in row)
    return "\n".join(f"r{r}: " + " ".join(c.ljust(width) for c in row).rstrip() for r, row in enumerate(rows)) + "\n"


def _first_order_difference(drawn: Schedule, reference: Schedule) -> str | None:
    for r in range(drawn.pp):
        for i, (mine, theirs) in enumerate(zip(drawn.ranks[r], reference.ranks[r])):
            if mine != theirs:
                return (f"rank {r}: op {i + 1} is {mine.text()}, but {reference.name} runs {theirs.text()} there "
                        f"(its order on rank {r}: {' '.join(op.text() for op in reference.ranks[r][:i + 2])} ...)")
        if len(drawn.ranks[r]) != len(reference.ranks[r]):
            return f"rank {r}: {len(drawn.ranks[r])} ops drawn, {reference.name} runs {len(reference.ranks[r])}"
    return None
