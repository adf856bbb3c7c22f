"""benchmarks/gpu_check.py: on a machine without CUDA it runs nothing and says so; its plan covers every family."""

import subprocess
import sys

import pytest

from runtime_helpers import ROOT

from pipeline_kit.schedules import SCHEDULES

torch = pytest.importorskip("torch")
SCRIPT = str(ROOT / "benchmarks" / "gpu_check.py")


def gpu_check(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the check really runs (minutes)")
def test_without_cuda_it_skips_cleanly():
    proc = gpu_check()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("gpu_check: no CUDA device here (torch.cuda.is_available() is False): skipped, "
                                   "nothing was run")


def test_plan_runs_every_family_on_pp_2_and_4_with_check_grads_and_grades_the_torchrun_labs():
    lines = gpu_check("--plan").stdout.splitlines()
    runs = [line for line in lines if line.startswith("torchrun")]
    assert len(runs) == 2 * len(SCHEDULES) and all("--check-grads" in line for line in runs)
    assert {(line.split()[3], line.split()[7]) for line in runs} == {(pp, s) for pp in "24" for s in SCHEDULES}
    assert lines[-3:-1] == [f"python -m pipeline_kit grade solutions/{lab}.ipynb --json --timeout 300"
                            for lab in ("lab05_p2p", "lab06_stages")]
    assert lines[-1] == ("python -m pipeline_kit plan --config tiny --gpus 2 --gpu-memory-gb 16 --global-batch 16 "
                         "--verify 2 --json   (--gpus: this box's GPU count)")  # the plan-and-verify case, last
    proc = gpu_check("--schedules", "pipedream")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "argument --schedules: unknown ['pipedream']" in proc.stderr
