"""Start a student's program (a kernel and its relay, or a kit-free run) inside ``_sandbox_init.py``, and end it.

The rule this module keeps (``README.md`` in this folder): the grader never reads, follows or runs anything the
student's code could have written.  So the sandbox's configuration goes to the launcher on its stdin, the launcher's
start-up report comes back on a pipe only it holds (closed before any student code exists), and everything the
student's code may write is a tmpfs inside the sandbox that the grader never opens.  The grade's folder on the host
(``/tmp/pipeline-kit-grade-*``, mode 0700) holds only empty mount points the grader made; nothing in the sandbox
can see it.  Whether the sandbox is on is decided here, from what the grader asked for and what the launcher
reported before the student's code ran -- never from a file or a message the student's code can produce.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..launch import FIXED_ENV, REPLAY_ENV
from . import cgroups, identity, syscall_filter

LAUNCHER = Path(__file__).with_name("_sandbox_init.py")
OWN = "/run/student"             # the program's folder inside the sandbox: HOME, cwd, IPC sockets (a tmpfs)
MEMORY_LIMIT = 4 * 2**30         # bytes of address space per process (torch with gloo needs about 1.5 GiB)
TOTAL_MEMORY = 6 * 2**30         # bytes for the whole sandbox: every process's resident memory and its tmpfs mounts
CGROUP_MARGIN = 2**30            # the cgroup's hard cap is this much higher: pid 1's watchdog, which ends the whole
#                                  sandbox at TOTAL_MEMORY, acts first; the cgroup catches what grows between two looks
PROCESS_LIMIT = 512              # processes and threads (an honest lab 6 kernel, running torchrun, peaks at ~80)
FILE_SIZE_LIMIT = 256 * 2**20    # bytes per file the program writes
SIZES = {"tmp": 512 * 2**20, "shm": 512 * 2**20, "own": 256 * 2**20}  # the tmpfs mounts: /tmp, /dev/shm, OWN
START_TIMEOUT = 60.0             # seconds the launcher may take to report (it takes ~0.1 s)
ENV_KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "VIRTUAL_ENV", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES", "TERM")  # (never PYTHONPATH: it names the grader's folders, a course's say)
ROOT = Path(__file__).resolve().parents[2]
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# of /etc, only what a Python program, its dynamic loader, fonts and torchrun's localhost rendezvous read (the
# launcher adds a passwd and group naming the sandbox's user); never the rest, which describes the machine
ETC = tuple(f"/etc/{name}" for name in (
    "alternatives", "fonts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "hosts",
    "host.conf", "nsswitch.conf", "gai.conf", "protocols", "services", "mime.types", "os-release", "debian_version"))
KIT_FILES = ("pipeline_kit", "book/data")  # what of the repository a kernel sees: the package and run data
KERNEL_REPLAY_ENV = "PIPELINE_KIT_KERNEL_TORCHRUN_REPLAY"
OFF = "PIPELINE_KIT_SANDBOX"


class SandboxUnavailable(Exception):
    """Isolation was asked for and could not be had: the grade stops (one line, exit 2) -- or, where the machine
    ran short of something (``transient``: processes, memory, file descriptors), is not graded."""

    def __init__(self, why: str, transient: bool = False):
        super().__init__(why)
        self.transient = transient


def wanted(sandboxed: bool = True) -> str | None:
    """None when the caller wants isolation; otherwise why not (the caller's explicit choice, for the report)."""
    if not sandboxed:
        return "sandboxed=False"
    if os.environ.get(OFF) == "off":
        return f"{OFF}=off"
    return None


def unavailable_message(why: str) -> str:
    return (f"the student's code cannot be sandboxed here ({why}); set {OFF}=off to grade without isolation (the "
            "student's code can then read solutions/, use the network and write your files)")


def unsandboxed_warning(why: str) -> str:
    return (f"grade: warning: the student's code runs without a sandbox ({why}): it can read solutions/, use the "
            "network and write your files; checks, hidden cases and the score still stay in the grader's process")


# -- what the sandbox shows -------------------------------------------------------------------------------------

def replay_dir() -> Path | None:
    """The test suite's ``torchrun`` recordings, when the kernel replays them (:mod:`pipeline_kit.launch`).

    Why the kernel gets them: the given cells of labs 5, 6 and 8 start real jobs, and a test of the grading
    does not test those jobs (nbval runs the solutions' jobs for real).  The kernel replays when the grader
    replays (``PIPELINE_KIT_TORCHRUN_REPLAY``: the wrong-answer gradings) or when only the kernel should
    (``PIPELINE_KIT_KERNEL_TORCHRUN_REPLAY``: the full-marks gradings, whose grader runs its own jobs for
    real) -- and a class's batch grade shows its lab's fixed jobs, recorded once by the batch
    (``PIPELINE_KIT_TORCHRUN_FIXED``, see :mod:`.batch`): never a job of another student's.  Only the grader's
    own environment can turn this on; the kernel sees the folder read-only.
    """
    replay = os.environ.get(KERNEL_REPLAY_ENV) or os.environ.get(FIXED_ENV) or os.environ.get(REPLAY_ENV)
    return Path(replay).resolve() if replay and Path(replay).is_dir() else None


def _python_paths() -> list[Path]:
    """The Python install and the venv (their prefixes, the interpreter's folder, the site-packages folders, the
    user's own where Python searches it) and the folders their ``.pth`` files add -- never a ``sys.path`` entry
    that came from ``PYTHONPATH``, nor ``sys.path[0]``, nor one that is, holds or lies in the folder the grader was
    started in.  Those are an instructor's course folder, with its students' notebooks and the course secret, and
    the kit needs none of them: the kernel finds the kit in :data:`ROOT`."""
    import site
    installed = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
                 *site.getsitepackages()]
    user_site = site.getusersitepackages()
    if site.ENABLE_USER_SITE and user_site in sys.path:
        installed.append(user_site)
    given = {os.path.realpath(p or ".") for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)}
    here = Path(os.path.realpath(os.getcwd()))
    added = []
    for p in sys.path if sys.flags.safe_path else sys.path[1:]:
        real = Path(os.path.realpath(p or "."))
        if str(real) not in given and real != here and real not in here.parents and here not in real.parents:
            added.append(p)
    out = []
    for p in [*installed, *added]:
        if p and os.path.isdir(p):
            out += [Path(os.path.abspath(p)), Path(os.path.realpath(p))]
    return out


