"""A gradebook folder replaced all-or-nothing, one writer at a time, keeping every file it did not make.

Why a whole folder at once: a regrade changes ``grades.json``, ``grades.csv`` and some feedback pages together, and
a term's gradebook is the instructor's record.  Written file by file, a full disk, a SIGTERM or a crash halfway
would leave pages of the new grade beside the old ``grades.json``.  So the new gradebook is built complete in a
sibling folder (``.<name>.writing-*``) and swapped in with one ``renameat2(RENAME_EXCHANGE)``; readers, and the next
run, see the old folder or the new one, never a mix.  Where the file system cannot exchange (an old kernel, some
network file systems) two renames do it, and a run that finds the gradebook missing puts the old one back.

Why a lock: two batches writing one gradebook would each read the old rows and the second would drop the first's.
An exclusive ``flock`` on the folder itself is held from reading the old rows to the swap (seconds, never the
grading); a writer that got the lock re-opens the folder and checks it is still the same one, since the swap
replaced it.  The kernel drops the lock when a writer dies.

Why carry files over: the folder may hold what the instructor put there (a ``report.html``, notes).  Every entry of
the old folder that the new gradebook does not make is hard-linked into the new one before the swap: the same file,
not a copy, so nothing is lost at any moment.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..argtypes import UsageError
from .classlist import printable

LOCK_WAIT_S = 300  # how long a writer waits for another writer of the same gradebook before it gives up
WRITING, OLD = ".writing-", ".old-"
RENAME_EXCHANGE = 2


def _partial_names(folder: Path) -> Iterator[Path]:
    """The leftovers of a run that died while writing ``folder``: its sibling ``.<name>.writing-*`` and
    ``.<name>.old-*`` folders (only a writer holding the lock makes them, so under the lock they are stale)."""
    for kind in (WRITING, OLD):
        yield from folder.parent.glob(f".{folder.name}{kind}*")


@contextmanager
def locked(folder: Path, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of gradebook ``folder`` (made, empty, where it is missing); waits for another writer
    at most :data:`LOCK_WAIT_S` seconds, then a one-line error.  On entry, a gradebook a crashed run left swapped
    out is put back and the run's partial folders are removed."""
    _restore(folder)
    made = not folder.exists()
    folder.mkdir(exist_ok=True)
    deadline, told = time.monotonic() + LOCK_WAIT_S, False
    while True:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                raise UsageError(f"{printable(str(folder))}: another command has been writing this gradebook for "
                                 f"over {LOCK_WAIT_S} s; nothing was changed (rerun when it is done)") from None
            if say and not told:
                say(f"waiting for another command writing {printable(str(folder))}")
                told = True
            time.sleep(0.2)
            continue
        if os.path.samestat(os.fstat(fd), os.stat(folder, follow_symlinks=False)):
            break
        os.close(fd)  # the folder was swapped while we waited: lock the new one
    try:
        for stale in _partial_names(folder):
            shutil.rmtree(stale, ignore_errors=True)
        yield
    except BaseException:
        if made and not any(folder.iterdir()):  # (a new gradebook that could not be written: not left empty)
            folder.rmdir()
        raise
    finally:
        os.close(fd)


def _restore(folder: Path) -> None:
    """Where a run died between the two renames of :func:`_swap`'s fallback, the gradebook is missing and its old
    folder is ``.<name>.old-*``: rename it back."""
    if folder.exists() or folder.is_symlink():
        return
    for old in sorted(folder.parent.glob(f".{folder.name}{OLD}*")):
        pid = old.name.rpartition("-")[2]
        if not (pid.isdigit() and _alive(int(pid))):  # (a live writer is between its two renames)
            os.rename(old, folder)
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace(folder: Path, build: Callable[[Path], None]) -> None:
    """Replace the (locked) gradebook ``folder`` by what ``build(new_folder)`` writes, all-or-nothing: every file of
    the old folder that ``build`` did not write is linked into the new one first.  Any failure (a full disk, a
    signal) leaves the old folder as it was and removes the partial one."""
    new = Path(tempfile.mkdtemp(prefix=f".{folder.name}{WRITING}", dir=folder.parent))
    try:
        os.chmod(new, os.stat(folder).st_mode & 0o7777)
        build(new)
        _carry_over(folder, new)
        _fsync_tree(new)
        _swap(new, folder)
    finally:
        shutil.rmtree(new, ignore_errors=True)  # (after the swap: the old gradebook)


def _carry_over(old: Path, new: Path) -> None:
    """Hard-link into ``new`` every entry below ``old`` that ``new`` lacks (a link is linked as a link; a folder is
    made and entered).  Why links: the same file in both folders, so at no moment is it anywhere only once."""
    for root, dirs, files in os.walk(old):
        rel = Path(root).relative_to(old)
        for name in dirs:
            if os.path.islink(Path(root, name)):
                files.append(name)  # (a link to a folder is carried as a link, never entered)
        dirs[:] = [d for d in dirs if not os.path.islink(Path(root, d))]
        for name in dirs:
            (new / rel / name).mkdir(exist_ok=True)
        for name in files:
            target = new / rel / name
            if not os.path.lexists(target):
                os.link(Path(root, name), target, follow_symlinks=False)


def _fsync_tree(folder: Path) -> None:
    """Every file and folder below ``folder`` on the disk before the swap makes it the gradebook."""
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _swap(new: Path, folder: Path) -> None:
    """Exchange ``new`` and ``folder`` in one step (``renameat2``), or where the file system cannot, in two renames
    that :func:`_restore` can finish; afterwards ``new`` names the old gradebook."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    at_fdcwd = -100
    # where the exchange fails (EINVAL, ENOSYS or EOPNOTSUPP on some file systems), the two renames below do it
    if renameat2 is not None and renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(folder),
                                           RENAME_EXCHANGE) == 0:
        return
    old = folder.parent / f".{folder.name}{OLD}{os.getpid()}"
    os.rename(folder, old)
    os.rename(new, folder)
    os.rename(old, new)
