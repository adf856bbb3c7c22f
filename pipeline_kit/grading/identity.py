"""A user of its own for every sandbox the grader starts as root: no kernel object is shared between two grades.

Why: Linux keeps some state per uid -- the user keyring, the count ``RLIMIT_NPROC`` limits, the pipe-buffer
budget -- and not per process.  When every sandbox ran as ``nobody``, one student's kernel could answer another's
through a key, and 470 sleeping processes of one student (or of any other ``nobody`` job on the machine) made
classmates' kernels fail to start.  So each sandbox gets a uid and gid from :data:`UIDS`, a range no distribution
allocates (as systemd's ``DynamicUser`` reserves 61184-65519 for its services), that:

* no process on the machine has when it is taken (so a foreign job holding hundreds of processes of some uid
  never counts against a grade's budget), and
* no other sandbox holds: the grader takes an exclusive ``flock`` on the uid's file in :data:`LOCKS` (root's, mode
  0700), held until the sandbox and every process of it are gone -- a lock the kernel drops even when the grader
  is killed outright, so a crash never leaks a uid.

Keyrings also live on after a uid's last process, so the sandbox's system-call filter (:mod:`.syscall_filter`)
refuses the keyring calls outright; the uid is the second wall, and the one ``RLIMIT_NPROC`` needs.  Without root
the sandbox is a user namespace of its own, whose keyrings and process counts are already its own (Linux 5.3 and
5.14), and this module is not used.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

UIDS = range(0x7A000000, 0x7A000000 + 65536)  # 2046820352-2046885887: above every allocator's, below 2**31
LOCKS = Path("/run/pipeline-kit-sandbox-uids")
TRIES = 64


class NoIdentity(OSError):
    """No uid of the range could be had (the lock folder is not root's, or every uid is taken)."""


@dataclass
class Identity:
    """A uid (also the gid) held for one sandbox; :meth:`release` gives it back."""

    uid: int
    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the file drops the flock
            self.fd = None


def _lock_folder() -> Path:
    """:data:`LOCKS`, made if missing, and refused unless it is a real folder of root's that only root writes."""
    try:
        LOCKS.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(LOCKS)
    except OSError as exc:
        raise NoIdentity(f"cannot make {LOCKS}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise NoIdentity(f"{LOCKS} is not a folder that only root can write")
    return LOCKS


def uids_in_use() -> set[int]:
    """Every real, effective, saved or file-system uid of a process on the machine (from ``/proc``)."""
    used: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        used.update(int(x) for x in line.split()[1:])
                        break
        except (OSError, ValueError):
            continue
    return used


def take() -> Identity:
    """A uid of :data:`UIDS` that no process has and no other sandbox holds, locked for the caller."""
    folder = _lock_folder()
    busy = uids_in_use()
    for _ in range(TRIES):
        uid = UIDS[secrets.randbelow(len(UIDS))]
        if uid in busy:
            continue
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if uid in uids_in_use():  # a process took it between the look and the lock (a sandbox ending late)
            os.close(fd)
            continue
        return Identity(uid, fd)
    raise NoIdentity(f"no free uid in {UIDS.start}-{UIDS.stop - 1} after {TRIES} tries")


def processes_of(uid: int) -> list[int]:
    """The live processes whose real uid is ``uid`` (the tests' check that nothing of a sandbox outlived it)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = {k: v for k, _, v in (line.partition(b":") for line in f)}
            if int(fields[b"Uid"].split()[0]) == uid and not fields[b"State"].strip().startswith(b"Z"):
                out.append(int(name))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return out