def _outermost(paths, hidden: list[Path]) -> list[str]:
    """The existing ``paths`` none of whose parents is already listed, leaving out the repository's root (and its
    parents) and anything that holds or lies inside a ``hidden`` path."""
    temp = {Path("/tmp"), Path("/var/tmp"), Path(tempfile.gettempdir()).resolve(), Path("/dev"), Path("/proc")}

    def allowed(p: Path) -> bool:
        if p == ROOT or p in ROOT.parents or p == Path("/") or p in temp:
            return False
        return not any(h == p or p in h.parents or h in p.parents for h in hidden)

    out: list[str] = []
    for p in sorted({p for p in paths if allowed(p) and (p.exists() or p.is_symlink())}, key=str):
        if not any(Path(o) in p.parents for o in out):
            out.append(str(p))
    return out


def kernel_paths(solutions: Path) -> list[str]:
    """Host paths a kernel's new root shows (read-only): system folders, the Python install, the venv and
    ``sys.path``, and of the repository only :data:`KIT_FILES` (and the test suite's :func:`replay_dir`) --
    never a folder holding ``solutions``."""
    hidden = [solutions.resolve(), ROOT / "solutions", ROOT / ".git"]
    replay = replay_dir()
    return _outermost([*map(Path, SYSTEM + ETC), *_python_paths(), *(ROOT / k for k in KIT_FILES),
                       *([replay] if replay else [])], hidden)


def kit_free_paths() -> tuple[list[str], list[str]]:
    """``(binds, hidden)`` for a run with no kit at all: the system folders and the Python install's standard
    library, with every site-packages folder (where the kit or its dependencies may be installed) covered."""
    import site
    kit = Path(__file__).resolve().parents[1]
    hidden = [ROOT, kit, *map(Path, site.getsitepackages()), Path(site.getusersitepackages()), Path(sys.prefix)]
    base = [Path(sys.base_prefix), Path(os.path.realpath(sys.base_prefix))]
    binds = _outermost([*map(Path, SYSTEM + ETC), *base], [ROOT, kit])
    return binds, sorted({str(h) for h in hidden})


def base_python() -> str:
    """The Python install's own interpreter (not the venv's), for a run that must not see the venv."""
    for name in (f"python{sys.version_info[0]}.{sys.version_info[1]}", f"python{sys.version_info[0]}", "python"):
        path = Path(sys.base_prefix) / "bin" / name
        if path.exists():
            return str(path.resolve())
    return os.path.realpath(sys.executable)


