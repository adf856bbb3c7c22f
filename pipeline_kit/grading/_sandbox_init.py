"""The first process of a student's kernel: isolate it, then exec the kernel (standard library only).

Run as ``python -I -S _sandbox_init.py CONFIG.json -- KERNEL ARGV...`` by the kernel spec that
:mod:`pipeline_kit.grading.sandbox` writes.  It is a script, not a module of the package, so it starts in
a few milliseconds.  Why each step:

* new mount, network and pid namespaces: the kernel sees neither the grader's processes (it cannot signal
  them) nor the network (only a loopback, brought up, for ``torchrun``'s rendezvous);
* a new root file system that holds only what a kernel needs, read-only: the system folders (``/usr``,
  ``/etc``...), the Python install and venv, and the kit's package and run data -- not the repository, so
  no ``solutions/``, no git history, no other checkout; writable are only a private ``/tmp`` and
  ``/dev/shm`` and the grade's work folder, so the kernel cannot rewrite the kit or the venv that the
  grader imports and runs later;
* a fresh ``/proc`` for the new pid namespace, so ``/proc`` shows no host process (no grader's cwd or
  environment to read);
* the kernel runs as ``nobody`` (as root) or without capabilities (in a user namespace), with
  ``no_new_privs``, so it cannot undo any of this; rlimits bound memory, processes and file size.

Process tree: this script forks; the child is pid 1 of the new pid namespace and reaps orphans; it forks the
kernel.  When the outer process dies (the grader kills it), pid 1 dies (``PR_SET_PDEATHSIG``) and the kernel
takes every descendant down with it.  If namespaces are unavailable, it writes why to the status file and
runs the kernel unisolated (the grader prints one warning line).
"""

import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
NOBODY = 65534

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def enter_namespaces(root: bool) -> None:
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | (0 if root else CLONE_NEWUSER)
    _check(libc.unshare(flags), "unshare")
    if not root:  # be root inside a user namespace that maps only our own uid
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", f"0 {uid} 1")
        write("/proc/self/gid_map", f"0 {gid} 1")


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


def bind(new: str, path: str, writable: bool = False, recursive: bool = True) -> None:
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
    mount(path, target, None, MS_BIND | (MS_REC if recursive else 0))
    if not writable:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def give_to(work: str, owner: int, skip: str) -> None:
    """Let the kernel's user write its work folder (not ``skip``, the empty folder the new root goes on)."""
    os.lchown(work, owner, owner)
    for dirpath, dirnames, filenames in os.walk(work):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) != skip]
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), owner, owner)


def enter_root(new: str) -> None:
    """Make ``new`` the root: ``pivot_root`` where its syscall number is known, else ``chroot``."""
    os.chdir(new)
    nr = PIVOT_ROOT.get(os.uname().machine)
    if nr is not None and libc.syscall(nr, b".", b".") == 0:
        _check(libc.umount2(b".", MNT_DETACH), "umount the old root")
    else:
        os.chroot(".")
    os.chdir("/")


def isolate_files(cfg: dict) -> None:
    """A new root holding only what the kernel needs: system folders, the Python install, the kit's package."""
    work, new = cfg["work"], cfg["newroot"]
    if cfg.get("owner") is not None:  # before any mount: the walk must never reach into the new root's binds
        give_to(work, cfg["owner"], skip=new)
    mount(None, "/", None, MS_REC | MS_PRIVATE)            # nothing we mount leaks back to the host
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    for path in cfg["binds"]:
        bind(new, path)
    bind(new, "/dev", writable=True)
    mount("tmpfs", new + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g")
    os.makedirs(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind(new, "/sys")
    os.makedirs(new + "/tmp", exist_ok=True)
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g")
    bind(new, work, writable=True, recursive=False)
    for hidden in cfg.get("hide", []):
        if os.path.isdir(new + hidden):
            mount("tmpfs", new + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    enter_root(new)


def drop_privileges(root: bool) -> None:
    if root:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)  # a setuid away from 0 clears every capability
    else:
        for cap in range(64):  # root inside the user namespace: give up every capability, for good
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        data = (ctypes.c_uint32 * 6)()
        _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def set_limits(cfg: dict) -> None:
    for name, key in (("RLIMIT_AS", "memory"), ("RLIMIT_NPROC", "processes"), ("RLIMIT_FSIZE", "file_size"),
                      ("RLIMIT_CORE", "core")):
        if cfg.get(key) is not None:
            limit = int(cfg[key])
            resource.setrlimit(getattr(resource, name), (limit, limit))


def exec_kernel(cfg: dict, argv: list[str]) -> None:
    env = dict(cfg["env"])
    os.chdir(cfg["cwd"])
    os.execve(argv[0], argv, env)


def pid1(kernel_pid: int) -> None:
    """Reap every orphan until the kernel exits; then exit, which ends the whole pid namespace."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == kernel_pid:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main() -> None:
    split = sys.argv.index("--")
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    argv = sys.argv[split + 1:]
    root = os.geteuid() == 0
    status = {"ok": True, "mode": "root" if root else "user namespace"}
    try:
        if cfg.get("off"):
            raise OSError(0, cfg["off"])
        enter_namespaces(root)
    except OSError as exc:
        status = {"ok": False, "why": f"cannot create namespaces ({exc.strerror})"}
    if not status["ok"]:
        write(cfg["status"], json.dumps(status))
        set_limits(cfg)
        exec_kernel(cfg, argv)
    child = os.fork()
    if child:  # outside the pid namespace: what the grader sees as the kernel; pass its end on
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: (os.kill(child, signal.SIGKILL), os._exit(1)))
        _, st = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(st) & 0xFF)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # (getppid() is 0 here: the parent is outside)
    try:
        cfg["owner"] = NOBODY if root else None
        isolate_files(cfg)
        loopback_up()
    except OSError as exc:
        write(cfg["status"], json.dumps({"ok": False, "why": f"cannot isolate the file system ({exc})"}))
        os._exit(3)
    write(cfg["status"], json.dumps(status))
    kernel = os.fork()
    if kernel == 0:
        try:
            drop_privileges(root)
            set_limits(cfg)
            exec_kernel(cfg, argv)
        finally:
            os._exit(127)
    pid1(kernel)


if __name__ == "__main__":
    main()
