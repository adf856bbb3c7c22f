"""The checks the labs' test cells call: one module per lab, feedback for the typical wrong answers.

A check passes silently or raises :class:`LabCheckFailed` (an ``AssertionError``) whose message is
the feedback the grader prints, so the rubric text lives here, tested, and not in notebook cells.
"""