def environment(own: str) -> dict:
    env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
    replay = replay_dir()
    if replay is not None:
        env[REPLAY_ENV] = str(replay)
    env.update(HOME=f"{own}/home", TMPDIR="/tmp", IPYTHONDIR=f"{own}/ipython", MPLCONFIGDIR=f"{own}/mpl",
               PYTHONDONTWRITEBYTECODE="1")
    return env


# -- starting and ending ----------------------------------------------------------------------------------------

@dataclass
class Program:
    """One program to start in the sandbox: ``argv``, ``env`` and ``cwd`` as the sandbox sees them, and the
    pipe ends of the grader's it keeps (every other one is closed before it runs)."""

    argv: list[str]
    env: dict
    cwd: str
    fds: list[int] = field(default_factory=list)
    outside: bool = False  # outside the sandbox's pid namespace (the relay): its processes cannot signal it


@dataclass
class Box:
    """A started sandbox: the launcher's process, how it is isolated, and its cgroup."""

    proc: subprocess.Popen
    mode: str                   # "root", "user namespace" or "off"
    cgroup: cgroups.Cgroup | None
    user: identity.Identity | None = None  # as root: the uid this sandbox alone runs as, held until it is gone
    outside: list[int] = field(default_factory=list)  # the relay: outside the pid namespace, ended here too
    stopped: bool = False
    memory_death: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def died_of_memory(self) -> bool:
        """Whether the sandbox ended because its memory passed the limit (pid 1's watchdog, or the cgroup's)."""
        if self.stopped:
            return self.memory_death
        code = self.proc.poll()
        if code == EXIT_MEMORY:
            return True
        return code is not None and self.cgroup is not None and self.cgroup.hit_memory_limit()

    def stop(self) -> None:
        """End every process of the sandbox and wait for them; remove its cgroup.  Safe to call twice."""
        if self.stopped:
            return
        self.memory_death = self.died_of_memory()
        self.stopped = True
        pid_ns = None if self.mode == "off" else _pid_namespace(self.proc.pid)
        try:
            if self.mode == "off":
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()  # pid 1 dies with it (PR_SET_PDEATHSIG), and the kernel ends its namespace
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        for pid in self.outside:  # they die with the launcher (PR_SET_PDEATHSIG); make sure, and wait
            _kill_if_ours(pid)
        if self.cgroup is not None:
            self.cgroup.remove()
        _wait_gone(pid_ns, self.outside)
        if self.user is not None:  # only now: no process of the uid is left for the next sandbox to meet
            self.user.release()


EXIT_MEMORY = 99  # the launcher's code when its watchdog ended the sandbox (``_sandbox_init.EXIT_MEMORY``)


def _pid_namespace(launcher: int) -> str | None:
    """The sandbox's pid namespace: the one the launcher's children are in (read from the launcher, not from pid 1,
    which is not dumpable)."""
    try:
        return os.readlink(f"/proc/{launcher}/ns/pid_for_children")
    except OSError:
        return None


