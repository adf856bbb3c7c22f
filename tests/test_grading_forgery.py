"""Every way of forging a grade that issue 11 lists scores 0 (or is refused with exit status 2).

The score is decided only in the grader's process (README in pipeline_kit/grading): the student's kernel runs
sandboxed and hands over plain data.  One notebook carries several independent forgeries when each targets a
different check, so a forgery that worked would show up as points.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from lab_grading import LABS, ROOT, SOLUTIONS, replayed_torchrun, sandbox_processes, with_answers

from pipeline_kit.grading import names
from pipeline_kit.course.questions import grader_runs
from pipeline_kit.grading.sandbox import KERNEL_REPLAY_ENV
from pipeline_kit.grading.engine import grade
from pipeline_kit.grading.notebook import cell_kind, nbgrader_meta

LAB1, LAB4, LAB6 = "lab01_schedule_selection", "lab04_1f1b_generator", "lab06_stages"

# Test cells that still read a given cell's variable (the student can overwrite it): part B converts them to
# take the data from the lab module.  The test fails when this list is stale in either direction.
GIVEN_DATA_TO_CONVERT: dict = {}  # every test cell now takes given data from its check module


def _cli(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False, **kw)


def _untouched(tmp_path, lab, answers, name="student"):
    """The released lab (every answer still raising NotImplementedError) with some answer cells replaced."""
    nb = nbformat.read(str(LABS / f"{lab}.ipynb"), as_version=4)
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in answers:
            cell.source = answers.pop(gid)
    assert not answers, f"no cells {set(answers)}"
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    return path


READ_SOLUTIONS = """
import json, pathlib, pipeline_kit
root = pathlib.Path(pipeline_kit.__file__).resolve().parents[1]
nb = json.loads((root / "solutions" / "lab04_1f1b_generator.ipynb").read_text())
for cell in nb["cells"]:
    if cell["metadata"].get("nbgrader", {}).get("solution"):
        exec("".join(cell["source"]), globals())
"""

REPLACE_CHECKS = """
import sys
for module in list(sys.modules.values()):
    if getattr(module, "__name__", "").startswith("pipeline_kit.grading"):
        for attr in dir(module):
            if attr.startswith(("check_", "fail", "call", "expect_")):
                setattr(module, attr, lambda *a, **k: None)
