"""Lab 10 (planning a pipeline): typical wrong answers lose exactly their points, with feedback naming the mistake;
forged values score nothing; the checks' expected values are the planner's (rank_memory, its prediction,
deciding_factor)."""

import random

import nbformat
import pytest
from fairness_catalogue import lab10 as catalogue
from lab_grading import LABS, SOLUTIONS, assert_partial, grade_answers

from pipeline_kit.grading.engine import grade
from pipeline_kit.course.labs import lab10
from pipeline_kit.course.labs.common import LabCheckFailed
from pipeline_kit.grading.notebook import TEXT_STUB, is_manual, merge, nbgrader_meta, read_notebook
from pipeline_kit.course.questions import plan_problem
from pipeline_kit.layout import even_split

LAB = "lab10_planning"


def _answer(gid: str) -> str:
    nb = nbformat.read(str(SOLUTIONS / f"{LAB}.ipynb"), as_version=4)
    return next(c.source for c in nb.cells if nbgrader_meta(c).get("grade_id") == gid)


def kit_terms(model, config):
    """The kit's own terms (what a right memory_terms returns)."""
    return [{t: getattr(r, t) for t in lab10.TERMS} for r in plan_problem.sized(model, config)]


BEST = plan_problem.best()
CHOICE = {"schedule": BEST.schedule, "pp": BEST.pp, "chunks": BEST.chunks, "microbatches": BEST.microbatches,
          "layout": BEST.layout}


# -- one whole notebook, graded: each wrong answer costs exactly its checks -------------------
@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """One P2P buffer where there are two, the average rank sized, decide upside down -- each in its own answer
    cell (a memory mistake that makes an over-budget design look as if it fits would cost the choice too)."""
    answers = {"memory": _answer("memory") + "\n\n" + catalogue.ONE_BUFFER,
               "choice": _answer("choice") + "\n\n" + catalogue.AVERAGE_RANK,
               "rule": catalogue.UPSIDE_DOWN}
    report = grade_answers(tmp_path, LAB, answers, timeout=120)
    assert_partial(report, {"plan_main_memory": "one for its gradient",
                            "plan_main_worst": "that is the average of your own ranks",
                            "plan_follow_rule": "upside down"})
    points = {c.name: c.points for c in report.checks}
    assert points["plan_main_memory"] == 2.5  # one term of six
    assert report.score == 15 - 0.5 - 2 - 2


@pytest.mark.slow
def test_forgeries_score_zero(tmp_path):
    """The untouched lab with forged answers: values equal to everything, the kit's checks and planner patched in
    the kernel -- the grader judges plain data with its own planner."""
    forged = '''
import sys
import pipeline_kit.plan.memory as memory
memory.rank_memory = lambda *a, **k: []
for module in list(sys.modules.values()):
    if getattr(module, "__name__", "").startswith("pipeline_kit.grading"):
        for attr in dir(module):
            if attr.startswith(("check_", "fail", "call", "expect_")):
                setattr(module, attr, lambda *a, **k: None)


class Any(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__


class Yes(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__


my_config = {"schedule": Yes("zbv"), "pp": 8, "chunks": 2, "microbatches": 12, "layout": Yes("E|L")}
my_worst_bytes = Any(1.0)
my_step_time_s = Any(1.0)
'''
    nb = nbformat.read(str(LABS / f"{LAB}.ipynb"), as_version=4)
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid == "choice":
            cell.source = forged
        elif gid == "factor":
            cell.source = "class Word(str):\n    def __eq__(self, other):\n        return True\n" \
                          "    __hash__ = str.__hash__\n\n\nmy_factor = Word('bubble')\n"
    path = tmp_path / "forged.ipynb"
    nbformat.write(nb, str(path))
    report = grade(path, seed=2)
    assert report.max_score == 15 and report.score == 0, report.text()


# -- the checks themselves, called directly --------------------------------------------------
def test_the_planners_best_scores_full_marks():
    worst = BEST.worst_memory_bytes
    lab10.check_feasible(CHOICE)
    lab10.check_worst(worst, CHOICE)
    lab10.check_step_time(BEST.step_time_s, CHOICE)
    lab10.check_baseline(plan_problem.baseline_of(BEST.pp).step_time_s, CHOICE)
    assert CHOICE["schedule"] != "1f1b"  # the lab's problem has something to explain against plain 1F1B
    lab10.check_factor("imbalance", CHOICE)


