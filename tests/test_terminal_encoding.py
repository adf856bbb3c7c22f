"""Any terminal (issue 36, item 7): under an encoding without the kit's "—", "…" and "✓" (an ISO-8859-1 locale,
``PYTHONIOENCODING=latin-1``) a command prints what it can and replaces the rest -- never a UnicodeEncodeError
after its work is done.  Real processes, since the stream's encoding is the process's."""

import os
import subprocess
import sys

import pytest

from pipeline_kit.grading import timeline_grid
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args: str, encoding: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline_kit", *args], capture_output=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONIOENCODING": encoding}, check=False)


def test_check_timeline_feedback_in_latin_1(tmp_path):
    grid = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=1))
    early = tmp_path / "early.txt"
    early.write_text(grid.replace("r2: .  .  F0 F1 .  B0", "r2: .  .  F0 F1 B0 ."))
    utf8, latin = (_run("check-timeline", str(early), "--pp", "4", "--microbatches", "8", encoding=e)
                   for e in ("utf-8", "latin-1"))
    assert "B0 is too early — it needs".encode() in utf8.stdout  # the kit's own dash, which Latin-1 lacks
    assert latin.returncode == utf8.returncode and latin.stderr == b"", latin.stderr.decode("latin-1")
    assert b"B0 is too early ? it needs" in latin.stdout
    assert latin.stdout.decode("latin-1").replace("?", "") == utf8.stdout.decode().replace("—", "").replace(
        "…", "").replace("?", "")


@pytest.mark.slow
def test_a_grade_in_latin_1_prints_its_whole_report(tmp_path):
    """A drawing with a backward too early: its feedback carries the kit's dash."""
    from lab_grading import with_answers

    grid = timeline_grid(simulate(build_schedule("1f1b", 4, 8), fwd=1, bwd=1))
    early = grid.replace("r2: .  .  F0 F1 .  B0", "r2: .  .  F0 F1 B0 .")
    path = with_answers(tmp_path, "lab02_timelines", {"one_f_one_b_grid": f'one_f_one_b_grid = """\n{early}"""'})
    utf8, latin = (_run("grade", str(path), "--seed", "3", encoding=e) for e in ("utf-8", "latin-1"))
    assert "B0 is too early — it needs".encode() in utf8.stdout
    assert latin.returncode == utf8.returncode and latin.stderr == b"", latin.stderr[-2000:]
    assert b"B0 is too early ? it needs" in latin.stdout
    assert latin.stdout.count(b"\n") == utf8.stdout.count(b"\n")
