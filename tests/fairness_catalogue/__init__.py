"""Each lab's typical wrong answers, for the fairness tests (``tests/fairness.py`` says how they are run).

A module ``labNN.py`` here defines ``WRONG`` (a list of :class:`fairness.Wrong`) and ``REVEALS`` ({test cell:
[text that gives its answer away]}); every test cell that any entry makes lose points has at least three entries.
"""
