"""What each op receives and sends: the one message rule, derived from a schedule and its placement.

The rule is the data flow of backpropagation through virtual stages ``0 .. S-1``:

* ``F`` on stage ``s`` receives the activation from stage ``s - 1`` (the first stage takes the
  tokens instead) and sends its output to stage ``s + 1`` (the last stage computes the loss);
* ``B`` / ``I`` on stage ``s`` receive the gradient of their output from stage ``s + 1`` (the last
  stage starts from its own loss) and send the gradient of their input to stage ``s - 1``;
* ``W`` neither receives nor sends.

Which *rank* a message goes to is the schedule's placement (:meth:`Schedule.rank_of`).  A message
between two stages of one rank -- every message when ``pp = 1``, the turn of a V placement -- is
*local*: it never crosses the wire.  The executor, the runtime's P2P plan, the simulator's
transfers and the blocking-P2P model all ask this module, so they cannot disagree.  No torch.
"""

from __future__ import annotations

from typing import NamedTuple

from ..arguments import Arguments, shown
from .ops import KINDS, PLACEMENTS, Schedule, _stage_owner, need_schedule
from .validate import bad_op_of


class Message(NamedTuple):
    """One tensor crossing a stage boundary: an activation going forward or a gradient going back."""

    direction: str  # "forward" | "backward"
    microbatch: int
    src_stage: int
    dst_stage: int

    @property
    def boundary(self) -> int:
        """The boundary it crosses, between stages ``boundary`` and ``boundary + 1``."""
        return min(self.src_stage, self.dst_stage)

    def what(self, pp: int, placement: str = "looped") -> str:
        """``forward activation of microbatch 3, chunk 1 (stage 6)``: the receiving end, in words."""
        arg = Arguments("Message.what")
        arg.integer("pp", pp, limit="MAX_RANKS")
        arg.text("placement", placement, PLACEMENTS)
        kind = "forward activation" if self.direction == "forward" else "backward gradient"
        chunk = _stage_owner(self.dst_stage, pp, placement)[1]
        return f"{kind} of microbatch {self.microbatch}, chunk {chunk} (stage {self.dst_stage})"


def _op_args(func: str, kind: str, microbatch: int, stage: int, last: int) -> None:
    """The checks :func:`receives` and :func:`sends` share."""
    arg = Arguments(func)
    arg.text("kind", kind, KINDS)
    arg.integer("microbatch", microbatch, 0, limit="MAX_MICROBATCHES")
    arg.integer("last", last, 0)
    arg.integer("stage", stage, 0, last, why=f"a stage of 0..last={shown(last)}")


def receives(kind: str, microbatch: int, stage: int, last: int) -> Message | None:
    """The message an op of ``kind`` on ``stage`` (of stages ``0..last``) waits for, if any."""
    _op_args("receives", kind, microbatch, stage, last)
    return _receives(kind, microbatch, stage, last)


def _receives(kind: str, microbatch: int, stage: int, last: int) -> Message | None:
    if kind == "F":
        return Message("forward", microbatch, stage - 1, stage) if stage > 0 else None
    if kind in ("B", "I"):
        return Message("backward", microbatch, stage + 1, stage) if stage < last else None
    return None


def sends(kind: str, microbatch: int, stage: int, last: int) -> Message | None:
    """The message an op of ``kind`` on ``stage`` (of stages ``0..last``) sends when it is done, if any."""
    _op_args("sends", kind, microbatch, stage, last)
    return _sends(kind, microbatch, stage, last)


def _sends(kind: str, microbatch: int, stage: int, last: int) -> Message | None:
    if kind == "F":
        return Message("forward", microbatch, stage, stage + 1) if stage < last else None
    if kind in ("B", "I"):
        return Message("backward", microbatch, stage, stage - 1) if stage > 0 else None
    return None


def op_messages(schedule: Schedule, rank: int) -> list[tuple[Message | None, Message | None]]:
    """For each op of ``rank``, in its order: ``(message it receives, message it sends)``."""
    need_schedule("op_messages", schedule)
    Arguments("op_messages").integer("rank", rank, 0, schedule.pp - 1)
    return _op_messages(schedule, rank)


def _op_messages(schedule: Schedule, rank: int) -> list[tuple[Message | None, Message | None]]:
    last = schedule.stages - 1
    stage_of_chunk = schedule.stages_of(rank)
    try:
        return [(_receives(kind, m, stage_of_chunk[c], last), _sends(kind, m, stage_of_chunk[c], last))
                for kind, m, c in schedule.ranks[rank]]
    except (IndexError, TypeError, ValueError):  # an op that names no chunk of the rank, or no op at all
        raise bad_op_of(schedule, rank) from None


def message_plan(schedule: Schedule) -> dict[tuple[int, int], list[Message]]:
    """All messages of one step, per channel ``(src rank, dst rank)``, in the order the sender sends them.

    Local messages (both stages on one rank) are listed too, under ``(rank, rank)``.
    """
    need_schedule("message_plan", schedule)
    plan: dict[tuple[int, int], list[Message]] = {}
    pp, placement = schedule.pp, schedule.placement
    for r in range(pp):
        for _, out in _op_messages(schedule, r):
            if out is not None:
                plan.setdefault((r, _stage_owner(out.dst_stage, pp, placement)[0]), []).append(out)
    return plan
