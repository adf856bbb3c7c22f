"""The one schedule representation every part of the kit speaks.

A pipeline schedule is nothing more than, for every rank, the ordered list of compute ops it runs.
Everything else -- when an op can start, which tensors cross the wire, how much memory is live -- is
*derived* from that order by the validator, the simulator and the runtime.  Keeping the
representation this small is what lets a timeline a student types by hand be validated, simulated,
drawn and executed exactly like a generated one.

Text form of an op: ``F3`` (forward of microbatch 3), ``B3`` (full backward), ``I3`` / ``W3``
(input-gradient / weight-gradient halves of a split backward, as in zero-bubble schedules) and
``F3c1`` for model chunk 1 of an interleaved schedule.  The chunk is omitted when the schedule has a
single chunk per rank.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..arguments import ArgumentError, Arguments, json_object, shown, wrong_type
from ..inputs import (
    Field,
    InputError,
    check_object,
    check_text_size,
    describe,
    excerpt,
    integer,
    listed,
    parse_json,
    text,
)
from ..limits import MAX_CHUNKS, MAX_MICROBATCHES, MAX_OPS, MAX_RANKS, LimitError, check_at_most

KINDS = ("F", "B", "I", "W")
KIND_NAMES = {"F": "forward", "B": "backward", "I": "input-grad backward", "W": "weight-grad backward"}

_OP_RE = re.compile(r"^([FBIW])(\d{1,9})(?:c(\d{1,9}))?$")  # linear: no nested quantifier
_RANK_LINE_RE = re.compile(r"^(?:r|rank\s*)(\d+)\s*:")


class OpParseError(ValueError):
    """A piece of text is not an op (``F3``, ``B3``, ``I3c1``, ...)."""


class Op(NamedTuple):
    """One unit of compute: ``kind`` of ``microbatch`` on the rank's model ``chunk``.

    A NamedTuple (not a dataclass) because schedules hold tens of thousands of ops and the
    benchmark wants generation, validation and simulation of 65,536 ops in well under a second.
    """

    kind: str
    microbatch: int
    chunk: int = 0

    def text(self, show_chunk: bool | None = None) -> str:
        """``F3`` / ``F3c1``; the chunk is shown when ``show_chunk`` or, by default, when non-zero."""
        if show_chunk is not True and show_chunk is not False and show_chunk is not None:  # fast: called per op
            Arguments("Op.text").boolean("show_chunk", show_chunk)
        if show_chunk is None:
            show_chunk = self.chunk != 0
        return f"{self.kind}{self.microbatch}c{self.chunk}" if show_chunk else f"{self.kind}{self.microbatch}"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.text()

    @classmethod
    def parse(cls, text: str) -> Op:
        Arguments("Op.parse", OpParseError).text("text", text)
        match = _OP_RE.match(text.strip())
        if not match:
            raise OpParseError(
                f"{excerpt(text)} is not an op: expected a kind F, B, I or W, a microbatch number and an "
                f"optional chunk, e.g. F3, B3, I3c1, W3c1"
            )
        kind, mb, chunk = match.groups()
        mb, chunk = int(mb), int(chunk) if chunk is not None else 0
        if mb >= MAX_MICROBATCHES or chunk >= MAX_CHUNKS:
            raise OpParseError(f"{text.strip()!r} is beyond the kit's limits: microbatches 0..{MAX_MICROBATCHES - 1:,} "
                               f"(MAX_MICROBATCHES), chunks 0..{MAX_CHUNKS - 1} (MAX_CHUNKS)")  # at most 23 characters
        return cls(kind, mb, chunk)


PLACEMENTS = ("looped", "v")
SCHEDULE_WORDS = "a Schedule (from build_schedule)"  # how a refusal names what a schedule argument must be


def _check_placement(placement: str, chunks: int) -> None:
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise (ArgumentError if isinstance(placement, str) else wrong_type(ArgumentError))(
            f"placement must be one of {', '.join(PLACEMENTS)}, got {shown(placement)}")
    if placement == "v" and chunks != 2:
        raise ArgumentError(f"placement 'v' puts exactly 2 chunks on each rank, got chunks={chunks}")


def _placement_args(func: str, pp, placement) -> Arguments:
    """The checks :func:`virtual_stage` and :func:`stage_owner` share: ``pp`` and ``placement``."""
    arg = Arguments(func)
    arg.integer("pp", pp, limit="MAX_RANKS")
    arg.text("placement", placement, PLACEMENTS)
    return arg


def virtual_stage(rank: int, chunk: int, pp: int, placement: str = "looped") -> int:
    """The placement rule, written once: the virtual stage that ``chunk`` of ``rank`` holds.

    ``looped`` (Megatron's interleaved mapping, the default): chunk ``c`` of rank ``r`` is stage
    ``c * pp + r``, so a microbatch goes round the ranks ``v`` times.  ``v`` (ZB-V, DualPipe-V):
    two chunks per rank, chunk 0 is stage ``r`` and chunk 1 is stage ``2 pp - 1 - r``, so the
    pipeline runs down the ranks and back up and rank 0 holds both the first and the last stage.
    Either way a rank's local chunk index is the position of the stage among its stages, in
    increasing stage order.
    """
    arg = _placement_args("virtual_stage", pp, placement)
    arg.integer("rank", rank, 0, pp - 1, why=f"a rank below pp={pp}")
    arg.integer("chunk", chunk, 0, 1 if placement == "v" else None, limit="MAX_CHUNKS",
                why="placement 'v' has chunks 0 and 1" if placement == "v" else "")
    return _virtual_stage(rank, chunk, pp, placement)


def _virtual_stage(rank: int, chunk: int, pp: int, placement: str) -> int:
    if placement == "v":
        return rank if chunk == 0 else 2 * pp - 1 - rank
    return chunk * pp + rank


def stage_owner(stage: int, pp: int, placement: str = "looped") -> tuple[int, int]:
    """Inverse of :func:`virtual_stage`: ``(rank, chunk)`` that holds virtual ``stage``."""
    arg = _placement_args("stage_owner", pp, placement)
    arg.integer("stage", stage, 0, 2 * pp - 1 if placement == "v" else None,
                why=f"placement 'v' has 2 pp = {2 * pp} stages" if placement == "v" else "")
    return _stage_owner(stage, pp, placement)


def _stage_owner(stage: int, pp: int, placement: str) -> tuple[int, int]:
    if placement == "v":
        return (stage, 0) if stage < pp else (2 * pp - 1 - stage, 1)
    return stage % pp, stage // pp


@dataclass
class Schedule:
    """Per-rank ordered ops: ``ranks[r]`` is what rank ``r`` runs, first to last.

    ``chunks`` is the number of model chunks per rank (the virtual pipeline size ``v``); the
    pipeline has ``pp * chunks`` virtual stages.  ``placement`` says which stage each chunk is
    (:func:`virtual_stage`): ``"looped"`` (default) or ``"v"``; ask :meth:`stage_of` and
    :meth:`rank_of` rather than computing it.
    """

    name: str
    pp: int
    microbatches: int
    chunks: int = 1
    ranks: list[list[Op]] = field(default_factory=list)
    placement: str = "looped"

    def __post_init__(self) -> None:
        arg = Arguments(None)  # the short form: "Schedule pp must be a positive integer, got 0"
        arg.text("Schedule name", self.name)
        for name in ("pp", "microbatches", "chunks"):
            arg.integer(f"Schedule {name}", getattr(self, name))
        check_at_most(f"pp={shown(self.pp)}", self.pp, "MAX_RANKS", "ranks")
        check_at_most(f"chunks={shown(self.chunks)}", self.chunks, "MAX_CHUNKS", "chunks per rank")
        check_at_most(f"microbatches={shown(self.microbatches)}", self.microbatches, "MAX_MICROBATCHES",
                      "microbatches")
        cells = self.pp * self.chunks * self.microbatches  # the validator's dependency table has one cell each
        check_at_most(f"pp x chunks x microbatches = {cells:,}", cells, "MAX_OPS", "(stage, microbatch) pairs")
        if self.ranks is None or (isinstance(self.ranks, (list, tuple)) and not self.ranks):
            self.ranks = [[] for _ in range(self.pp)]
        ranks = self.ranks
        if not isinstance(ranks, (list, tuple)) or not all(isinstance(ops, (list, tuple)) for ops in ranks):
            arg.refuse("Schedule ranks", "a list with one list of ops per rank", ranks, wrong=True)
        if len(ranks) != self.pp:
            raise ArgumentError(f"Schedule has pp={self.pp} but {len(ranks)} rank lists")
        _check_placement(self.placement, self.chunks)
        self.ranks = [list(ops) if all(type(op) is Op for op in ops) else [_as_op(op, r, i) for i, op in enumerate(ops)]
                      for r, ops in enumerate(ranks)]

    # -- derived facts ---------------------------------------------------------------------
    @property
    def stages(self) -> int:
        """Number of virtual stages, ``pp * chunks``."""
        return self.pp * self.chunks

    @property
    def num_ops(self) -> int:
        return sum(len(ops) for ops in self.ranks)

    @property
    def forward_only(self) -> bool:
        """True when no rank runs a backward op (an inference schedule)."""
        return all(op.kind == "F" for ops in self.ranks for op in ops)

    @property
    def splits_backward(self) -> bool:
        """True when backward is split into input-grad (I) and weight-grad (W) ops."""
        return any(op.kind in "IW" for ops in self.ranks for op in ops)

    def stage_of(self, rank: int, chunk: int) -> int:
        """The virtual stage that model ``chunk`` of ``rank`` holds (the schedule's placement)."""
        arg = Arguments("Schedule.stage_of")
        arg.integer("rank", rank, 0, self.pp - 1)
        arg.integer("chunk", chunk, 0, self.chunks - 1)
        return _virtual_stage(rank, chunk, self.pp, self.placement)

    def rank_of(self, stage: int) -> int:
        """The rank that holds virtual ``stage``."""
        return self._owner(stage, "Schedule.rank_of")[0]

    def chunk_of(self, stage: int) -> int:
        """The local chunk index of virtual ``stage`` on the rank that holds it."""
        return self._owner(stage, "Schedule.chunk_of")[1]

    def _owner(self, stage: int, func: str) -> tuple[int, int]:
        Arguments(func).integer("stage", stage, 0, self.stages - 1)
        return _stage_owner(stage, self.pp, self.placement)

    def stages_of(self, rank: int) -> list[int]:
        """The virtual stages of ``rank``, indexed by local chunk (a lookup table for hot loops)."""
        Arguments("Schedule.stages_of").integer("rank", rank, 0, self.pp - 1)
        return [_virtual_stage(rank, c, self.pp, self.placement) for c in range(self.chunks)]

    def op_text(self, op: Op) -> str:
        """An op as this schedule prints it: the chunk is shown only when ``chunks > 1``."""
        Arguments("Schedule.op_text").instance("op", op, Op, "an Op")
        return op.text(show_chunk=self.chunks > 1)

    # -- text form -------------------------------------------------------------------------
    def to_text(self) -> str:
        """A header line and one ``rK: op op ...`` line per rank; :meth:`from_text` reads it back."""
        lines = [f"# schedule={self.name} pp={self.pp} microbatches={self.microbatches} chunks={self.chunks}"
                 + ("" if self.placement == "looped" else f" placement={self.placement}")]
        for r, ops in enumerate(self.ranks):
            lines.append(f"r{r}: " + " ".join(op.text(self.chunks > 1) for op in ops))
        return "\n".join(lines) + "\n"

    def to_grid(self, width: int | None = None) -> str:
        """The per-rank orders as an aligned text grid (column k = the k-th op of each rank).

        ``width``: the most characters a line may take (a book column holds 76).  A wider grid is cut
        into blocks of columns of about equal size, one under the other, separated by a blank line and
        each headed ``ops 1-10 of 32``; a block holds at least one column, however narrow ``width`` is.
        """
        width = Arguments("Schedule.to_grid").integer("width", width, none=True)
        cells = [[op.text(self.chunks > 1) for op in ops] for ops in self.ranks]
        cell = max((len(c) for row in cells for c in row), default=1)
        label = len(f"r{self.pp - 1}") + 2
        total = max((len(row) for row in cells), default=0)
        fits = total if width is None else max(1, (width - label + 1) // (cell + 1))  # columns a line holds
        blocks = -(-total // fits) if total > fits else 1
        out = []
        for b in range(blocks):  # the blocks as even as can be
            first, last = b * total // blocks, (b + 1) * total // blocks
            lines = [f"ops {first + 1}-{last} of {total}" if last > first + 1 else f"op {last} of {total}"] \
                if blocks > 1 else []
            for r, row in enumerate(cells):
                lines.append(f"r{r}:".ljust(label) + " ".join(c.ljust(cell) for c in row[first:last]).rstrip())
            out.append("\n".join(lines))
        return "\n\n".join(out) + "\n"

    @classmethod
    def from_text(cls, text: str, name: str | None = None) -> Schedule:
        """Parse the text form.

        Lines are ``rK: op op ...`` (``.`` marks an idle slot and is skipped, so a hand-drawn
        timeline grid is also a schedule).  An optional header ``# schedule=NAME pp=P
        microbatches=M chunks=V`` (with ``placement=v`` for a V-shaped placement) fixes the sizes;
        without it they are inferred (pp from the rank rows, microbatches and chunks from the
        largest numbers used).  Other ``#`` lines and blank lines are ignored.  Errors name the line and
        the offending token.
        """
        arg = Arguments("Schedule.from_text", ScheduleTextError)
        arg.text("text", text)
        arg.text("name", name, none=True)
        try:
            check_text_size(text, "schedule text")
        except (InputError, LimitError) as exc:
            raise ScheduleTextError(str(exc)) from None
        header: dict[str, str] = {}
        rows: dict[int, list[Op]] = {}
        count = 0
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                fields = _header_fields(line)
                if "pp" in fields or "schedule" in fields:
                    header.update(fields)
                continue
            match = _RANK_LINE_RE.match(line)
            if not match:
                raise ScheduleTextError(
                    f"line {lineno}: expected 'rK: op op ...' (e.g. 'r0: F0 F1 B0'), got {excerpt(line)}"
                )
            digits = match.group(1)
            if len(digits) > 6 or int(digits) >= MAX_RANKS:
                rank = digits if len(digits) <= 20 else excerpt(digits, limit=20)
                raise ScheduleTextError(f"line {lineno}: rank r{rank} is beyond the limit of "
                                 f"{MAX_RANKS:,} ranks r0..r{MAX_RANKS - 1} (MAX_RANKS)")
            rank = int(digits)
            if rank in rows:
                raise ScheduleTextError(f"line {lineno}: rank r{rank} is listed twice")
            ops = []
            for col, token in enumerate(_TOKEN_RE.finditer(line, match.end()), start=1):
                token = token.group()
                if token == ".":
                    continue
                try:
                    ops.append(Op.parse(token))
                except OpParseError as exc:
                    raise ScheduleTextError(f"line {lineno}, item {col}: {exc}") from None
                count += 1
                if count > MAX_OPS:
                    raise ScheduleTextError(f"line {lineno}: the schedule has more than the limit of {MAX_OPS:,} ops "
                                            f"(MAX_OPS)")
            rows[rank] = ops
        if not rows:
            raise ScheduleTextError("no rank lines found: expected lines like 'r0: F0 F1 B0 B1'")
        pp = max(rows) + 1
        missing = [r for r in range(pp) if r not in rows]
        if missing:
            raise ScheduleTextError(f"ranks [{listed(missing)}] have no line; ranks must be r0..r{pp - 1}")
        all_ops = [op for ops in rows.values() for op in ops]
        declared_pp = _header_int(header, "pp", pp)
        microbatches = _header_int(header, "microbatches", max((op.microbatch for op in all_ops), default=0) + 1)
        chunks = _header_int(header, "chunks", max((op.chunk for op in all_ops), default=0) + 1)
        if declared_pp != pp:
            raise ScheduleTextError(f"header says pp={declared_pp} but there are {pp} rank lines")
        placement = header.get("placement", "looped")
        try:
            _check_placement(placement, chunks)
            return cls(name or header.get("schedule", "custom"), pp, microbatches, chunks, [rows[r] for r in range(pp)],
                       placement)
        except ValueError as exc:  # a placement it cannot be, or sizes beyond the limits
            raise ScheduleTextError(f"header: {exc}") from None

    # -- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-ready; ``"placement"`` appears only when it is not the default ``"looped"``."""
        out = {
            "schedule": self.name,
            "pp": self.pp,
            "microbatches": self.microbatches,
            "chunks": self.chunks,
            "ranks": [[op.text(self.chunks > 1) for op in ops] for ops in self.ranks],
        }
        if self.placement != "looped":
            out["placement"] = self.placement
        return out

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict, where: str = "schedule JSON") -> Schedule:
        """A schedule from its JSON form, checked against :data:`SCHEDULE_JSON` field by field."""
        Arguments("Schedule.from_dict", ScheduleTextError).text("where", where)
        json_object(data, where, SCHEDULE_JSON, ScheduleTextError)
        try:
            fields = check_object(data, SCHEDULE_JSON, where)
        except (InputError, LimitError) as exc:
            raise ScheduleTextError(str(exc)) from None
        try:
            return cls(fields["schedule"], fields["pp"], fields["microbatches"], fields["chunks"], fields["ranks"],
                       fields["placement"])
        except ValueError as exc:  # e.g. pp=2 with three rank lists, placement v with 3 chunks, sizes past a limit
            raise ScheduleTextError(f"{where}: {exc}") from None

    @classmethod
    def from_json(cls, text: str, where: str = "schedule JSON") -> Schedule:
        arg = Arguments("Schedule.from_json", ScheduleTextError)
        arg.text("text", text)
        arg.text("where", where)
        try:
            data = parse_json(text, where)
        except (InputError, LimitError) as exc:
            raise ScheduleTextError(str(exc)) from None
        return cls.from_dict(data, where)


def _op_lists(value, where: str) -> list[list[Op]]:
    """The ``ranks`` field: an array per rank of op strings, at most ``MAX_OPS`` in all, each parsed."""
    if not isinstance(value, list) or not all(isinstance(ops, list) for ops in value):
        raise InputError(f"{where}: expected an array with one array of op strings (like \"F3\") per rank, "
                         f"got {describe(value)}")
    check_at_most(f"{where}: {sum(map(len, value)):,} ops", sum(map(len, value)), "MAX_OPS", "ops")
    out = []
    for r, ops in enumerate(value):
        parsed = []
        for i, token in enumerate(ops):
            if not isinstance(token, str):
                raise InputError(f"{where}[{r}][{i}]: expected an op string like \"F3\", got {describe(token)}")
            try:
                parsed.append(Op.parse(token))
            except OpParseError as exc:
                raise InputError(f"{where}[{r}][{i}]: {exc}") from None
        out.append(parsed)
    return out


# The schedule's JSON form, one line a field: what Schedule.from_dict accepts (and to_dict writes).
SCHEDULE_JSON = {
    "schedule": Field(text(), default="custom"),
    "pp": Field(integer(1, "MAX_RANKS"), required=True),
    "microbatches": Field(integer(1, "MAX_MICROBATCHES"), required=True),
    "chunks": Field(integer(1, "MAX_CHUNKS"), default=1),
    "placement": Field(text(*PLACEMENTS), default="looped"),
    "ranks": Field(_op_lists, required=True),
}

_TOKEN_RE = re.compile(r"\S+")


def _header_fields(line: str) -> dict[str, str]:
    """``key=value`` words of a ``#`` line (split on whitespace: linear time, whatever the line holds)."""
    fields = {}
    for word in line.lstrip("#").split():
        key, eq, value = word.partition("=")
        if eq and key and value:
            fields[key] = value
    return fields


def _header_int(header: dict[str, str], key: str, default: int) -> int:
    value = header.get(key)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()) or len(value) > 9 or int(value) < 1:
        raise ScheduleTextError(f"header: {key}={excerpt(value)} is not a positive integer of at most 9 digits")
    return int(value)


class ScheduleTextError(ValueError):
    """The text or JSON form of a schedule cannot be read (not a validity problem)."""


def need_schedule(func: str, schedule, name: str = "schedule", error: type[Exception] = ArgumentError) -> Schedule:
    """The check of every public function that takes a schedule: a :class:`Schedule`, or a refusal naming ``func``."""
    return Arguments(func, error).instance(name, schedule, Schedule, SCHEDULE_WORDS)


def _as_op(op, rank: int, index: int) -> Op:
    """An item of a rank's list as an :class:`Op`: an Op, or a ``(kind, microbatch[, chunk])`` tuple."""
    if type(op) is Op:
        return op
    if not isinstance(op, (tuple, list)) or not 2 <= len(op) <= 3:
        Arguments(None).refuse(f"Schedule ranks[{rank}][{index}]", "an Op or a (kind, microbatch, chunk) tuple", op,
                               wrong=True)
    return Op(*op)


def ops_from_strings(tokens: Iterable[str]) -> list[Op]:
    """``["F0", "B0"]`` -> ``[Op('F', 0), Op('B', 0)]``; a convenience for tests and notebooks."""
    return [Op.parse(t) for t in tokens]