get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)
"""


def test_forgeries_in_the_kernel_score_zero(tmp_path):
    """Reading the model answers from solutions/, replacing the check functions, silencing every error."""
    path = _untouched(tmp_path, LAB4, {"phases": READ_SOLUTIONS, "order": REPLACE_CHECKS})
    report = grade(path, seed=1)
    assert report.max_score == 10 and report.score == 0, report.text()


def test_reading_the_solutions_is_what_the_sandbox_stops(tmp_path):
    """The same notebook without the sandbox: the solutions are readable, so that forgery is real.  (Its path
    is written out, and the functions are bound by the cell: lab 4's own-generator checks run the cells that
    define them where there is no kit to find the path from.)"""
    literal = READ_SOLUTIONS.replace("import json, pathlib, pipeline_kit", "import json, pathlib").replace(
        "pathlib.Path(pipeline_kit.__file__).resolve().parents[1]", f"pathlib.Path({str(ROOT)!r})")
    literal += "one_f_one_b_phases, one_f_one_b_order = one_f_one_b_phases, one_f_one_b_order\n"  # bound in the cell
    path = _untouched(tmp_path, LAB4, {"phases": literal, "order": REPLACE_CHECKS, "p2p_memory": "pass"})
    warnings = []
    report = grade(path, seed=1, sandboxed=False, warn=warnings.append)
    assert report.score == report.max_score, report.text()
    assert warnings == [], "an unsandboxed run on purpose warns nobody"


def test_the_sandbox_off_is_only_the_callers_choice_and_the_report_says_so(tmp_path):
    """PIPELINE_KIT_SANDBOX=off: one line on stderr says what it means, the report says the code ran unisolated."""
    path = with_answers(tmp_path, LAB4, {})
    proc = _cli("grade", str(path), "--json", env={**os.environ, "PIPELINE_KIT_SANDBOX": "off"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["score"] == 10 and out["sandbox"] == {"isolated": False, "why": "PIPELINE_KIT_SANDBOX=off"}
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "without a sandbox (PIPELINE_KIT_SANDBOX=off)" in lines[0]
    assert "can read solutions/" in lines[0]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_sandbox_that_cannot_start_stops_the_grade_in_one_line(tmp_path):
    """Without CAP_SYS_ADMIN (a container's default) root cannot make namespaces: the grade stops with exit 2 and
    says how to grade without isolation -- it never falls back to an unsandboxed kernel by itself."""
    path = with_answers(tmp_path, LAB4, {})
    proc = subprocess.run(["setpriv", "--bounding-set=-sys_admin", sys.executable, "-m", "pipeline_kit", "grade",
                           str(path), "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "cannot be sandboxed here (cannot create namespaces (unshare: Operation not permitted))" in lines[0]
    assert "set PIPELINE_KIT_SANDBOX=off" in lines[0]


FORGED_LAB1 = {
    # a str subclass equal to everything, and an int subclass equal to everything
    "choose_schedule": ("class Yes(str):\n    def __eq__(self, other):\n        return True\n"
                        "    __hash__ = str.__hash__\n\n\n"
                        "def choose_schedule(pp, vpp=None):\n    return Yes('anything')\n"),
    # patch the kit in the kernel so that the simulator agrees with a wrong answer
    "differences": ("from pipeline_kit.sim.simulator import SimResult\n"
                    "SimResult.bubble_fraction = property(lambda self: 0.5)\n"
                    "differences = {}\n"
                    "for name, pp, vpp in (('no-pipelining', 1, None), ('1f1b', 4, None), ('interleaved', 4, 2)):\n"
                    "    result = simulate(select_schedule(pp, vpp)(8), fwd=1, bwd=2)\n"
                    "    differences[name] = {'p2p_messages': len(result.transfers),\n"
                    "                         'peak_rank0': result.peak_activations[0], 'bubble': 0.5}\n"),
    # write a fake report on the grader's stdout, then try to kill the grader
    "megatron_function": ("import os, signal, sys\n"
                          "os.write(1, b'{\"score\": 999, \"max_score\": 15, \"checks\": []}\\n')\n"
                          "sys.__stdout__.write('{\"score\": 999}\\n'); sys.__stdout__.flush()\n"
                          "os.write(2, b'{\"score\": 999}\\n')\n"
                          "megatron_function = {k: choose_schedule(1)\n"
                          "                     for k in ('no-pipelining', '1f1b', 'interleaved')}\n"
                          "for pid in (os.getppid(), 1, -1):\n"
                          "    try:\n"
                          "        os.kill(pid, signal.SIGKILL)\n"
                          "    except OSError:\n"
                          "        pass\n"),
}


def test_forged_values_and_a_kernel_that_attacks_the_grader(tmp_path):
    """One lab-1 notebook, four forgeries each aimed at its own check; the other checks keep their points and
    ``grade --json`` prints exactly one JSON document."""
    path = with_answers(tmp_path, LAB1, dict(FORGED_LAB1))
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:  # and an int subclass equal to everything in the follow-up
        if nbgrader_meta(cell).get("grade_id") == "follow_up":
            cell.source = cell.source.replace(
                "p2p_messages_pp1 = len(simulate(select_schedule(1)(8), fwd=1, bwd=2).transfers)",
                "class Any(int):\n    def __eq__(self, other):\n        return True\n    __ne__ = lambda s, o: False\n"
                "    __hash__ = int.__hash__\n\n\np2p_messages_pp1 = Any(7)")
    nbformat.write(nb, str(path))
    proc = _cli("grade", str(path), "--json", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # raises if stdout holds more than one document
    assert set(out) == {"notebook", "lab", "seed", "language", "score", "max_score", "questions", "sandbox", "checks"}
    assert out["sandbox"]["isolated"] is True
    assert out["lab"] == LAB1 and out["seed"] == 3
    failed = {c["name"]: c["feedback"] for c in out["checks"] if c["points"] < c["max_points"]}
    assert set(failed) == {"m041_main_selection", "m041_main_differences", "m041_main_source", "m041_follow_no_p2p"}
    assert "returned 'anything'" in failed["m041_main_selection"]
    assert "'bubble'] is 0.5, not what its simulation gives" in failed["m041_main_differences"]
    assert "megatron_function['no-pipelining'] is 'anything'" in failed["m041_main_source"]
    assert "p2p_messages_pp1 is 7" in failed["m041_follow_no_p2p"]
    # the patched SimResult forges only the bubble: that third of the differences check is lost, the measurements
    # the notebook really made (P2P count, rank 0's peak) keep theirs (partial credit, issue 27)
    points = {c["name"]: c["points"] for c in out["checks"]}
    assert points["m041_main_differences"] == 2
    assert out["score"] == 15 - 3 - 1 - 2 - 1
    assert "999" not in proc.stderr


@pytest.mark.parametrize("lab", ["../labs/lab04_1f1b_generator", "lab04_1f1b_generator.ipynb", "/etc/passwd", 4,
                                 ["lab04_1f1b_generator"], "LAB04_1F1B_GENERATOR"])
def test_metadata_names_a_lab_never_a_path(tmp_path, lab):
    path = with_answers(tmp_path, LAB4, {})
    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["pipeline_kit"]["lab"] = lab
    nbformat.write(nb, str(path))
    proc = _cli("grade", str(path))
    assert proc.returncode == 2, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "not a pipeline-kit lab" in proc.stderr, proc.stderr


def test_metadata_naming_the_students_own_notebook_is_refused(tmp_path):
    path = with_answers(tmp_path, LAB4, {})
    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["pipeline_kit"]["lab"] = str(path.with_suffix(""))
    nbformat.write(nb, str(path))
    proc = _cli("grade", str(path))
    assert proc.returncode == 2 and "not a pipeline-kit lab" in proc.stderr, proc.stderr


@pytest.mark.parametrize("where", ["notebook", "cell-nbgrader", "cell-pipeline_kit"])
def test_string_metadata_is_refused_in_one_line(tmp_path, where):
    path = with_answers(tmp_path, LAB4, {})
    raw = json.loads(path.read_text())
    if where == "notebook":
        raw["metadata"]["pipeline_kit"] = "lab04_1f1b_generator"
    else:
        raw["cells"][3]["metadata"][where.removeprefix("cell-")] = "solution"
    path.write_text(json.dumps(raw))
    proc = _cli("grade", str(path))
    assert proc.returncode == 2, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "must be a mapping" in proc.stderr, proc.stderr


def _solution_source(lab, gid):
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    return next(c.source for c in nb.cells if nbgrader_meta(c).get("grade_id") == gid)


def test_the_grade_ignores_the_kernels_torchrun(tmp_path):
    """Lab 6's gradient check runs its own torchrun job: a notebook whose torchrun is replaced by one that
    reports failure keeps its points, so a fake success cannot earn them either.  (Only the two answers
    these checks need are filled in, to keep the test short.)"""
    fake = ("import subprocess\nimport pipeline_kit.launch\n\n\n"
            "def torchrun(*args, **kwargs):\n"
            "    return subprocess.CompletedProcess(args, 1, 'grads match the single-process reference: False',"
            " 'fake')\n\n\npipeline_kit.launch.torchrun = torchrun\n")
    answers = {gid: _solution_source(LAB6, gid) for gid in ("costs", "logging")}
    answers["costs"] = fake + answers["costs"]
    grader_runs._runs.clear()  # the grader's job really runs here, not a result cached by an earlier grading
    with replayed_torchrun(KERNEL_REPLAY_ENV):  # the given cell's job replays; the grader's own runs for real
        report = grade(_untouched(tmp_path, LAB6, answers), seed=4)
    by_name = {c.name: c for c in report.checks}
    for name in ("m047_main_costs", "m048_main_logging"):
        assert by_name[name].points == by_name[name].max_points, by_name[name].feedback
    assert report.score == 6, report.text()


def test_given_data_audit():
    """The list of test cells that still read given-cell variables is exactly what names.audit finds."""
    found = {}
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        cells = [(cell_kind(c), nbgrader_meta(c).get("grade_id", ""), c.source) for c in nb.cells]
        hits = set(names.audit(cells))
        if hits:
            found[path.stem] = hits
    assert found == GIVEN_DATA_TO_CONVERT


def test_a_kernel_death_inside_a_check_costs_only_that_check(tmp_path):
    """The issue's 0/10 where 5/10 was earned: the student's function kills the kernel when a check calls it;
    the later checks still run (the grader restarts the kernel) and never see a NameError."""
    order = ("def one_f_one_b_order(pp, microbatches, rank):\n"
             "    if pp != 4:\n"
             "        import os\n"
             "        os._exit(1)\n"
             "    in_flight = min(pp - rank - 1, microbatches)\n"
             "    order = [f'F{m}' for m in range(in_flight)]\n"
             "    for m in range(in_flight, microbatches):\n"
             "        order += [f'F{m}', f'B{m - in_flight}']\n"
             "    return order + [f'B{m}' for m in range(microbatches - in_flight, microbatches)]\n")
    report = grade(with_answers(tmp_path, LAB4, {"order": order}), seed=5)
    by_name = {c.name: c for c in report.checks}
    assert by_name["m043_main_dependencies"].points == 0  # (its own-generator run, without the kit, is what died)
    assert "the kit-free run of one_f_one_b_order ended while it ran" in by_name["m043_main_dependencies"].feedback
    assert report.score == report.max_score - by_name["m043_main_dependencies"].max_points, report.text()


def test_sigterm_ends_the_grade_its_kernel_and_its_files(tmp_path, request):
    path = with_answers(tmp_path, LAB4, {"phases": "import time\ntime.sleep(120)\n"})
    tmp = Path(tempfile.mkdtemp(prefix="pk-", dir="/tmp"))  # its own TMPDIR, short enough for socket paths:
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))  # other grades meanwhile use others
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_kit", "grade", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 120
    work = None
    while time.monotonic() < deadline and work is None:
        kernels = list(tmp.glob("pipeline-kit-grade-*/kernel-*"))
        work = kernels[0].parent if kernels and sandbox_processes() else None
        time.sleep(0.2)
    if work is None:
        proc.kill()
        raise AssertionError(f"the grade never started its kernel: {proc.communicate()}")
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip() == "python -m pipeline_kit: interrupted", (proc.returncode, err)
    assert out == "" and not work.exists()
    assert sandbox_processes() == [], "processes of the kernel outlived the grade"


@pytest.mark.parametrize("sig,after", [(signal.SIGTERM, 0.1), (signal.SIGTERM, 0.4), (signal.SIGKILL, 0.1),
                                       (signal.SIGKILL, 3.0)],
                         ids=["sigterm-starting", "sigterm-started", "sigkill-starting", "sigkill-running"])
def test_a_grade_ended_at_any_moment_leaves_no_process(tmp_path, request, sig, after):
    """SIGTERM while the kernel starts (the CI's leak: a kernel no caller held yet), or SIGKILL, which runs no
    clean-up at all: every process of the sandbox dies with the grader (the launcher's PR_SET_PDEATHSIG)."""
    path = with_answers(tmp_path, LAB4, {"phases": "import time\ntime.sleep(120)\n"})
    tmp = Path(tempfile.mkdtemp(prefix="pk-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    before = set(sandbox_processes())
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_kit", "grade", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 120
    while not set(sandbox_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(after)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig if sig == signal.SIGTERM else proc.returncode == -sig, (proc.returncode, err)
    deadline = time.monotonic() + 5
    while (left := set(sandbox_processes()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes of the sandbox outlived the grade {after:g} s after it started its kernel"


def test_grading_imports_neither_torch_nor_matplotlib():
    code = ("import sys\nimport pipeline_kit.grading, pipeline_kit.grading.engine, pipeline_kit.grading.notebook\n"
            "import pipeline_kit.grading.wire, pipeline_kit.grading.serve, pipeline_kit.grading.sandbox\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "[]"
