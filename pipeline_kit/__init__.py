"""pipeline-kit: pipeline parallelism the way Megatron-LM does it, as a readable, runnable textbook.

One schedule representation (per-rank ordered ops) drives the validator, the simulator, the
drawings, the real torch.distributed runtime and the graders.  Importing the package imports no
torch; only :mod:`pipeline_kit.runtime` needs it.
"""

__version__ = "0.1.0"
