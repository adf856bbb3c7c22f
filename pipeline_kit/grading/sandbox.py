"""Where and how the student's kernel runs: a kernel spec that starts it inside ``_sandbox_init.py``.

Why a kernel spec: jupyter_client then starts, talks to and kills the kernel as usual (over IPC sockets in the
grade's work folder, which the kernel can still write), while everything about isolation happens in the first
process of the kernel, before any student code exists.  The grade's work folder
(``/tmp/pipeline-kit-grade-*``) holds the spec, the connection file, the sockets and the kernel's own cwd,
``HOME``, ``TMPDIR``, ``IPYTHONDIR`` and ``MPLCONFIGDIR``; the grader removes it when the grade ends.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..launch import REPLAY_ENV

KERNEL_NAME = "pipeline-kit-student"
MEMORY_LIMIT = 4 * 2**30       # bytes of address space per process (torch with gloo needs about 1.5 GiB)
PROCESS_LIMIT = 1024           # processes and threads of the sandbox's user
FILE_SIZE_LIMIT = 256 * 2**20  # bytes per file the kernel writes
ENV_KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TERM")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class KernelPlace:
    """The files of one kernel start: where the spec, the connection file and the status file are."""

    work: Path
    spec_dir: Path
    connection_file: Path
    ipc_prefix: Path
    status_file: Path
    sandboxed: bool

    def status(self) -> dict:
        """What ``_sandbox_init.py`` reported: ``{"ok": bool, "why": ...}``; empty before it ran."""
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}


SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
KIT_FILES = ("pipeline_kit", "book/data")  # what of the repository the kernel sees: the package and run data


KERNEL_REPLAY_ENV = "PIPELINE_KIT_KERNEL_TORCHRUN_REPLAY"


def replay_dir() -> Path | None:
    """The test suite's ``torchrun`` recordings, when the kernel replays them (:mod:`pipeline_kit.launch`).

    Why the kernel gets them: the given cells of labs 5, 6 and 8 start real jobs, and a test of the grading
    does not test those jobs (nbval runs the solutions' jobs for real).  The kernel replays when the grader
    replays (``PIPELINE_KIT_TORCHRUN_REPLAY``: the wrong-answer gradings) or when only the kernel should
    (``PIPELINE_KIT_KERNEL_TORCHRUN_REPLAY``: the full-marks gradings, whose grader runs its own jobs for
    real).  Only the grader's own environment can turn this on; the kernel sees the folder read-only.
    """
    replay = os.environ.get(KERNEL_REPLAY_ENV) or os.environ.get(REPLAY_ENV)
    return Path(replay).resolve() if replay and Path(replay).is_dir() else None


def visible_paths(solutions: Path) -> list[str]:
    """Host paths the kernel's new root shows (read-only): system folders, the Python install, the venv and
    ``sys.path``, and of the repository only :data:`KIT_FILES` (and the test suite's :func:`replay_dir`) --
    never a folder holding ``solutions``."""
    hidden = [solutions.resolve(), ROOT / "solutions", ROOT / ".git"]

    def allowed(p: Path) -> bool:
        if p == ROOT or p in ROOT.parents or p == Path("/"):
            return False
        return not any(h == p or p in h.parents or h in p.parents for h in hidden)

    wanted = [Path(p) for p in SYSTEM]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable), *sys.path}:
        if p and os.path.isdir(p):
            wanted += [Path(os.path.abspath(p)), Path(os.path.realpath(p))]
    wanted += [ROOT / k for k in KIT_FILES]
    replay = replay_dir()
    if replay is not None:
        wanted.append(replay)
    out: list[str] = []
    for p in sorted({p for p in wanted if allowed(p) and (p.exists() or p.is_symlink())}, key=str):
        if not any(Path(o) in p.parents for o in out):  # already visible through a bound parent
            out.append(str(p))
    return out


def hidden_paths(solutions: Path) -> list[str]:
    """Belt and braces: also cover the canonical notebooks should a bound folder hold them."""
    return [str(solutions.resolve())]


def prepare(work: Path, solutions: Path, sandbox: bool, tag: str) -> KernelPlace:
    """Write the kernel spec and the sandbox's config for one kernel start in ``work``."""
    run = work / f"kernel-{tag}"
    for sub in ("spec", "ipc", "home", "tmp", "ipython", "mpl", "cwd", "root"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    place = KernelPlace(work, run / "spec", run / "connection.json", run / "ipc" / "k", run / "status.json", sandbox)
    env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
    replay = replay_dir()
    if replay is not None:
        env[REPLAY_ENV] = str(replay)
    env.update(HOME=str(run / "home"), TMPDIR=str(run / "tmp"), IPYTHONDIR=str(run / "ipython"),
               MPLCONFIGDIR=str(run / "mpl"), PYTHONDONTWRITEBYTECODE="1")
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    if sandbox:
        config = {"work": str(work), "cwd": str(run / "cwd"), "status": str(place.status_file),
                  "newroot": str(run / "root"), "binds": visible_paths(solutions), "hide": hidden_paths(solutions),
                  "env": env, "memory": MEMORY_LIMIT, "processes": PROCESS_LIMIT,
                  "file_size": FILE_SIZE_LIMIT, "core": 0,
                  "off": "PIPELINE_KIT_SANDBOX=off" if os.environ.get("PIPELINE_KIT_SANDBOX") == "off" else None}
        (run / "sandbox.json").write_text(json.dumps(config))
        argv = [sys.executable, "-I", "-S", str(Path(__file__).with_name("_sandbox_init.py")),
                str(run / "sandbox.json"), "--", *kernel]
    else:
        argv = kernel
    spec = {"argv": argv, "display_name": "pipeline-kit student kernel", "language": "python",
            "interrupt_mode": "message", "env": env, "metadata": {"debugger": False}}
    (place.spec_dir / KERNEL_NAME).mkdir(exist_ok=True)
    (place.spec_dir / KERNEL_NAME / "kernel.json").write_text(json.dumps(spec))
    return place


def unsandboxed_warning(why: str) -> str:
    return (f"grade: warning: the student's code runs without a sandbox ({why}): it can read solutions/, use the "
            "network and write your files; checks, hidden cases and the score still stay in the grader's process")
