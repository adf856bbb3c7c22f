"""The first process of every program the grader runs for a student: isolate it, then exec it (stdlib only).

Run as ``python -I -S _sandbox_init.py STATUS_FD GRADER_PID`` by :mod:`pipeline_kit.grading.sandbox`, which writes the
configuration to its stdin and reads the start-up report from the pipe ``STATUS_FD``.  The configuration names
the programs to start (a kernel and the relay that is the grader's only line to it, or one kit-free run) and the
pipe ends each of them keeps.  It is a script, not a
module of the package, so it starts in a few milliseconds.  Why it is built this way:

* **Nothing it reads can come from a student.**  The configuration arrives on stdin from the grader; the report
  leaves on a pipe that only this process and the grader hold, closed before the student's program exists.  No
  file on disk is read or written for either, so no earlier kernel can plant, replace or link one.
* **Everything the program may write is a size-limited tmpfs** inside the sandbox (``/tmp``, ``/dev/shm`` and
  the program's own folder, which holds its ``HOME``, cwd and, for a kernel, its IPC sockets).  It dies with the
  sandbox: nothing lands on the host's disk, and the next start begins empty.
* new mount, network, pid and IPC namespaces: the program sees neither the grader's processes (it cannot signal
  them) nor the network (only a loopback, brought up, for ``torchrun``'s rendezvous);
* a new root that holds, read-only, only what the program needs (system folders, the Python install and, for a
  kernel, the venv and the kit's package); a fresh ``/proc``; a ``/dev`` of five device nodes;
* it runs as a uid of its own (as root: one the grader took for this sandbox alone, :mod:`.identity`) or
  without capabilities in a user namespace of its own, with ``no_new_privs`` and the grader's seccomp filter
  (:mod:`.syscall_filter`: no keyrings, no memfd, no new namespaces), under rlimits per process, in a cgroup
  namespace of its own inside a cgroup for the whole sandbox where the grader made one, and always a watchdog
  here in pid 1 that ends the sandbox when its processes' resident memory and its tmpfs mounts together pass the
  limit.  ``/etc`` holds only the files the grader names and a ``passwd`` naming the sandbox's user; ``/sys/fs``
  (the cgroup tree of every other sandbox) is an empty folder.

Process tree: this script forks; the child is pid 1 of the new pid namespace, reaps orphans and watches memory;
it forks the program.  This outer process dies with the grader, even one killed outright (``PR_SET_PDEATHSIG``,
set first thing); when it dies (the grader kills it), pid 1 dies too and the kernel takes every process of the
namespace down with it.  With ``"mode": "off"`` (the caller's explicit
choice) it only sets the rlimits and execs the program, unisolated.
"""

import base64
import ctypes
import errno
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys
import time

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x02000000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_SECCOMP = 1, 4, 38, 24, 22
SECCOMP_MODE_FILTER = 2
MAX_CONFIG = 4 * 2**20
DEVICES = ("null", "zero", "full", "random", "urandom")
WATCH_S = 0.05
EXIT_MEMORY = 99  # pid 1 ended the sandbox: its memory passed the limit (the grader says so in the feedback)

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
TRANSIENT = (errno.EAGAIN, errno.ENOMEM, errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.EUSERS)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def report(fd: int, **fields) -> None:
    """One JSON line on the status pipe (under PIPE_BUF, so written at once even with two writers)."""
    os.write(fd, (json.dumps(fields)[:4000] + "\n").encode())


def read_config() -> dict:
    data = sys.stdin.buffer.read(MAX_CONFIG + 1)
    if len(data) > MAX_CONFIG:
        raise ValueError("configuration too large")
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return json.loads(data)


