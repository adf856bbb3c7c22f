"""Run several ``pipeline_kit.run`` configurations in one torchrun launch.

Starting 4 ranks costs about 8 s on 2 cores; the runtime tests pay it once and run each schedule
inside the same process group (each run makes its own P2P channels).
Usage: ``torchrun ... tests/torchrun_worker.py '[["--schedule", "gpipe", ...], [...]]'``.
"""

import json
import sys

import torch.distributed as dist

from pipeline_kit.run import main

for args in json.loads(sys.argv[1]):
    code = main(args)
    if code:
        sys.exit(code)
# As `python -m pipeline_kit.run` does: a gloo group left to interpreter shutdown can abort a rank on exit
# ("terminate called without an active exception") after every run has passed.
if dist.is_initialized():
    dist.destroy_process_group()
