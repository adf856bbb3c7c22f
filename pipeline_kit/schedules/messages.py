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

from .ops import Schedule, stage_owner


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
        kind = "forward activation" if self.direction == "forward" else "backward gradient"
        chunk = stage_owner(self.dst_stage, pp, placement)[1]
        return f"{kind} of microbatch {self.microbatch}, chunk {chunk} (stage {self.dst_stage})"


def receives(kind: str, microbatch: int, stage: int, last: int) -> Message | None:
    """The message an op of ``kind`` on ``stage`` (of stages ``0..last``) waits for, if any."""
    if kind == "F":
        return Message("forward", microbatch, stage - 1, stage) if stage > 0 else None
    if kind in ("B", "I"):
        return Message("backward", microbatch, stage + 1, stage) if stage < last else None
    return None


def sends(kind: str, microbatch: int, stage: int, last: int) -> Message | None:
    """The message an op of ``kind`` on ``stage`` (of stages ``0..last``) sends when it is done, if any."""
    if kind == "F":
        return Message("forward", microbatch, stage, stage + 1) if stage < last else None
    if kind in ("B", "I"):
        return Message("backward", microbatch, stage, stage - 1) if stage > 0 else None
    return None


def op_messages(schedule: Schedule, rank: int) -> list[tuple[Message | None, Message | None]]:
    """For each op of ``rank``, in its order: ``(message it receives, message it sends)``."""
    last = schedule.stages - 1
    stage_of_chunk = schedule.stages_of(rank)
    return [(receives(kind, m, stage_of_chunk[c], last), sends(kind, m, stage_of_chunk[c], last))
            for kind, m, c in schedule.ranks[rank]]


def message_plan(schedule: Schedule) -> dict[tuple[int, int], list[Message]]:
    """All messages of one step, per channel ``(src rank, dst rank)``, in the order the sender sends them.

    Local messages (both stages on one rank) are listed too, under ``(rank, rank)``.
    """
    plan: dict[tuple[int, int], list[Message]] = {}
    for r in range(schedule.pp):
        for _, out in op_messages(schedule, r):
            if out is not None:
                plan.setdefault((r, schedule.rank_of(out.dst_stage)), []).append(out)
    return plan
