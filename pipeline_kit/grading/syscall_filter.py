"""The system calls a sandboxed program may not make, as a seccomp filter built by libseccomp.

Why a filter: some kernel objects are shared by uid or by machine, not by namespace -- above all the user keyring,
which outlives every process of its uid (one student's kernel answered another's through it) -- and some memory is
counted by nothing a sandbox can see (a ``memfd_create`` file, a SysV segment nobody maps).  The filter refuses
them, as Docker's default profile refuses the keyring calls "to prevent containers from using the kernel
keyring, which is not namespaced", and with it every call Docker refuses that a grade never needs: new
namespaces, mounts, kernel modules, BPF, ``perf_event_open``, ``userfaultfd``, ``io_uring``, ptrace and the
clock.  The allow-by-default shape is Docker's too, less its allow-list: a kernel runs CPython, NumPy, torch
with gloo and ``torchrun``, and each of them uses calls a short list would miss.

The grader builds the filter (libseccomp, through ``pyseccomp``: its own architecture checks, so a 32-bit or x32
system call of an x86-64 program kills it rather than slipping past) and hands its BPF bytes to the launcher on
stdin; the launcher loads them just before it runs the program, with ``no_new_privs`` set.  ``memfd_create`` and
``clone3`` answer ENOSYS, the "not here" libraries fall back from (torch's asmjit to another mapping, glibc to
``clone``, which the filter can read the flags of); the rest answer EPERM.
"""

from __future__ import annotations

import errno
import functools
import os

REFUSED = (
    # the kernel's keyrings: shared by every process of a uid, and kept after its last process ends
    "add_key", "keyctl", "request_key",
    # memory no limit of the sandbox would count
    "shmget", "msgget",
    # new namespaces, mounts and roots: the sandbox made its own, and a program must not make another
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr",
    # the kernel itself, its modules, tracing and time
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "lookup_dcookie",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "name_to_handle_at", "open_by_handle_at",
    "fanotify_init", "iopl", "ioperm", "personality", "uselib", "ustat", "sysfs", "vhangup", "nfsservctl",
)
NOT_HERE = ("memfd_create", "memfd_secret", "clone3")
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME


class FilterUnavailable(OSError):
    """libseccomp (or pyseccomp) is missing: the sandbox cannot be what its contract says."""


@functools.lru_cache(maxsize=1)
def bpf() -> bytes:
    """The filter as the kernel loads it: ``struct sock_filter`` records, 8 bytes each."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as exc:  # (pyseccomp raises OSError when libseccomp.so.2 is not installed)
        raise FilterUnavailable(f"libseccomp is not usable ({exc}); install it (Debian: libseccomp2) and "
                                "pyseccomp (pip install -r requirements.txt)") from None
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED:
        _add(f, seccomp.ERRNO(errno.EPERM), name)
    for name in NOT_HERE:
        _add(f, seccomp.ERRNO(errno.ENOSYS), name)
    for flag in NAMESPACE_FLAGS:  # clone with a namespace flag, as unshare would
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb", closefd=True) as out:
            f.export_bpf(out)
        data = b""
        while chunk := os.read(read, 65536):
            data += chunk
    finally:
        os.close(read)
    if not data or len(data) % 8:
        raise FilterUnavailable("libseccomp exported no filter")
    return data


def _add(f, action: int, name: str) -> None:
    """One rule; a call this libseccomp or architecture does not know is one no program here can make."""
    try:
        f.add_rule(action, name)
    except (RuntimeError, ValueError, OSError):
        pass
