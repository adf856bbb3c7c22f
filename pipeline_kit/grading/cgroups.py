"""A cgroup per sandbox, where the machine lets the grader make one: memory and processes bounded for the whole
sandbox, not per process.

Why: rlimits are per process (address space) or per user (processes), so a kernel that starts many processes can
hold many times the per-process cap.  A cgroup bounds the sum.  cgroup v2 is used where its ``memory`` and
``pids`` controllers can be had in a child of the grader's own cgroup; otherwise cgroup v1's ``memory`` and
``pids`` hierarchies (a hybrid machine, where v2 holds no controllers); otherwise none, and the sandbox relies on
its pid-1 watchdog (``_sandbox_init.py``) and the rlimits -- :func:`describe` says which, for the report.

The launcher puts itself into the cgroup before it starts anything; :meth:`Cgroup.remove` kills what is left in
it and removes it.  Only files under ``/sys/fs/cgroup`` that the grader itself created are written.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "pipeline-kit-sandbox-"


@dataclass
class Cgroup:
    kind: str            # "cgroup v2" or "cgroup v1"
    dirs: list[Path]     # one (v2) or one per controller (v1: memory, pids)
    memory: int
    processes: int

    def describe(self) -> str:
        return (f"{self.kind} caps the whole sandbox at {self.memory / 2**30:g} GiB of memory and "
                f"{self.processes:,} processes")

    def hit_memory_limit(self) -> bool:
        """Whether the sandbox's memory reached the limit (then the kernel's death was the cgroup's doing)."""
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.failcnt", None)):
                try:
                    text = (d / name).read_text()
                except OSError:
                    continue
                if key is None:
                    return int(text.strip() or 0) > 0
                for line in text.splitlines():
                    if line.startswith(key + " "):
                        return int(line.split()[1]) > 0
        return False

    def kill(self, wait: float = 5.0) -> None:
        """SIGKILL every process still in the cgroup, until it is empty (at most ``wait`` seconds)."""
        deadline = time.monotonic() + wait
        for d in self.dirs:
            try:
                (d / "cgroup.kill").write_text("1")
            except OSError:
                pass
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def pids(self) -> list[int]:
        out = []
        for d in self.dirs:
            try:
                out += [int(x) for x in (d / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pass
        return out

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fstype, options)`` of the cgroup file systems, from /proc/self/mountinfo."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], tail[0], set(tail[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """The grader's own cgroup per hierarchy: ``{"": path}`` for v2, ``{"memory": path, ...}`` for v1."""
    out = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller] = parts[2]
    return out


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _make(parent: Path) -> Path:
    child = parent / f"{PREFIX}{secrets.token_hex(6)}"
    child.mkdir()
    return child


def _v2(memory: int, processes: int) -> Cgroup | None:
    own = _own_paths().get("")
    for point, fstype, _ in _mounts():
        if fstype != "cgroup2" or own is None:
            continue
        parent = Path(point + own)
        try:
            if not {"memory", "pids"} <= set((parent / "cgroup.controllers").read_text().split()):
                continue
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
            if not {"memory", "pids"} <= enabled:
                _write(parent / "cgroup.subtree_control", "+memory +pids")
            child = _make(parent)
        except OSError:
            continue
        group = Cgroup("cgroup v2", [child], memory, processes)
        try:
            _write(child / "memory.max", str(memory))
            _write(child / "pids.max", str(processes))
            if (child / "memory.swap.max").exists():
                _write(child / "memory.swap.max", "0")
            if (child / "memory.oom.group").exists():
                _write(child / "memory.oom.group", "1")  # an OOM kill takes the whole sandbox, not one process
            return group
        except OSError:
            group.remove()
    return None


def _v1(memory: int, processes: int) -> Cgroup | None:
    own = _own_paths()
    points = {c: p for p, fstype, opts in _mounts() if fstype == "cgroup" for c in ("memory", "pids") if c in opts}
    if set(points) != {"memory", "pids"} or not {"memory", "pids"} <= set(own):
        return None
    group = Cgroup("cgroup v1", [], memory, processes)
    try:
        for controller in ("memory", "pids"):
            group.dirs.append(_make(Path(points[controller] + own[controller])))
        mem, pids = group.dirs
        _write(mem / "memory.limit_in_bytes", str(memory))
        if (mem / "memory.memsw.limit_in_bytes").exists():
            _write(mem / "memory.memsw.limit_in_bytes", str(memory))
        _write(pids / "pids.max", str(processes))
        return group
    except OSError:
        group.remove()
        return None


def create(memory: int, processes: int) -> Cgroup | None:
    """A fresh cgroup bounding ``memory`` bytes and ``processes`` tasks, or None where none can be made."""
    if os.environ.get("PIPELINE_KIT_CGROUP") == "off":  # the tests' way to see the fallback on a machine with one
        return None
    return _v2(memory, processes) or _v1(memory, processes)
