"""Issue 21: every way a notebook that answers nothing tried to get points, or to reach the grader's machine.

Each test grades an attack notebook -- the untouched lab with some answer cells replaced by the attack -- through
the real command line, and checks what the issue's "done when" asks: it scores 0 (or is refused, exit 2), in
bounded time, with the grader's own peak memory under 2 GB, the kit's tree unchanged, nothing the attack planted
left anywhere on the machine (every planted name carries a token the test searches for) and no process of the
sandbox alive.  One notebook carries several attacks when each targets a different kernel start or check.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from lab_grading import LABS, ROOT, SOLUTIONS, _ours, sandbox_processes

from pipeline_kit.grading import identity, remote
from pipeline_kit.grading.notebook import nbgrader_meta

LAB2, LAB4 = "lab02_timelines", "lab04_1f1b_generator"
TOKEN = "pk-attack-7f3a"
SEARCHED = ("/tmp", "/var/tmp", "/dev/shm", "/run", str(Path.home()), str(ROOT))
GRADER = ("import resource, sys\nfrom pipeline_kit.cli import main\nrc = main(sys.argv[1:])\n"
          "print('GRADER_MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
          "sys.exit(rc)\n")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux's")


def _notebook(tmp_path: Path, lab: str, answers: dict[str, str], extra_cells: list[str] = ()) -> Path:
    """The released lab (nothing answered) with ``answers`` in place of some answer cells (and extra cells)."""
    nb = nbformat.read(str(LABS / f"{lab}.ipynb"), as_version=4)
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in answers:
            cell.source = answers.pop(gid).replace("TOKEN", TOKEN)
    assert not answers, f"no cells {set(answers)}"
    nb.cells[1:1] = [nbformat.v4.new_code_cell(source) for source in extra_cells]  # replayed after every death
    path = tmp_path / "attack.ipynb"
    nbformat.write(nb, str(path))
    return path


def _tree() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def _planted() -> list[str]:
    """Every file or folder on the machine's writable places whose name carries the attack's token."""
    out = []
    for top in SEARCHED:
        for dirpath, dirnames, filenames in os.walk(top):
            out += [os.path.join(dirpath, n) for n in dirnames + filenames if TOKEN in n]
            dirnames[:] = [d for d in dirnames if not d.startswith(("pytest-of-", "_build")) and
                           (not d.startswith(".") or d in (".ipython", ".jupyter"))]
    return out


def _of_nobody() -> list[int]:
    """Processes of ``nobody`` (the sandboxes' user before each had its own) or of a uid of the sandboxes' range,
    that this test run started or that outlived their parents (another run's sandboxes may be alive meanwhile)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc.stat().st_uid == 65534 or proc.stat().st_uid in identity.UIDS) and \
                    (_ours(int(proc.name)) or (proc / "stat").read_text().rsplit(")", 1)[1].split()[1] == "1") and \
                    "Z" not in (proc / "stat").read_text().rsplit(")", 1)[1][:3]:
                out.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return out


def _grade(path: Path, *args: str, limit_s: float, env=None) -> tuple[subprocess.CompletedProcess, dict | None]:
    """``grade --json`` in a fresh process, checked for everything an attack must not achieve."""
    tree = _tree()
    # its own TMPDIR (short enough for socket paths), so a folder another grade left (one killed outright, on a
    # machine whose /tmp outlives a run) is not taken for this grade's
    tmp = Path(tempfile.mkdtemp(prefix="pk-", dir="/tmp"))
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", GRADER, "grade", str(path), "--json", *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=limit_s + 120,
                              env={**os.environ, "TMPDIR": str(tmp), **(env or {})}, check=False)
        left = sorted(p.name for p in tmp.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    took = time.monotonic() - start
    assert took < limit_s, f"the grade took {took:.0f} s (limit {limit_s:g} s)"
    lines = proc.stderr.strip().splitlines()
    rss = int(lines.pop().split()[1])
    assert rss < 2 * 2**20, f"the grader's peak memory was {rss / 2**20:.2f} GB"
    assert _tree() == tree, "the kit's tree changed"
    assert _planted() == [], "the attack left files behind"
    assert sandbox_processes() == [], "processes of the sandbox outlived the grade"
    assert _of_nobody() == [], "processes of the sandbox's user outlived the grade"
    assert left == [], f"the grade left {left} behind"
    if proc.returncode != 0:
        assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", (proc.returncode, proc.stderr)
        return proc, None
    assert lines == [], f"stderr: {lines}"  # no warning: the sandbox was on all along
    report = json.loads(proc.stdout)
    assert report["sandbox"]["isolated"] is True, report["sandbox"]
    return proc, report


# -- 1. files planted for the next kernel, the grader's files, links, FIFOs, a full disk -----------------------

PLANT = r'''
import os, pathlib, json
T = "TOKEN"
EVIL = ("import pathlib, pipeline_kit\n"
        "root = pathlib.Path(pipeline_kit.__file__).resolve().parents[1]\n"
        "for p in (root / 'pipeline_kit' / (T + '.txt'), pathlib.Path('/tmp') / (T + '-ran')):\n"
        "    p.write_text('ran')\n").replace("T + ", repr(T) + " + ")
home = pathlib.Path(os.environ.get("HOME", "/tmp"))
bases = {home, home.parent, home.parent.parent, pathlib.Path.cwd(), pathlib.Path.cwd().parent,
         pathlib.Path("/tmp"), pathlib.Path("/dev/shm"), pathlib.Path(os.environ.get("IPYTHONDIR", "/tmp"))}
def attempt(fn, *a):
    try:
        fn(*a)
    except OSError:
        pass
for base in bases:
    for sub in ("kernel-2/ipython/profile_default/startup", "kernel-2/cwd", "kernel-3/spec/pipeline-kit-student",
                "kernel-2/home", "profile_default/startup"):
        attempt(lambda: (base / sub).mkdir(parents=True, exist_ok=True))
    for name, text in (("kernel-2/ipython/profile_default/startup/00-" + T + ".py", EVIL),
                       ("profile_default/startup/00-" + T + ".py", EVIL),
                       ("kernel-2/cwd/ipykernel_launcher.py", EVIL), ("ipykernel_launcher.py", EVIL),
                       ("kernel-2/status.json", json.dumps({"ok": False, "why": T})),
                       ("kernel-3/status.json", "[1, 2, 3]"), ("status.json", json.dumps({"ok": False, "why": T}))):
        attempt(lambda: (base / name).write_text(text))
    for name, target in (("kernel-3/sandbox.json", "/dev/shm/" + T + "-a"), ("kernel-3/kernel.json", "/tmp/" + T),
                         ("connection.json", "/dev/shm/" + T + "-b"), ("kernel-4", "/dev/shm"),
                         ("kernel-3/connection.json", "/dev/zero")):
        attempt(os.symlink, target, base / name)
    for name in ("kernel-3/spec/pipeline-kit-student/kernel.json", "kernel-5"):
        attempt(os.mkfifo, base / name)
    attempt(lambda: (base / "kernel-6").write_text("a file where the grader makes a folder"))
with open(home / ("fill-" + T), "wb") as f:   # fill the disk: the folder is a 256 MiB tmpfs
    try:
        for _ in range(1024):
            f.write(b"x" * 2**20)
    except OSError:
        pass
os._exit(1)
'''


@pytest.mark.parametrize("cgroup", ["on", "off"])
def test_planted_files_and_processes_across_memory(tmp_path, cgroup):
    """Startup files, a cwd module, a forged start-up report, links, FIFOs, a file for a folder and a disk fill,
    planted by two kernels that then die; then three processes whose memory together passes the grade's limit
    (ended by the cgroup, or without one by pid 1's watchdog)."""
    memory = ("import multiprocessing as mp, time\n"
              "def hold(n):\n    b = bytearray(n); time.sleep(60)\n"
              "ps = [mp.get_context('fork').Process(target=hold, args=(int(2.5 * 2**30),)) for _ in range(3)]\n"
              "[p.start() for p in ps]\n[p.join() for p in ps]\n")
    path = _notebook(tmp_path, LAB4, {"phases": PLANT, "order": PLANT, "p2p_memory": memory})
    _, report = _grade(path, "--timeout", "90", limit_s=240, env={"PIPELINE_KIT_CGROUP": cgroup})
    assert report["score"] == 0, report
    by_name = {c["name"]: c["feedback"] for c in report["checks"]}
    assert "the kernel died" in by_name["m043_main_phases"], by_name
    assert "passed the memory limit of a grade" in by_name["m043_main_p2p_memory"], by_name


# -- 2. what the kernel sends: too much, too big to decode, an exception naming a kit module ---------------------

REPLY_BOMB = '''
import pipeline_kit.grading.serve as serve
serve.serve = lambda request, namespace: "A" * (40 * 2**20)
'''
SIM_BOMB = '''
import base64, json, pipeline_kit.grading.serve as serve
ops = [{"$": "Op", "v": ["F", m, 0]} for m in range(200)] + [{"$": "Op", "v": ["B", m, 0]} for m in range(200)]
schedule = {"$": "Schedule", "v": {"name": "x", "pp": 1, "microbatches": 200, "chunks": 1, "placement": "looped",
                                   "ranks": [ops]}}
frac = {"$": "fraction", "v": [3**80, 7**70]}
costs = {k: [frac] for k in ("fwd", "bwd", "wgrad", "activation_bytes")}
costs.update(comm=[], nbytes=[])
value = {"kind": "data", "v": {"$": "SimResult", "v": {"schedule": schedule, "costs": costs}}}
def forged(request, namespace):
    names = json.loads(request).get("names", [])
    return base64.b64encode(json.dumps({"values": {n: value for n in names}}).encode()).decode()
serve.serve = forged
'''
FOREIGN_EXCEPTION = '''
import base64, json, pipeline_kit.grading.serve as serve
def forged(request, namespace):
    req = json.loads(request)
    if req["op"] == "fetch":
        reply = {"values": {n: {"kind": "callable", "type": "function"} for n in req["names"]}}
    else:
        reply = {"raised": {"type": "main", "module": "pipeline_kit.__main__", "bases": ["Exception"],
                            "message": "TOKEN"}}
    return base64.b64encode(json.dumps(reply).encode()).decode()
serve.serve = forged
'''


def test_what_the_kernel_sends_is_bounded(tmp_path):
    """A 40 MB reply, a SimResult of huge Fractions and an exception that names ``pipeline_kit.__main__`` as its
    module: each refused before the grader does any work with it."""
    path = _notebook(tmp_path, LAB4, {"phases": REPLY_BOMB, "order": SIM_BOMB, "p2p_memory": FOREIGN_EXCEPTION})
    _, report = _grade(path, "--timeout", "20", limit_s=120)
    assert report["score"] == 0, report
    by_name = {c["name"]: c["feedback"] for c in report["checks"]}
    assert "over the limit of a reply" in by_name["m043_main_phases"], by_name
    assert "MAX_FRACTION_BITS" in by_name["m043_main_dependencies"], by_name
    assert "raised main: pk-attack" in by_name["m043_main_p2p_memory"], by_name


def test_an_exception_class_is_never_imported_from_the_module_the_kernel_names():
    before = set(sys.modules)
    exc = remote.rebuild_exception({"type": "Exit", "module": "pipeline_kit.__main__", "bases": ["ValueError"],
                                    "message": "x"})
    assert isinstance(exc, ValueError) and type(exc).__module__ == "student"
    assert set(sys.modules) - before == set()
    kit = remote.rebuild_exception({"type": "LayoutError", "module": "pipeline_kit.layout.spec", "message": "m"})
    assert type(kit).__module__ == "pipeline_kit.layout.spec"


# -- 3. time: many cells replayed after deaths, right answers that are slow ----------------------------------------

def test_many_cells_and_slow_answers_end_at_the_total_timeout(tmp_path):
    """2,000 trivial cells replayed after each of several kernel deaths, and answers that sleep just under the
    per-call limit: the grade ends at --total-timeout, the checks not run score 0 and say why."""
    slow = "import time\n" + next(c.source for c in nbformat.read(str(SOLUTIONS / f"{LAB4}.ipynb"), 4).cells
                                  if nbgrader_meta(c).get("grade_id") == "order").replace(
        "### BEGIN SOLUTION", "time.sleep(1.8)")
    die = "import os\nos._exit(1)\n"
    path = _notebook(tmp_path, LAB4, {"phases": die, "order": slow, "p2p_memory": die},
                     extra_cells=["x = 1"] * 2000)
    _, report = _grade(path, "--timeout", "2", "--total-timeout", "12", limit_s=45)
    assert report["score"] == 0, report
    assert any("total time limit of 12 s" in c["feedback"] for c in report["checks"]), report["checks"]


# -- 4. lab 4's own generator -------------------------------------------------------------------------------------

HIDDEN_ROUTES = {
    "phases": '''
def one_f_one_b_phases(pp, microbatches, rank):
    gen = getattr(__import__("pipeline_kit.schedules", fromlist=["x"]), "one_f" + "_one_b")
    ops = [op.text() for op in gen(pp, microbatches).ranks[rank]]
    w = min(pp - rank - 1, microbatches)
    return ops[:w], ops[w:len(ops) - w], ops[len(ops) - w:]
''',
    "order": '''
import importlib, pathlib, sys
_kit = importlib.import_module("pipeline_kit.schedules")
_gen = _kit.one_f_one_b
source = (pathlib.Path(_kit.__file__).parent / "generators.py").read_text()
_scope = {}
def one_f_one_b_order(pp, microbatches, rank):
    try:
        return [op.text() for op in _gen(pp, microbatches).ranks[rank]]
    except NameError:
        exec(source, _scope)
        return [op.text() for op in _scope["one_f_one_b"](pp, microbatches).ranks[rank]]
''',
}


def test_the_kit_generator_by_a_hidden_route(tmp_path):
    """The kit's generator by getattr/__import__, importlib, a reference kept from before, and exec of its source:
    the checks of the student's own generator run the answer cells where there is no kit, so all score 0."""
    path = _notebook(tmp_path, LAB4, dict(HIDDEN_ROUTES))
    _, report = _grade(path, limit_s=120)
    assert report["score"] == 0, report
    for check in report["checks"][:3]:
        assert "No module named 'pipeline_kit'" in check["feedback"], check
        assert "run it in a Python without the kit" in check["feedback"], check


# -- 5. the kit from anywhere ---------------------------------------------------------------------------------------

def test_a_clone_under_tmp_and_its_venv_under_var_tmp_grade_a_model_answer():
    """The sandbox mounts its private /tmp first and the kit and venv on top of it, so a kit under /tmp (and a venv
    under /var/tmp) grades a correct notebook with full marks."""
    kit, venv = (Path(parent) / f"pk-clone-{os.getpid()}" for parent in ("/tmp", "/var/tmp"))
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
        for name in files:
            if name.startswith(("pipeline_kit/", "solutions/", "labs/", "book/data/")):
                (kit / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, kit / name)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next(venv.glob("lib/python*/site-packages"))
        (site / "main-venv.pth").write_text(next(Path(sys.prefix).glob("lib/python*/site-packages")).as_posix())
        env = {**os.environ, "PYTHONPATH": str(kit)}
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pipeline_kit", "grade",
                               str(kit / "solutions" / f"{LAB4}.ipynb"), "--json"], capture_output=True,
                              text=True, cwd=kit, timeout=180, check=False, env=env)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["score"] == report["max_score"] == 10, report
        used = subprocess.run([str(venv / "bin" / "python"), "-c", "import pipeline_kit; print(pipeline_kit.__file__)"],
                              capture_output=True, text=True, cwd=kit, check=True, env=env).stdout
        assert used.startswith(str(kit)), used  # the clone's kit graded, not the checkout's
    finally:
        shutil.rmtree(kit, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
