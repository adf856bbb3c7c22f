"""Deliberate faults (``--inject``) that show what a broken pipeline looks like (M053).

``skip-send:rank=R,mb=K``  rank R silently skips its first send of microbatch K: the neighbour
                           waits for a message that never comes -- the classic P2P hang.
``crash:rank=R,mb=K``      rank R raises an exception in the forward of microbatch K: the run must
                           end on every rank instead of leaving the others waiting.

:func:`inject` wraps the rank's compute or P2P object so that it commits the fault; nothing else
in the runtime knows about faults.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

KINDS = ("skip-send", "crash")


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    microbatch: int

    @classmethod
    def parse(cls, text: str) -> Fault:
        match = re.fullmatch(r"([a-z-]+):rank=(\d{1,9}),mb=(\d{1,9})", text.strip())
        if not match or match.group(1) not in KINDS:
            raise FaultSpecError(f"expected FAULT as skip-send:rank=R,mb=K or crash:rank=R,mb=K, got {text!r}")
        return cls(match.group(1), int(match.group(2)), int(match.group(3)))


class InjectedCrash(RuntimeError):
    """Raised on purpose by ``--inject crash:...``."""


def inject(fault: Fault | None, rank: int, compute, p2p):
    """``(compute, p2p)`` for ``rank``, wrapped so that they commit ``fault`` if it is this rank's.

    The faults live here, around the two objects the executor drives, so its loop and the P2P
    layer stay free of them.
    """
    if fault is None or fault.rank != rank:
        return compute, p2p
    if fault.kind == "crash":
        return _CrashingCompute(compute, fault), p2p
    return compute, _SkippingP2P(p2p, fault)


class _CrashingCompute:
    """Raises :class:`InjectedCrash` when asked for the forward of the fault's microbatch."""

    def __init__(self, compute, fault: Fault):
        self._compute, self._fault = compute, fault

    def forward(self, chunk: int, mb: int, x):
        if mb == self._fault.microbatch:
            raise InjectedCrash(f"rank {self._fault.rank}: injected crash in the forward of microbatch {mb} (--inject)")
        return self._compute.forward(chunk, mb, x)

    def __getattr__(self, name):
        return getattr(self._compute, name)


class _SkippingP2P:
    """Drops the first send of the fault's microbatch to another rank, and says so on stderr."""

    def __init__(self, p2p, fault: Fault):
        self._p2p, self._fault, self._skipped = p2p, fault, False

    def send(self, tensor, msg) -> None:
        p2p = self._p2p
        dst = p2p.rank_of[msg.dst_stage]
        if not self._skipped and msg.microbatch == self._fault.microbatch and dst != p2p.rank:
            self._skipped = True
            print(f"[rank {p2p.rank}] INJECTED FAULT (--inject): skipping the send of the "
                  f"{msg.what(p2p.pp, p2p.placement)} to rank {dst}", file=sys.stderr, flush=True)
            return
        p2p.send(tensor, msg)

    def __getattr__(self, name):
        return getattr(self._p2p, name)