def _kill_if_ours(pid: int) -> None:
    """SIGKILL ``pid`` if it is still the sandbox's program (its command line names the kit's relay)."""
    try:
        if b"_kernel_relay.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _wait_gone(pid_ns: str | None, outside: list[int], wait: float = 5.0) -> None:
    """Wait until no process of the sandbox's pid namespace, and none of its outside programs, is left (the kernel
    kills the namespace's processes when pid 1 dies)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        left = any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in outside)
        if pid_ns is None and not left:
            return
        for name in os.listdir("/proc") if pid_ns is not None and not left else ():
            if name.isdigit():
                try:
                    if os.readlink(f"/proc/{name}/ns/pid") == pid_ns and _state(int(name)) != "Z":
                        left = True  # (a zombie holds nothing: it waits for the machine's init to reap it)
                        break
                except OSError:
                    continue
        if not left:
            return
        time.sleep(0.02)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def limits_text(group: cgroups.Cgroup | None) -> str:
    """How the whole sandbox is bounded, for the report."""
    tmpfs = ", ".join(f"{k} {v / 2**20:g} MiB" for k, v in (("/tmp", SIZES["tmp"]), ("/dev/shm", SIZES["shm"]),
                                                          ("its own folder", SIZES["own"])))
    watch = (f"pid 1 ends the sandbox when its processes' resident memory and its tmpfs mounts pass "
             f"{TOTAL_MEMORY / 2**30:g} GiB")
    whole = f"{watch}; {group.describe()}" if group is not None else (
        f"{watch}; no cgroup here: at most {PROCESS_LIMIT:,} processes for its user, which is its own")
    return (f"{whole}; per process {MEMORY_LIMIT / 2**30:g} GiB of address space and {FILE_SIZE_LIMIT / 2**20:g} MiB "
            f"per file; writable only tmpfs ({tmpfs})")


def start(programs: list[Program], host_dir: Path, binds: list[str], hide: list[str], off: str | None,
          dirs=(), files=None, stdout=subprocess.DEVNULL) -> Box:
    """Start ``programs`` in one sandbox (``off``: unisolated, the caller's explicit choice) and wait for the
    launcher's report.  ``host_dir`` is a fresh folder of the grader's; ``dirs`` and ``files`` are made in the
    programs' own folder."""
    own = str(host_dir / "own") if off else OWN
    user, syscalls = None, ""
    if not off:
        try:
            syscalls = base64.b64encode(syscall_filter.bpf()).decode()
            user = identity.take() if os.geteuid() == 0 else None
        except OSError as exc:  # no libseccomp, or no uid of the range left
            raise SandboxUnavailable(str(exc), transient=isinstance(exc, identity.NoIdentity)) from None
    group = None if off else cgroups.create(TOTAL_MEMORY + CGROUP_MARGIN, PROCESS_LIMIT)
    if not off:
        (host_dir / "root").mkdir()
    passed = [fd for p in programs for fd in p.fds]
    cfg = {"mode": "off" if off else "isolate", "uid": user.uid if user else None, "seccomp": syscalls,
           "newroot": str(host_dir / "root"), "own": own, "binds": binds,
           "hide": hide, "sizes": SIZES, "dirs": list(dirs), "files": dict(files or {}),
           "cgroups": [str(d) for d in group.dirs] if group else [],
           "programs": [{"argv": p.argv, "env": p.env, "cwd": p.cwd, "fds": p.fds, "outside": p.outside}
                        for p in programs],
           "limits": {"memory": MEMORY_LIMIT, "processes": PROCESS_LIMIT, "file_size": FILE_SIZE_LIMIT, "core": 0,
                      "total_memory": TOTAL_MEMORY}}
    status_r, status_w = os.pipe()
    box = None
    try:
        # the launcher dies with this process, even a SIGKILLed one (it checks that its parent is still this one)
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(LAUNCHER), str(status_w), str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.DEVNULL,
                                pass_fds=(status_w, *passed), start_new_session=True, cwd="/")
        box = Box(proc, "off" if off else "?", group, user)
        os.close(status_w)
        status_w = None
        proc.stdin.write(json.dumps(cfg).encode())
        proc.stdin.close()
        proc.stdin = None
        return _started(box, _read_report(status_r))
    except BaseException as exc:  # an interrupt too: a launcher no caller holds yet must not outlive the grade
        if box is not None:
            box.stop()
        else:
            if group:
                group.remove()
            if user:
                user.release()
        if isinstance(exc, OSError) and box is None:  # (fork or exec of the launcher: the machine ran short)
            raise SandboxUnavailable(f"the sandbox's launcher did not start ({exc})", transient=True) from None
        raise
    finally:
        for fd in (status_r, status_w):
            if fd is not None:
                os.close(fd)


def _started(box: Box, lines: list[dict]) -> Box:
    ok = next((line for line in lines if "ok" in line), None)
    box.outside = [p for line in lines if isinstance(line.get("outside"), list) for p in line["outside"]
                   if isinstance(p, int)]
    if ok is None or ok.get("ok") is not True:
        why = str(ok.get("why", "")) if ok else ""
        box.stop()
        # a launcher that died before it said anything ran out of something too (a fork, memory)
        raise SandboxUnavailable(why or f"the sandbox's launcher ended with status {box.proc.returncode} before it "
                                        "reported", transient=bool(ok.get("transient")) if ok else True)
    if box.mode == "off":
        return box
    box.mode = str(ok.get("mode"))
    if ok.get("root") != "/":  # chroot, not pivot_root: the outer process still sees the old root
        box.stop()
        raise SandboxUnavailable("pivot_root is not available on this machine")
    return box


def _read_report(fd: int) -> list[dict]:
    """The launcher's JSON lines, read until it closes the pipe (its report is complete then)."""
    data = b""
    deadline = time.monotonic() + START_TIMEOUT
    while len(data) < 65536:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxUnavailable(f"the sandbox's launcher did not report within {START_TIMEOUT:g} s")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    out = []
    for line in data.decode(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out