def enter_namespaces(root: bool) -> None:
    """New mount, network, IPC and cgroup namespaces (and a user namespace without root: its keyrings and its
    process count are its own); the pid namespace comes later, after the outside programs are forked (every child
    forked after ``CLONE_NEWPID`` is in the new one).  The cgroup namespace is made after joining the sandbox's
    cgroup, so ``/proc/self/cgroup`` shows ``/`` and names no other grade."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWCGROUP | (0 if root else CLONE_NEWUSER)
    _check(libc.unshare(flags), "unshare")
    if not root:  # be root inside a user namespace that maps only our own uid
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {uid} 1"),
                           ("/proc/self/gid_map", f"0 {gid} 1")):
            with open(path, "w") as f:
                f.write(text)


def loopback_up() -> None:
    """``ip link set lo up`` without ``ip``: SIOCGIFFLAGS / SIOCSIFFLAGS on the new namespace's ``lo``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, req))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))
    finally:
        s.close()


PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
MNT_DETACH = 2


def bind(new: str, path: str, writable: bool = False) -> None:
    """Show the host's ``path`` at the same place under the new root (read-only unless ``writable``)."""
    target = new + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    elif os.path.exists(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    else:
        return
    mount(path, target, None, MS_BIND | MS_REC)
    if not writable:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def tmpfs(target: str, size: int, mode: str, owner: int | None, flags: int = MS_NOSUID | MS_NODEV) -> None:
    os.makedirs(target, exist_ok=True)
    ids = f",uid={owner},gid={owner}" if owner is not None else ""
    mount("tmpfs", target, "tmpfs", flags, f"mode={mode},size={int(size)}{ids}")


def enter_root(new: str) -> str:
    """Make ``new`` the root: ``pivot_root`` where its syscall number is known, else ``chroot``.  Returns where
    the new root is seen from the outer process (``/`` after ``pivot_root``, which moves its root too)."""
    os.chdir(new)
    nr = PIVOT_ROOT.get(os.uname().machine)
    if nr is not None and libc.syscall(nr, b".", b".") == 0:
        _check(libc.umount2(b".", MNT_DETACH), "umount the old root")
        seen = "/"
    else:
        os.chroot(".")
        seen = new
    os.chdir("/")
    return seen


def minimal_dev(new: str, shm_size: int) -> None:
    """``/dev`` with only the device nodes a Python program uses, and a private, size-limited ``/dev/shm``."""
    tmpfs(new + "/dev", 2**20, "755", None, MS_NOSUID)
    for name in DEVICES:
        bind(new, "/dev/" + name, writable=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    tmpfs(new + "/dev/shm", shm_size, "1777", None)


def make_own(own: str, cfg: dict, owner: int | None) -> None:
    """The program's folder (its HOME, cwd, IPC sockets): the sub-folders and files the grader asked for."""
    os.makedirs(own, exist_ok=True)
    for sub in cfg.get("dirs", []):
        os.makedirs(f"{own}/{sub}")
    for name, text in cfg.get("files", {}).items():
        with open(f"{own}/{name}", "x") as f:
            f.write(text)
    if owner is not None:
        for dirpath, dirnames, filenames in os.walk(own):
            for name in [*dirnames, *filenames]:
                os.lchown(os.path.join(dirpath, name), owner, owner)


def isolate_files(cfg: dict, owner: int | None) -> str:
    """A new root holding only what the program needs, and the tmpfs mounts it may write."""
    new, sizes = cfg["newroot"], cfg["sizes"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)            # nothing we mount leaks back to the host
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    tmpfs(new + "/tmp", sizes["tmp"], "1777", None)  # first: a kit or venv under /tmp is bound on top of it
    for path in cfg["binds"]:
        bind(new, path)
    minimal_dev(new, sizes["shm"])
    os.makedirs(new + "/proc", exist_ok=True)
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind(new, "/sys")
    tmpfs(new + "/sys/fs", 4096, "755", None, MS_RDONLY | MS_NOSUID | MS_NODEV)  # no cgroup tree, no bpf fs
    users(new, owner)
    tmpfs(new + cfg["own"], sizes["own"], "700", owner)  # nothing of it outlives the sandbox
    make_own(new + cfg["own"], cfg, owner)
    for hidden in cfg.get("hide", []):
        if os.path.isdir(new + hidden):
            mount("tmpfs", new + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    return enter_root(new)


def users(new: str, owner: int | None) -> None:
    """``/etc/passwd`` and ``/etc/group`` naming only root and the sandbox's user (``student``), so a program
    that asks who it is gets an answer; the host's files, which name the machine's users, are not shown.  In a
    user namespace the program is root there, and root is all the files name."""
    os.makedirs(new + "/etc", exist_ok=True)
    passwd, group = ["root:x:0:0:root:/root:/bin/sh"], ["root:x:0:"]
    if owner is not None:
        passwd.append(f"student:x:{owner}:{owner}:student:/run/student/home:/bin/sh")
        group.append(f"student:x:{owner}:")
    for name, lines in (("passwd", passwd), ("group", group)):
        with open(f"{new}/etc/{name}", "w") as f:
            f.write("\n".join(lines) + "\n")


def load_filter(program: bytes) -> None:
    """Load the grader's seccomp filter (BPF records of 8 bytes) on this process and every child it will have."""

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = Program(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def drop_privileges(owner: int | None) -> None:
    if owner is not None:
        os.setgroups([])
        os.setgid(owner)
        os.setuid(owner)  # a setuid away from 0 clears every capability
    else:
        for cap in range(64):  # root inside the user namespace: give up every capability, for good
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        data = (ctypes.c_uint32 * 6)()
        _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def set_limits(limits: dict) -> None:
    for name, key in (("RLIMIT_AS", "memory"), ("RLIMIT_NPROC", "processes"), ("RLIMIT_FSIZE", "file_size"),
                      ("RLIMIT_CORE", "core")):
        if limits.get(key) is not None:
            limit = int(limits[key])
            resource.setrlimit(getattr(resource, name), (limit, limit))


def join_cgroups(dirs: list[str]) -> None:
    """Put this process (and so everything it starts) into the cgroup(s) the grader made for this sandbox."""
    for d in dirs:
        with open(os.path.join(d, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def start_program(prog: dict, others: list[int], isolated: bool, owner: int | None, limits: dict,
                  wait_for: int | None = None, syscalls: bytes = b"") -> int:
    """Fork and exec one program: it keeps only its own pipe ends (``prog["fds"]``) of those the grader passed,
    and dies with its parent.  With ``wait_for`` (an outside program), it first waits for pid 1's go-ahead."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        for fd in prog.get("fds", []):
            os.close(fd)
        return pid
    try:
        die_with_parent(parent)
        for fd in others:
            if fd not in prog.get("fds", []):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if wait_for is not None:
            if os.read(wait_for, 1) != b"1":
                os._exit(3)  # pid 1 could not isolate the sandbox: it has said why
            os.close(wait_for)
        if isolated:
            drop_privileges(owner)
        set_limits(limits)
        die_with_parent(parent)  # once more: a change of user clears the request
        os.chdir(prog["cwd"])
        if isolated:
            load_filter(syscalls)  # last: from here on, only what the filter allows (execve is)
        os.execve(prog["argv"][0], prog["argv"], dict(prog["env"]))
    finally:
        os._exit(127)


def exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code & 0xFF


def used_memory(mounts: list[str]) -> int:
    """Resident memory of every process of this pid namespace, plus what its tmpfs mounts hold (bytes)."""
    page, total = os.sysconf("SC_PAGE_SIZE"), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/statm") as f:
                    total += int(f.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                pass
    for path in mounts:
        try:
            st = os.statvfs(path)
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
        except OSError:
            pass
    return total


def supervise(programs: list[int], limit: int | None, mounts: list[str]) -> None:
    """Reap every orphan until one of the programs exits, and end the sandbox if its memory passes ``limit``;
    then exit with that program's status, which (as pid 1) ends the whole pid namespace."""
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(0)
            if pid == 0:
                break
            if pid in programs:
                os._exit(exit_code(status))
        if limit is not None and used_memory(mounts) > limit:
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but this one
            os._exit(EXIT_MEMORY)
        time.sleep(WATCH_S)


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies -- even a grader killed outright, which runs no clean-up -- and
    exit now if the parent is already gone (it died before the request took effect)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(3)


def fail(status: int, why: str, exc: OSError) -> None:
    """Report why the sandbox could not start, and whether the machine ran short (a retry may pass) -- then end."""
    report(status, ok=False, why=f"{why} ({exc.strerror or exc})", transient=exc.errno in TRANSIENT)
    os._exit(3)


def main() -> None:
    status = int(sys.argv[1])
    die_with_parent(int(sys.argv[2]))  # the grader's pid
    try:
        cfg = read_config()
        join_cgroups(cfg.get("cgroups", []))
    except (OSError, ValueError) as exc:
        report(status, ok=False, why=f"cannot read the sandbox's configuration or join its cgroup ({exc})",
               transient=isinstance(exc, OSError) and exc.errno in TRANSIENT)
        os._exit(3)
    root = os.geteuid() == 0
    owner = int(cfg["uid"]) if root and cfg.get("uid") is not None else None
    syscalls = base64.b64decode(cfg.get("seccomp", ""))
    passed = [fd for prog in cfg["programs"] for fd in prog.get("fds", [])]
    inside = [p for p in cfg["programs"] if not p.get("outside")]
    outside = [p for p in cfg["programs"] if p.get("outside")]
    if cfg["mode"] == "off":  # the caller's explicit choice: no isolation, only the rlimits
        try:
            make_own(cfg["own"], cfg, None)  # a fresh folder of the grader's on the host
        except OSError as exc:
            fail(status, "cannot make the program's folder", exc)
        report(status, ok=True, mode="off")
        os.close(status)
        supervise([start_program(p, passed, False, None, cfg["limits"]) for p in cfg["programs"]], None, [])
    if root and owner is None or not syscalls:
        report(status, ok=False, why="the grader gave no user or no system-call filter for the sandbox")
        os._exit(3)
    try:
        enter_namespaces(root)
        isolated_r, isolated_w = os.pipe()
        # Outside programs (the kernel's relay) are forked before the pid namespace exists, so the sandbox's
        # processes cannot name them (nor signal nor trace them); they run once pid 1 has built the new root
        # (pivot_root makes it their root too) and die with the launcher.
        report(status, outside=[start_program(p, [status, isolated_w, *passed], True, owner, cfg["limits"],
                                              wait_for=isolated_r, syscalls=syscalls) for p in outside])
        _check(libc.unshare(CLONE_NEWPID), "unshare")
        child = os.fork()
    except OSError as exc:
        fail(status, "cannot create namespaces", exc)
    if child:  # outside the pid namespace: what the grader sees as the programs; pass their end on
        for fd in [status, isolated_r, isolated_w, *(fd for p in inside for fd in p.get("fds", []))]:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: (os.kill(child, signal.SIGKILL), os._exit(1)))
        _, st = os.waitpid(child, 0)
        os._exit(exit_code(st))
    os.close(isolated_r)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # (getppid() is 0 here: the parent is outside)
    # In a user namespace the programs run as this process's own uid: not dumpable, it cannot be ptraced (which
    # would let a program remount the read-only binds).
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    try:
        seen = isolate_files(cfg, owner)
        loopback_up()
    except OSError as exc:
        fail(status, "cannot isolate the file system", exc)
    try:
        started = []
        report(status, ok=True, mode="root" if root else "user namespace", root=seen)
        os.close(status)
        os.write(isolated_w, b"1" * len(outside))  # the outside programs may start: their root is the new one now
        os.close(isolated_w)
        started = [start_program(p, passed, True, owner, cfg["limits"], syscalls=syscalls) for p in inside]
    except OSError:  # a fork that failed after the report: the programs that did start see the sandbox end
        os._exit(3)
    supervise(started, int(cfg["limits"]["total_memory"]), ["/tmp", "/dev/shm", cfg["own"]])


if __name__ == "__main__":
    main()
