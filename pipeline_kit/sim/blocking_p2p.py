"""A torch-free model of point-to-point calls, to find the orders that hang (M053).

Why a model: whether a set of per-rank send/receive orders can deadlock depends only on who
waits for whom, not on tensors, so it can be decided in microseconds and explained exactly --
"rank 0 is blocked in its send of F1 to rank 1, which is blocked in its send of B0 to rank 0".
The runtime (:mod:`pipeline_kit.runtime.p2p`) avoids those waits by construction; this model lets
you write the orders that do not, and see why.

A *program* is one rank's list of items, in order:

* ``"F3"`` / ``"B3"`` -- a compute op (instant).  A message carries the name of the op that
  produces it and of the op that consumes it: ``F3``'s activation goes forward and is used by
  ``F3`` on the next stage; ``B3``'s input gradient goes backward and is used by ``B3`` on the
  previous stage.  So a compute op must come after the receive of its own name (if the program
  receives it at all), and a send of a name must come after the compute op of that name.
* a *call*: one ``(kind, peer, name)`` tuple or a list of them, posted together.  ``kind`` is

  - ``"send"`` -- blocking with rendezvous semantics (a message too large to buffer): it returns
    only once the peer has posted the matching receive;
  - ``"recv"`` -- blocking: it returns once the message has arrived;
  - ``"isend"`` -- posted and never waited for (the kit's runtime: a helper thread waits).

  A call returns when all its ``send`` / ``recv`` parts have completed.  A list of several parts
  is Megatron's batched ``_communicate`` (``torch.distributed.batch_isend_irecv`` followed by a
  wait on all requests): ``[("send", 1, "F3"), ("recv", 1, "B1")]`` is ``send_forward_recv_backward``.

Messages between two ranks pair up in posting order, per direction (an untagged channel): the
k-th send from rank a to rank b meets the k-th receive that rank b posts from rank a.  If their
names differ the data lands in the wrong buffer -- the model reports that as an ordering error.
With ``tagged=True`` a receive takes only the message of its own name, as the kit's runtime does
with its sequence-number tags: a missing message is then waited for, not replaced by the next one.

:func:`run_blocking` runs every rank until each one has finished or is blocked, and reports the
ranks still blocked, the circular wait among them, message counts per peer (as the runtime's
timeout message prints them), and every error.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..arguments import shown
from ..inputs import excerpt
from ..schedules.messages import op_messages
from ..schedules.ops import Schedule

COMM_KINDS = ("send", "recv", "isend")


class ProgramError(ValueError):
    """A program item is malformed (the message names the rank and the item)."""


@dataclass(frozen=True)
class Comm:
    """One part of a call: ``kind`` (send / recv / isend) of message ``name`` with ``peer``."""

    kind: str
    peer: int
    name: str

    def text(self) -> str:
        return f"{self.kind} {self.name} {'from' if self.kind == 'recv' else 'to'} rank {self.peer}"


@dataclass(frozen=True)
class Wait:
    """Rank ``rank`` is blocked in ``comm``, waiting for ``comm.peer``."""

    rank: int
    comm: Comm

    @property
    def peer(self) -> int:
        return self.comm.peer

    def text(self) -> str:
        return f"rank {self.rank} is blocked in {self.comm.text()}"


@dataclass
class BlockingResult:
    """What happened when every rank ran its program as far as it could."""

    finished: list[bool]
    blocked: dict[int, Wait]  # rank -> the first part of its current call that has not completed
    cycle: list[Wait]  # a circular wait among blocked ranks (each waits for the next), or []
    errors: list[str]
    sent: list[dict[int, int]]  # per rank: messages sent to each peer (an isend counts when posted)
    received: list[dict[int, int]]  # per rank: messages received from each peer
    delivered: list[tuple[int, int, str]] = field(default_factory=list)  # (src, dst, name), in order

    @property
    def completed(self) -> bool:
        """Every rank finished, every message was received by the call meant for it."""
        return all(self.finished) and not self.errors

    @property
    def deadlocked(self) -> bool:
        return bool(self.blocked) and not self.errors

    def report(self) -> str:
        """A few lines for a person: what went wrong, or that it completed."""
        if self.completed:
            return f"completed: {len(self.delivered)} messages delivered, no rank blocked"
        lines = list(self.errors)
        if self.cycle:
            chain = " -> ".join(w.text() for w in self.cycle)
            lines.append(f"circular wait: {chain} -> back to rank {self.cycle[0].rank}")
        for r, w in sorted(self.blocked.items()):
            if any(c.rank == r for c in self.cycle):
                continue
            why = " (which has finished its program)" if self.finished[w.peer] else ""
            lines.append(f"{w.text()}{why}")
        return "\n".join(lines)


@dataclass
class _Part:
    rank: int
    comm: Comm
    done: bool = False


def _normalise(programs) -> list[list]:
    """Each item becomes ("compute", name) or ("call", [Comm, ...]); malformed items raise ProgramError."""
    try:
        programs = [list(p) for p in programs]
    except TypeError:
        raise ProgramError("programs must be a list with one list of items per rank") from None
    n = len(programs)
    out = []
    for r, prog in enumerate(programs):
        items = []
        for i, item in enumerate(prog):
            if isinstance(item, str):
                items.append(("compute", item))
                continue
            if isinstance(item, tuple) and item and isinstance(item[0], str):
                parts = [item]
            elif isinstance(item, (list, tuple)) and item:
                parts = list(item)
            else:
                _refuse_item(r, i, item, "expected a compute op like 'F3' or a call: (kind, peer, name) or a list "
                             "of them")
            comms = []
            for part in parts:
                if not (isinstance(part, tuple) and len(part) == 3):
                    _refuse_item(r, i, item, f"each part of a call is a tuple (kind, peer, name), got {shown(part)}")
                kind, peer, name = part
                if not isinstance(kind, str) or kind not in COMM_KINDS:
                    _refuse_item(r, i, item, f"kind must be one of {', '.join(COMM_KINDS)}, got {shown(kind)}")
                if not isinstance(peer, int) or isinstance(peer, bool) or not 0 <= peer < n or peer == r:
                    _refuse_item(r, i, item, f"peer must be another rank in 0..{n - 1}, got {shown(peer)}")
                if not isinstance(name, str):
                    _refuse_item(r, i, item, f"the message name must be a string like 'F3', got {shown(name)}")
                comms.append(Comm(kind, peer, name))
            items.append(("call", comms))
        out.append(items)
    return out


def run_blocking(programs, tagged: bool = False) -> BlockingResult:
    """Run every rank's program under the semantics of the module docstring; never hangs itself."""
    progs = _normalise(programs)
    n = len(progs)
    computes = [{name for kind, name in p if kind == "compute"} for p in progs]
    receives = [{c.name for kind, x in p if kind == "call" for c in x if c.kind == "recv"} for p in progs]
    pos = [0] * n
    current: list[list[_Part] | None] = [None] * n
    computed: list[set] = [set() for _ in range(n)]
    got: list[set] = [set() for _ in range(n)]
    sends: dict[tuple[int, int], deque] = {}
    recvs: dict[tuple[int, int], deque] = {}
    sent: list[dict[int, int]] = [{} for _ in range(n)]
    received: list[dict[int, int]] = [{} for _ in range(n)]
    delivered: list[tuple[int, int, str]] = []
    errors: list[str] = []

    def finished(r: int) -> bool:
        return pos[r] >= len(progs[r]) and current[r] is None

    progress = True
    while progress and not errors:
        progress = False
        for r in range(n):  # run each rank until it blocks, finishes or errs
            while not errors and current[r] is None and pos[r] < len(progs[r]):
                kind, x = progs[r][pos[r]]
                if kind == "compute":
                    if x in receives[r] and x not in got[r]:
                        errors.append(f"rank {r} computes {x} before it has received {x}'s input (a receive of {x} "
                                      "comes later in its program)")
                        break
                    computed[r].add(x)
                    pos[r] += 1
                    progress = True
                    continue
                waiting = []
                for c in x:
                    if c.kind != "recv" and c.name in computes[r] and c.name not in computed[r]:
                        errors.append(f"rank {r} posts {c.text()} before computing {c.name}, which produces it")
                        break
                    part = _Part(r, c)
                    if c.kind == "recv":
                        recvs.setdefault((c.peer, r), deque()).append(part)
                        waiting.append(part)
                    else:
                        sends.setdefault((r, c.peer), deque()).append(part)
                        if c.kind == "isend":
                            sent[r][c.peer] = sent[r].get(c.peer, 0) + 1
                        else:
                            waiting.append(part)
                if errors:
                    break
                current[r] = waiting
                progress = True
                if not waiting:
                    current[r] = None
                    pos[r] += 1
                break  # let the messages match before this rank goes on
        for (src, dst), queue in sends.items():  # pair messages in posting order, per direction
            other = recvs.get((src, dst))
            while queue and other and not errors:
                if tagged:  # a receive takes only its own message, wherever it is in the queue
                    pair = next(((s, v) for v in other for s in queue if s.comm.name == v.comm.name), None)
                    if pair is None:
                        break
                    s, v = pair
                    queue.remove(s)
                    other.remove(v)
                else:
                    s, v = queue.popleft(), other.popleft()
                if s.comm.name != v.comm.name:
                    errors.append(f"ordering error: rank {src}'s {s.comm.text()} meets rank {dst}'s "
                                  f"{v.comm.text()}: the data of {s.comm.name} lands in the buffer for {v.comm.name}")
                    break
                s.done = v.done = True
                if s.comm.kind == "send":
                    sent[src][dst] = sent[src].get(dst, 0) + 1
                received[dst][src] = received[dst].get(src, 0) + 1
                got[dst].add(v.comm.name)
                delivered.append((src, dst, s.comm.name))
                progress = True
        for r in range(n):
            if current[r] is not None and all(p.done for p in current[r]):
                current[r] = None
                pos[r] += 1
                progress = True

    done = [finished(r) for r in range(n)]
    if not errors and all(done):
        for (src, dst), queue in sorted(sends.items()):
            for s in queue:
                errors.append(f"rank {src}'s {s.comm.text()} is never received: rank {dst} posts no receive for it")
    blocked = {}
    for r in range(n):
        if current[r] is not None:
            blocked[r] = Wait(r, next(p.comm for p in current[r] if not p.done))
    cycle = [] if errors else _find_cycle(blocked, current)
    return BlockingResult(done, blocked, cycle, errors, sent, received, delivered)


