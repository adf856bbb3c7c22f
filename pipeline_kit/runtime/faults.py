"""Deliberate faults (``--inject``) that show what a broken pipeline looks like (M053).

``skip-send:rank=R,mb=K``  rank R silently skips its first send of microbatch K: the neighbour
                           waits for a message that never comes -- the classic P2P hang.
``crash:rank=R,mb=K``      rank R raises an exception in the forward of microbatch K: the run must
                           end on every rank instead of leaving the others waiting.
"""

from __future__ import annotations

import re
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
