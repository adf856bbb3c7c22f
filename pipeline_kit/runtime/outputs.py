"""A run's ``--json`` and ``--trace``: their room on disk held from before step 1, and their writing said in one line.

Why a module of its own: a run must never train to the end and then lose its results, and checking the folder
is not enough -- a disk that fills during the run loses the trace all the same.  So before the first step the
rank that writes the files (rank 0) checks each path (:func:`pipeline_kit.inputs.check_output_path`) and
*reserves* the bytes the file will take: ``posix_fallocate`` of a reservation file in the output's folder,
sized from the schedule's op count and the run's steps, with a margin.  A disk that cannot hold them refuses
the run in one line, before step 1; the reservation is released just before its file is written
(:func:`pipeline_kit.interrupts.write_file_atomically`), so the space the run kept is there to write into.
A write that fails anyway is one line saying what was saved where.  Kept out of ``run.py``, which trains; no
torch at import.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable

from ..inputs import InputError, check_output_path, same_file
from ..interrupts import TEMPORARY_FILES, write_file_atomically

# Measured on real --trace files (pipeline_kit.run, gloo on CPU: 1f1b, interleaved, zb-h1 and dualpipev on 2 and 4
# ranks, 8 to 500 microbatches): an op's timeline entry takes 138-140 bytes and a P2P wait's 147-149; a rank waits
# at most once per op (an op receives at most one message), so an op costs at most 290 bytes.  The margin covers
# what those runs had small: microbatch numbers of 6 digits, ranks and stages of 4, times in exponent notation
# (the worst op and wait come to about 345 bytes, below 290 x 1.25 = 362).
TRACE_BYTES_PER_OP = 290
TRACE_HEADER_BYTES = 1024  # the fields before the timeline: schedule, pp, ..., makespan (measured: 220-251)
LAYOUT_BYTES_PER_STAGE = 12  # the layout string ("Et*3|t*2|...|tL") written in both files: "t*NNNN|" a stage
# --json, indent=1 (measured: 988 bytes for 2 steps on 2 ranks, 2,522 for 30 steps): one line per number
SUMMARY_BASE_BYTES = 2048  # the fixed fields and the model config
SUMMARY_BYTES_PER_STEP = 80  # step_times, losses, makespans: one float each (about 25 bytes a line)
SUMMARY_BYTES_PER_RANK = 120  # six per-rank lists (peaks, bytes, memory), about 10-25 bytes an entry
SUMMARY_BYTES_PER_STAGE = 24  # stage_params
MARGIN = 1.25
RESERVATION_PREFIX = ".pipeline-kit-reserve-"  # the reservation files (removed by Ctrl-C and SIGTERM too)


def trace_bytes(schedule) -> int:
    """What ``--trace`` of ``schedule`` may take, margin included."""
    layout = LAYOUT_BYTES_PER_STAGE * schedule.stages
    return int(MARGIN * (TRACE_HEADER_BYTES + layout + TRACE_BYTES_PER_OP * schedule.num_ops))


def summary_bytes(schedule, steps: int) -> int:
    """What ``--json`` of a run of ``steps`` steps of ``schedule`` may take, margin included."""
    per_stage = SUMMARY_BYTES_PER_STAGE + LAYOUT_BYTES_PER_STAGE
    return int(MARGIN * (SUMMARY_BASE_BYTES + SUMMARY_BYTES_PER_STEP * steps + SUMMARY_BYTES_PER_RANK * schedule.pp
                         + per_stage * schedule.stages))


class Reserved:
    """The reservation files that hold each output's room, by output path, until it is written."""

    def __init__(self):
        self.files: dict[str, str] = {}

    def hold(self, flag: str, path: str, size: int, what: str) -> None:
        """Reserve ``size`` bytes for ``path`` in its folder, or raise one :class:`InputError` line."""
        folder = os.path.dirname(os.path.realpath(path))  # where atomic_output writes its temporary file
        try:
            fd, reservation = tempfile.mkstemp(prefix=RESERVATION_PREFIX, dir=folder)
        except OSError as exc:
            raise InputError(f"argument {flag}: cannot write {path!r}: {exc.strerror or exc}") from None
        TEMPORARY_FILES.add(reservation)
        self.files[path] = reservation
        try:
            _allocate(fd, size)
        except OSError as exc:
            raise InputError(f"argument {flag}: cannot reserve {size:,} bytes for {path!r} ({what}): "
                             f"{exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def release(self, path: str) -> None:
        """Give ``path``'s room back to the file system (just before the file is written)."""
        reservation = self.files.pop(path, None)
        if reservation is not None:
            TEMPORARY_FILES.discard(reservation)
            try:
                os.unlink(reservation)
            except OSError:  # gone already (with its folder, say): the write that follows says what happened
                pass

    def release_all(self) -> None:
        for path in list(self.files):
            self.release(path)


def _allocate(fd: int, size: int) -> None:
    """Make ``size`` bytes of the file ``fd`` real on disk: ``posix_fallocate``, or writing zeros where the file
    system has no such call (the write fails the same way when the disk is full)."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
    block, written = b"\0" * 2**20, 0
    while written < size:
        written += os.write(fd, block[:size - written])
    os.fsync(fd)


def reserve_outputs(args, schedule) -> Reserved:
    """On the rank that writes them: check ``--json`` and ``--trace`` and hold their room, or raise one
    :class:`InputError` line (nothing is left behind then)."""
    reserved = Reserved()
    sizes = {"--json": (summary_bytes(schedule, args.steps), f"the summary of {args.steps:,} steps"),
             "--trace": (trace_bytes(schedule), f"the trace of {schedule.num_ops:,} ops")}
    paths = [(flag, path) for flag, path in (("--json", args.json), ("--trace", args.trace)) if path]
    try:
        for flag, path in paths:
            check_output_path(path, f"argument {flag}")
        if len(paths) == 2 and same_file(args.json, args.trace):
            raise InputError("arguments --json and --trace name the same file; give each its own")
        for flag, path in paths:
            reserved.hold(flag, path, *sizes[flag])
    except InputError:
        reserved.release_all()
        raise
    return reserved


def share_refusal(refusal: str | None) -> str | None:
    """The writer's refusal (rank 0 checked the outputs before the process group formed), told to every rank, so
    the whole job stops before step 1 -- no rank waits for the others."""
    import torch.distributed as dist
    box = [refusal]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def write_outputs(reserved: Reserved | None, outputs: list[tuple[str, str, Callable[[], str]]]) -> str | None:
    """Write each ``(flag, path, text)`` (its room released just before); None when all were saved, else one line
    saying which output was saved where and which could not be, and why."""
    said, failed = [], False
    for flag, path, text in outputs:
        content = text()
        if reserved is not None:
            reserved.release(path)
        try:
            write_file_atomically(path, content)
            said.append(f"{flag} saved to {path!r}")
        except OSError as exc:
            failed = True
            said.append(f"{flag} NOT saved to {path!r}: {exc.strerror or exc}")
    return "; ".join(said) if failed else None