def _find_cycle(blocked: dict[int, Wait], current) -> list[Wait]:
    """A cycle in "rank waits for peer" among blocked ranks, each edge labelled by the part it waits in."""
    edges = {r: [p.comm for p in current[r] if not p.done] for r in blocked}

    def walk(r: int, path: list[Wait], on_path: dict[int, int]) -> list[Wait] | None:
        if r in on_path:
            return path[on_path[r]:]
        if r not in edges:
            return None
        on_path[r] = len(path)
        for comm in edges[r]:
            found = walk(comm.peer, [*path, Wait(r, comm)], on_path)
            if found:
                return found
        del on_path[r]
        return None

    for start in sorted(edges):
        found = walk(start, [], {})
        if found:
            return found
    return []


def _refuse_item(rank: int, index: int, item, text: str):
    raise ProgramError(f"rank {rank}, item {index} ({shown(item)}): {text}")


def _check_plain(schedule: Schedule) -> None:
    if schedule.chunks != 1 or schedule.splits_backward:
        raise ValueError("the P2P programs here cover non-interleaved schedules of F and B ops "
                         f"(got {excerpt(schedule.name)} with {schedule.chunks} chunk(s))")


def runtime_program(schedule: Schedule, rank: int, send: str = "isend") -> list:
    """Rank ``rank``'s program as the kit's runtime runs it: for every op, receive its input (blocking),
    compute, then send its output with ``send`` ("isend": never blocks, as in the runtime; "send":
    the naive blocking version)."""
    _check_plain(schedule)
    if send not in ("send", "isend"):
        raise ValueError(f"send must be 'send' or 'isend', got {shown(send)}")
    prog: list = []
    for op, (received, sent) in zip(schedule.ranks[rank], op_messages(schedule, rank)):
        name = op.text()  # a message is named after the op that makes it, which is also the op that uses it
        if received:
            prog.append(("recv", schedule.rank_of(received.src_stage), name))
        prog.append(name)
        if sent:
            prog.append((send, schedule.rank_of(sent.dst_stage), name))
    return prog


def format_program(program) -> str:
    """One line: compute ops as they are, calls as ``send F3->2`` / ``recv B1<-2``, batches in brackets."""
    out = []
    for item in program:
        if isinstance(item, str):
            out.append(item)
            continue
        parts = [item] if isinstance(item, tuple) and item and isinstance(item[0], str) else list(item)
        texts = [f"{k} {name}{'<-' if k == 'recv' else '->'}{peer}" for k, peer, name in parts]
        out.append(texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]")
    return " | ".join(out)
