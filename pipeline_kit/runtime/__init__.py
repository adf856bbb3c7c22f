"""The real runtime: any validated Schedule on torch.distributed processes (needs torch).

Read it in this order: ``model.py`` (stages with pre/post-process), ``p2p.py`` (bounded, ordered
transfers), ``compute.py`` (what F / B / I / W do; ``split_backward.py``: how I and W share one
backward), ``executor.py`` (the walk over a rank's ops),
then ``pipeline_kit/run.py`` (the torchrun entry point).
"""
