"""``pipeline_kit.launch.torchrun`` replays a recorded job (the lab tests' wrong-answer gradings use it)."""

import json

from pipeline_kit import launch


def test_a_recorded_job_is_replayed_with_the_files_it_wrote(tmp_path, monkeypatch):
    args = ["--schedule", "1f1b", "--json", "/somewhere/else/summary.json"]
    key = launch._key(3, "no.such.module", args)
    (tmp_path / f"{key}.json").write_text(json.dumps({
        "nproc": 3, "module": "no.such.module", "args": launch._shown(args), "returncode": 7,
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
