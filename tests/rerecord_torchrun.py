"""Record every ``torchrun`` job in ``tests/data/torchrun`` again, for real, with the kit's current sources.

Why: the lab tests replay these jobs (see ``lab_grading.py``), and a recording made with other kit sources is
stale -- the tests then run its job for real, and say so in their last lines.  A recording names its whole job
(processes, module, arguments; output paths are placeholders), so this runs each one again, with a temporary
file for each output, and rewrites it.  A job no recording names yet is recorded by running its test with
``PIPELINE_KIT_TORCHRUN_RECORD=1`` (``lab_grading.py`` says how)::

    python tests/rerecord_torchrun.py
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from lab_grading import RECORDINGS

from pipeline_kit import launch

PLACEHOLDER = re.compile(r"<(--[\w-]+) FILE>")


def rerecord(folder: Path = RECORDINGS) -> int:
    paths = sorted(folder.glob("*.json"))
    os.environ[launch.REPLAY_ENV], os.environ[launch.RECORD_ENV] = str(folder), "1"
    with tempfile.TemporaryDirectory(prefix="pipeline-kit-rerecord-") as tmp:
        for i, path in enumerate(paths, 1):
            rec = json.loads(path.read_text())
            args = [str(Path(tmp) / f"{m.group(1).lstrip('-')}-{i}") if (m := PLACEHOLDER.fullmatch(a)) else a
                    for a in rec["args"]]
            if launch._key(rec["nproc"], rec["module"], args) != path.stem:  # before the job writes anything
                print(f"{path.name}: its job has another key now; record it with its test instead (lab_grading.py)",
                      file=sys.stderr)
                return 1
            shown = " ".join(rec["args"])
            print(f"[{i}/{len(paths)}] {rec['nproc']} x {rec['module']} {shown}", flush=True)
            start = time.monotonic()
            proc = launch.torchrun(rec["nproc"], *args, module=rec["module"], timeout=300)
            print(f"  exit {proc.returncode} in {time.monotonic() - start:.1f} s, was {rec['returncode']}", flush=True)
    stale = launch.stale_recordings(folder)
    print(f"{len(paths)} recordings made again; {len(stale)} stale")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(rerecord())
