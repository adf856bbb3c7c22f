"""Each lab's typical wrong answers, for the fairness tests (``tests/fairness.py`` says how they are run).

A module ``labNN.py`` here defines ``WRONG`` (a list of :class:`fairness.Wrong`) and ``REVEALS`` ({test cell:
[text that gives its answer away: a str, or a compiled regex such as "pp - r - 1" or "= <digits>" after a formula]}),
and may define ``EXPECTED`` ({test cell: {answer name: the check module's function that gives the expected value of
a case written with that name}}, where the check reads something other than the answer's own value); every test
cell that any entry makes lose points has at least three entries.
"""
