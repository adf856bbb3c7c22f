"""The course: each lab's checks, by interview question, above the grading engine.

Why apart from :mod:`pipeline_kit.grading`: the engine (sandbox, kernel, wire, batch, gradebook) grades any lab it
is handed and knows none by name; a lab is its canonical notebook in ``solutions/`` plus its checks here.  The
notebook's test cells call ``pipeline_kit.course.labs.labNN``; its metadata (``metadata.pipeline_kit.checks``)
names that module, so the engine reaches a lab's extra work -- the ``torchrun`` jobs it starts with fixed
arguments (``fixed_runs()``) -- through the notebook, never through an import of its own.

* :mod:`.questions` -- the checks, one module per interview question (``m044.py`` holds every ``m044_*`` check),
  and the vocabulary they share (``questions/common.py``).
* :mod:`.labs` -- one module per lab, re-exporting its questions' checks under the name its test cells use.
"""
