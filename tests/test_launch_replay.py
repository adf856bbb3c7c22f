"""``pipeline_kit.launch.torchrun`` replays a recorded job (the lab tests' wrong-answer gradings use it)."""

import json

from pipeline_kit import launch


def test_a_recorded_job_is_replayed_with_the_files_it_wrote(tmp_path, monkeypatch):
    args = ["--schedule", "1f1b", "--json", "/somewhere/else/summary.json"]
    key = launch._key(3, "no.such.module", args)
    (tmp_path / f"{key}.json").write_text(json.dumps({
        "nproc": 3, "module": "no.such.module", "args": launch._shown(args), "source": launch.source_digest(),
        "returncode": 7,
        "stdout": "recorded out", "stderr": "recorded err", "files": {"--json": '{"pp": 3}'}}))
    monkeypatch.setenv(launch.REPLAY_ENV, str(tmp_path))
    out = tmp_path / "out.json"
    proc = launch.torchrun(3, "--schedule", "1f1b", "--json", out, module="no.such.module")
    assert (proc.returncode, proc.stdout, proc.stderr) == (7, "recorded out", "recorded err")
    assert json.loads(out.read_text()) == {"pp": 3}  # written where this call asked, not where the recording ran


def test_a_job_without_a_recording_runs_for_real(tmp_path, monkeypatch):
    monkeypatch.setenv(launch.REPLAY_ENV, str(tmp_path))
    proc = launch.torchrun(1, module="no.such.module", timeout=120)
    assert proc.returncode != 0 and "no.such.module" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing recorded unless asked to


def test_a_recording_made_with_other_kit_sources_is_not_replayed(tmp_path, monkeypatch):
    """Once the kit's code changes, a recording of its old output would let a test pass on code that is gone."""
    key = launch._key(1, "no.such.module", [])
    (tmp_path / f"{key}.json").write_text(json.dumps({
        "nproc": 1, "module": "no.such.module", "args": [], "source": "0" * 20, "returncode": 0,
        "stdout": "recorded out", "stderr": "", "files": {}}))
    monkeypatch.setenv(launch.REPLAY_ENV, str(tmp_path))
    assert launch.stale_recordings(tmp_path) == [tmp_path / f"{key}.json"]
    proc = launch.torchrun(1, module="no.such.module", timeout=120)
    assert proc.returncode != 0 and "no.such.module" in proc.stderr  # it ran


def test_the_digest_covers_the_runtime_and_not_the_grader_or_the_course(tmp_path, monkeypatch):
    root = tmp_path / "kit"
    for rel in ("pipeline_kit/runtime/p2p.py", "pipeline_kit/grading/engine.py", "pipeline_kit/course/labs/lab01.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    monkeypatch.setattr(launch, "ROOT", root)
    digests = []
    for rel, text in [(None, None), ("pipeline_kit/grading/engine.py", "x = 2\n"),
                      ("pipeline_kit/course/labs/lab01.py", "x = 2\n"), ("pipeline_kit/runtime/p2p.py", "x = 2\n")]:
        if rel:
            (root / rel).write_text(text)
        launch.source_digest.cache_clear()
        digests.append(launch.source_digest())
    launch.source_digest.cache_clear()
    assert digests[0] == digests[1] == digests[2] != digests[3]


def test_a_batch_grade_replays_the_fixed_jobs_and_records_none_of_its_own(tmp_path, monkeypatch):
    """Issue 33: a class batch's grades share only the fixed jobs its warm-up recorded (SHARE_ENV); a job of one
    student's (any other) runs in that grade alone and is recorded nowhere, so no kernel or feedback sees it."""
    fixed, own = ["--schedule", "gpipe"], ["--schedule", "1f1b"]
    monkeypatch.setenv(launch.SHARE_ENV, str(tmp_path))  # the warm-up
    launch.torchrun(1, *fixed, module="no.such.module", timeout=120)
    assert [p.name for p in tmp_path.iterdir()] == [f"{launch._key(1, 'no.such.module', fixed)}.json"]
    monkeypatch.delenv(launch.SHARE_ENV)
    monkeypatch.setenv(launch.FIXED_ENV, str(tmp_path))  # a grade
    launch.replayed.clear()
    launch.torchrun(1, *fixed, module="no.such.module", timeout=120)
    assert launch.replayed == ["torchrun 1 --schedule gpipe"]
    launch.torchrun(1, *own, module="no.such.module", timeout=120)
    assert len(list(tmp_path.iterdir())) == 1, "a grade recorded a job of its own where other grades read"
