"""The command lines of benchmarks/*.py behave like the kit's: ``--help`` runs nothing, a bad argument is one line.

Every script found by the glob below is covered, so a new benchmark is too: ``--help`` exits 0 at once with its
usage and nothing else; an unknown argument, a number out of range, and an output path that cannot be written
end in one line ``python benchmarks/NAME: error: ...`` with exit status 2 -- before any work, so a refused run
leaves a file that was there as it was.  Real processes; no benchmark really runs here (each takes seconds to
minutes), so the file takes a few seconds.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from runtime_helpers import ROOT

from pipeline_kit.launch import stop_job

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))  # _*.py: shared helpers

# Options that take a number, and values each must refuse (0 where 0 is not allowed; too large where the
# benchmark or pipeline_kit.limits bounds it).  Every option a --help shows with a value must be here or in
# OTHER_OPTIONS (test_every_option_with_a_value_is_covered), so a new numeric option is not left out.
NUMERIC = {
    "bench_class_grading.py": {"--students": ["0", "-1", "abc", "201"], "--jobs": ["0", "-1", "abc", "65"]},
    "bench_schedules.py": {"--repeat": ["0", "-1", "abc", "2.5", "101"]},
    "bench_plan.py": {"--repeat": ["0", "-1", "abc", "2.5", "21"]},
    "gpu_check.py": {"--pp": ["0", "-1", "abc", "2,", "2,2", "2000", "8"],
                     "--timeout": ["0", "-1", "abc", "nan", "inf", "1e7"]},
    "vs_torch_pipelining.py": {"--steps": ["0", "-1", "abc", "1", "100001"], "--warmup": ["-1", "abc", "100001"],
                               "--nproc": ["0", "-1", "abc", "65"], "--layers": ["0", "-1", "abc", "1025"],
                               "--hidden": ["0", "-1", "abc", "6"], "--seq-len": ["0", "-1", "abc"],
                               "--micro-batch-size": ["0", "-1", "abc"],
                               "--microbatches": ["0", "-1", "abc", "1000001"]},
}
OTHER_OPTIONS = {"gpu_check.py": {"--schedules", "--json"}, "bench_class_grading.py": {"--json"},
                 "vs_torch_pipelining.py": {"--schedules"},
                 "bench_static_explorer.py": {"--book"}, "bench_suite.py": {"--json"}}


def bench(name: str, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``benchmarks/NAME ARGS``; one that outlives ``timeout`` (it ran a benchmark: a bug) is stopped with
    everything it started -- its own session, so torchrun and its workers too."""
    cmd = [sys.executable, str(BENCHMARKS / name), *args]
    t0 = time.monotonic()
    with subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_job(proc)
            pytest.fail(f"{name} {' '.join(args)} still ran after {timeout:g} s")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), time.monotonic() - t0


def refused(name: str, *args: str) -> str:
    """Run a command line that must be refused; the one error line it printed (exit 2, nothing on stdout)."""
    proc, _ = bench(name, *args)
    lines = proc.stderr.splitlines()
    assert (proc.returncode, len(lines), proc.stdout) == (2, 1, ""), (args, proc.returncode, proc.stderr[-2000:])
    assert lines[0].startswith(f"python benchmarks/{name}: error: "), lines[0]
    return lines[0]


def test_the_glob_finds_the_benchmarks():
    assert {"bench_balance.py", "bench_schedules.py", "gpu_check.py", "vs_torch_pipelining.py"} <= set(SCRIPTS)
    assert set(NUMERIC) | set(OTHER_OPTIONS) <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_exits_0_at_once_and_runs_nothing(name):
    proc, took = bench(name, "--help")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    assert proc.stdout.startswith(f"usage: python benchmarks/{name} [-h]")
    lines = proc.stdout.splitlines()
    options = lines.index("options:")
    assert "  -h, --help" in proc.stdout
    # nothing but the help: no line after the options' block, no table before the usage
    assert all(not line or line.startswith(" ") for line in lines[options + 1:]), proc.stdout
    assert took < 20, f"--help took {took:.1f} s"


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unknown_argument_is_one_line_with_exit_2(name):
    assert refused(name, "--bogus") == f"python benchmarks/{name}: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize("name, option, value", [(name, option, value) for name, options in NUMERIC.items()
                                                 for option, values in options.items() for value in values])
def test_a_number_out_of_range_is_one_line_naming_the_argument(name, option, value):
    line = refused(name, f"{option}={value}")
    assert f"argument {option}: " in line and ("'" + value in line or f" {value} " in line), line


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_option_with_a_value_is_covered(name):
    usage = " ".join(bench(name, "--help")[0].stdout.split("\n\n")[0].split())
    with_value = set(re.findall(r"\[(--[\w-]+) [A-Z]", usage))
    assert with_value == set(NUMERIC.get(name, ())) | OTHER_OPTIONS.get(name, set()), usage


def test_gpu_check_refuses_an_output_it_cannot_write_before_any_job():
    # --allow-cpu: were the path checked only at the end, a job would run here first (and print its line)
    proc, took = bench("gpu_check.py", "--json", "/nonexistent/dir/x.json", "--allow-cpu", "--skip-labs", "--pp", "2",
                       "--schedules", "1f1b")
    assert (proc.returncode, proc.stdout, len(proc.stderr.splitlines())) == (2, "", 1), proc.stderr[-2000:]
    assert proc.stderr.startswith("python benchmarks/gpu_check.py: error: argument --json: ")
    assert "'/nonexistent/dir/x.json'" in proc.stderr and "'/nonexistent/dir' does not exist" in proc.stderr
    assert took < 20, f"the refusal took {took:.1f} s"
    assert "is a folder" in refused("gpu_check.py", "--json", str(ROOT))


@pytest.mark.parametrize("args", [["--pp", "0"], ["--schedules", "pipedream"], ["--pp", "8"], ["--timeout", "-1"]])
def test_a_refused_gpu_check_leaves_an_existing_output_as_it_was(tmp_path, args):
    out = tmp_path / "results.json"
    out.write_bytes(b'{"from": "an earlier run"}\n\x00 not even text')
    refused("gpu_check.py", "--json", str(out), *args)
    assert out.read_bytes() == b'{"from": "an earlier run"}\n\x00 not even text'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary file left either


def test_errors_found_after_parsing_are_one_line_too(tmp_path):
    assert "holds no chapters/explore.html" in refused("bench_static_explorer.py", "--book", str(tmp_path))
    assert "interleaved needs pp >= 2" in refused("gpu_check.py", "--pp", "1")
    assert "argument --schedules: 'foo' is not a schedule PyTorch ships" in refused(
        "vs_torch_pipelining.py", "--schedules", "gpipe,foo")
    assert "argument --layers: zbv on 4 ranks has 8 stages" in refused("vs_torch_pipelining.py", "--layers", "4",
                                                                       "--schedules", "zbv")
    assert "(MAX_RUN_MEMORY_BYTES)" in refused("vs_torch_pipelining.py", "--hidden", "100000")
