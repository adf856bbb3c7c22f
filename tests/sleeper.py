"""A torchrun worker that says it is up and then sleeps (``--ignore-sigterm``: and shrugs off SIGTERM).

``launch.torchrun`` tests use it to have live workers within a second of the launch -- no torch
import -- so that stopping a job on its timeout is tested on workers that really run.
"""

import os
import signal
import sys
import time

if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"ready rank {os.environ.get('RANK')} pid {os.getpid()}", flush=True)
time.sleep(3600)