def test_the_problem_is_a_choice_not_a_transcription():
    """Several designs fit the budget and trade step time for memory: at least eight fit, at least three within
    NEAR_BEST of the fastest from at least three families, the leanest of those is not the fastest, and the budget
    rules out whole families -- so the choice is the student's to make, not one point on a plot."""
    search = plan_problem.lab_search()
    fit = [c for c in search.candidates if c.fits]
    good = [c for c in fit if c.step_time_s <= (1 + plan_problem.NEAR_BEST) * BEST.step_time_s]
    assert len(fit) >= 8 and len(good) >= 3 and len({c.schedule for c in good}) >= 3
    assert min(good, key=lambda c: c.worst_memory_bytes) is not BEST
    over = {c.schedule for c in search.candidates if c.refusal == "memory"}
    assert {"gpipe", "looped-bfs"} <= over - {c.schedule for c in fit}


def test_over_budget_hints_name_a_change_that_fits():
    """Each hint names what to change -- the layout, the shape or the family -- and a change of that kind fits."""
    even = {**CHOICE, "layout": str(even_split(24, 16))}  # the fastest family on the even split: over
    with pytest.raises(LabCheckFailed, match="fits at this pp and v with another layout") as info:
        lab10.check_feasible(even)
    assert "GB," not in str(info.value) and f"{BEST.worst_memory_bytes / 1e9:.2f}" not in str(info.value)
    gpipe = {"schedule": "gpipe", "pp": 8, "chunks": 1, "microbatches": 32, "layout": str(even_split(24, 8))}
    with pytest.raises(LabCheckFailed, match="no layout, pp or v makes gpipe fit"):
        lab10.check_feasible(gpipe)


def test_memory_terms_are_the_kits():
    cases = lab10.memory_cases() + lab10.hidden_memory_cases(random.Random(5))
    lab10.check_memory_terms(kit_terms, cases)

    def wrong(term, value):
        return lambda m, c: [{**t, term: value(t)} for t in kit_terms(m, c)]
    for term, value, text in [("optimizer", lambda t: 0, "the optimizer state is missing"),
                              ("optimizer", lambda t: 4 * t["weights"], "no fp32 master copy"),
                              ("gradients", lambda t: t["weights"], "fp32 main_grad"),
                              ("wgrad_kept", lambda t: 0, "W's kept gradients are missing"),
                              ("p2p_buffers", lambda t: t["p2p_buffers"] / 2, "one for its gradient")]:
        with pytest.raises(LabCheckFailed, match=text) as info:
            lab10.check_memory_terms(wrong(term, value), lab10.memory_cases())
        assert info.value.lost == pytest.approx(1 / 6)
    with pytest.raises(LabCheckFailed, match="one dict per rank"):
        lab10.check_memory_terms(lambda m, c: kit_terms(m, c)[0], lab10.memory_cases())


def test_feasibility_quotes_the_family_and_the_budget():
    refused = {"schedule": "interleaved", "pp": 1, "chunks": 2, "microbatches": 4, "layout": str(even_split(24, 2))}
    with pytest.raises(LabCheckFailed, match="interleaved refuses pp=1, M=4") as info:
        lab10.check_feasible(refused)
    assert info.value.lost == 1.0
    with pytest.raises(LabCheckFailed, match="M follows from the global batch"):
        lab10.check_feasible({**CHOICE, "microbatches": 16})
    over = {**CHOICE, "layout": str(even_split(24, 16))}  # ZB-V on the even split: its rank 0 is over
    with pytest.raises(LabCheckFailed, match="does not fit the budget") as info:
        lab10.check_feasible(over)
    assert info.value.lost == 0.5
    with pytest.raises(LabCheckFailed, match="cannot run"):
        lab10.check_worst(1.0, refused)


def test_worst_step_baseline_and_factor_name_the_mistake():
    totals = BEST.peak_memory_bytes
    with pytest.raises(LabCheckFailed, match="average rank"):
        lab10.check_worst(sum(totals) / len(totals), CHOICE)
    with pytest.raises(LabCheckFailed, match="in GB"):
        lab10.check_worst(BEST.worst_memory_bytes / 1e9, CHOICE)
    with pytest.raises(LabCheckFailed, match="milliseconds") as info:
        lab10.check_step_time(1e3 * BEST.step_time_s, CHOICE)
    assert info.value.lost == 0.5
    slow = {**CHOICE, "schedule": "1f1b", "chunks": 1, "layout": str(even_split(24, 8))}
    with pytest.raises(LabCheckFailed, match="more than 5 % slower"):
        lab10.check_step_time(plan_problem.baseline_of(8).step_time_s, slow)
    with pytest.raises(LabCheckFailed, match="the baseline itself"):
        lab10.check_factor("bubble", slow)
    lab10.check_factor(None, slow)  # choosing plain 1F1B costs the choice's points once, not the factor's too
    with pytest.raises(LabCheckFailed, match="balanced layout"):
        balanced = plan_problem.runnable({**slow, "layout": str(plan_problem._balanced(plan_problem.LAB_MODEL, 8))})
        lab10.check_baseline(balanced.step_time_s, CHOICE)
    with pytest.raises(LabCheckFailed, match="memory did not decide"):
        lab10.check_factor("memory", CHOICE)
    with pytest.raises(LabCheckFailed, match="choose one of"):
        lab10.check_factor("the bubble", CHOICE)


def test_decide_rule():
    def right(winner, other):
        return "memory" if other is None else max(lab10.FACTORS, key=lambda f: other[f] - winner[f])
    lab10.check_decide(right, lab10.decide_cases() + lab10.hidden_decide_cases(random.Random(3)))
    with pytest.raises(LabCheckFailed, match="upside down"):
        lab10.check_decide(lambda w, o: min(lab10.FACTORS, key=lambda f: o[f] - w[f]), lab10.decide_cases())
    with pytest.raises(LabCheckFailed, match="the other's largest part"):
        lab10.check_decide(lambda w, o: max(lab10.FACTORS, key=o.__getitem__), lab10.decide_cases())
    with pytest.raises(LabCheckFailed, match="does not fit at all"):
        lab10.check_decide(lambda w, o: "bubble", lab10.hidden_decide_cases(random.Random(0))[1:2])


# -- the sentence: a manually graded cell, scored by the instructor --------------------------------
SENTENCE = {"grade": True, "solution": True, "locked": False, "points": 2, "grade_id": "plan_follow_sentence",
            "schema_version": 3, "task": False}


def test_the_sentence_is_a_manual_cell_the_grader_lists_and_does_not_score():
    """A markdown cell nbgrader's formgrader scores (2 points beside the 15): released as nbgrader's text stub, the
    model answer's merge answered and the untouched lab's not (the full-marks and zero grades of
    test_grading_notebook.py list it so in their reports)."""
    solution, lab = read_notebook(SOLUTIONS / f"{LAB}.ipynb"), read_notebook(LABS / f"{LAB}.ipynb")
    [cell] = [c for c in solution["cells"] if is_manual(c)]
    assert cell["cell_type"] == "markdown" and nbgrader_meta(cell) == SENTENCE
    [released] = [c for c in lab["cells"] if is_manual(c)]
    assert released["source"] == TEXT_STUB and released["cell_type"] == "markdown"
    assert merge(solution, solution).manual == {"plan_follow_sentence": True}
    assert merge(lab, solution).manual == {"plan_follow_sentence": False}
    at = solution["cells"].index(cell)  # after the follow-up's last check, before the self-grade
    assert nbgrader_meta(solution["cells"][at - 2])["grade_id"] == "plan_follow_factor"
    assert solution["cells"][at + 1]["source"].startswith("## Your grade so far")
    prompt = solution["cells"][at - 1]["source"]
    assert "graded by your instructor" in prompt and prompt.count("* 1 point:") == 2
    assert "one or two sentences" in prompt


def test_the_model_sentence_quotes_the_solutions_own_numbers():
    """The model answer's milliseconds are the ones the solution's factor cell prints (nbval keeps those current)."""
    nb = read_notebook(SOLUTIONS / f"{LAB}.ipynb")
    cells = {nbgrader_meta(c).get("grade_id"): c for c in nb["cells"]}
    printed = "".join("".join(o.get("text", "")) for o in cells["factor"]["outputs"])
    factor = printed.split("decided by:")[1].strip()
    row = next(line for line in printed.splitlines() if line.strip().startswith(f"{factor}:"))
    mine, baseline = (f"{float(x):.2f} ms" for x in row.replace("plain 1F1B", "").replace("ms", "").split(":")[1]
                      .split(","))
    sentence = cells["plan_follow_sentence"]["source"]
    assert sentence.startswith(f"The {factor} decided it") and mine in sentence and baseline in sentence
