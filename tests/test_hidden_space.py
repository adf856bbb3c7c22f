"""Hidden cases no student can precompute (issue 33, item 5), and a seed no student is shown.

Lab 4's hidden cases once came from pp 2-8 and M 1-16: a notebook whose generators looked their answers up in a
table of the kit's outputs (a few kB, made offline with the kit) scored 8 / 10 under every seed.  Here that very
table is graded for real and scores 0 on the checks of the student's own generator, while the model answer keeps
full marks; the space the draws now come from is counted, and a table of it must not fit in a notebook by a wide
margin.  And the seed a grade drew its cases with is the instructor's: ``grade --json`` records it, the text
report and ``grade_me()`` never show it.
"""

import json
import random
import subprocess
import sys

import pytest
from lab_grading import SOLUTIONS, with_answers

from pipeline_kit.course.labs import lab04
from pipeline_kit.course.questions import m043
from pipeline_kit.course.questions.common import drawn
from pipeline_kit.grading import self_grade
from pipeline_kit.grading.engine import grade
from pipeline_kit.limits import MAX_NOTEBOOK_BYTES
from pipeline_kit.schedules import one_f_one_b
from pipeline_kit.sim import simulate

LAB = "lab04_1f1b_generator"
OWN = ("m043_main_phases", "m043_main_warmup", "m043_main_dependencies")  # the student's own generator
OLD_KEYS = [(pp, m, r) for pp in range(1, 9) for m in range(1, 17) for r in range(pp)]  # the old space, fixed cases too


def _old_draws(rng) -> list:
    """The draws before issue 33: the fixed edge cases, then four (pp, M) of pp 2-8, M 1-16."""
    return drawn(rng, 4, lambda r: (r.randint(2, 8), r.randint(1, 16)), fixed=m043.FIXED)


def _table_answers() -> dict[str, str]:
    """Answer cells that look the kit's outputs up in dict literals over the old space (KeyError elsewhere)."""
    phases, order, peak = {}, {}, {}
    for pp, m, r in OLD_KEYS:
        phases[pp, m, r] = lab04.shaped(lab04.megatron_warmup(pp, m, r), m)
        order[pp, m, r] = [op.text() for op in one_f_one_b(pp, m).ranks[r]]
        peak[pp, m, r] = simulate(one_f_one_b(pp, m)).peak_activations[r]
    deadlock = {"pp": 2, "microbatches": 2, "ranks": [["F0", "B0", "F1", "B1"], ["F0", "F1", "B0", "B1"]]}
    return {
        "phases": f"PHASES = {phases!r}\n\n\ndef one_f_one_b_phases(pp, microbatches, rank):\n"
                  "    return PHASES[pp, microbatches, rank]\n",
        "order": f"ORDER = {order!r}\n\n\ndef one_f_one_b_order(pp, microbatches, rank):\n"
                 "    return ORDER[pp, microbatches, rank]\n",
        "p2p_memory": f"PEAK = {peak!r}\n\n\ndef max_in_flight(pp, microbatches, rank):\n"
                      f"    return PEAK[pp, microbatches, rank]\n\n\ndeadlock_example = {deadlock!r}\n",
    }


def _functions(answers: dict[str, str]) -> dict:
    ns: dict = {}
    for source in answers.values():
        exec(source, ns)  # noqa: S102 -- the table answers written above
    return ns


def test_a_table_of_the_old_space_passed_the_old_draws():
    """The attack this file is about: the table passes every check on the old draws, under any seed."""
    ns = _functions(_table_answers())
    for seed in range(5):
        cases = _old_draws(random.Random(seed))
        lab04.check_phases(ns["one_f_one_b_phases"], cases)
        lab04.check_warmup(ns["one_f_one_b_phases"], cases)
        lab04.check_order(ns["one_f_one_b_order"], cases, phases=ns["one_f_one_b_phases"])
        lab04.check_p2p_memory(ns["max_in_flight"], ns["deadlock_example"], cases)


@pytest.mark.slow
def test_a_table_of_the_kits_outputs_scores_0_on_the_own_generator_checks(tmp_path, seed=12345):
    """One seed: the same answers earn the same points under every seed (tests/test_fairness.py), and each failing
    check now runs every case (to list them all), so each seed costs a whole grade of the attack (13 s)."""
    answers = _table_answers()
    path = with_answers(tmp_path, LAB, answers)
    assert path.stat().st_size < 200_000  # the whole attack: a notebook of a few hundred kB at most
    report = grade(path, seed=seed)
    by_name = {c.name: c for c in report.checks}
    for gid in OWN:
        assert by_name[gid].points == 0, f"{gid}: {by_name[gid].points} / {by_name[gid].max_points}"
        assert "KeyError" in by_name[gid].feedback, by_name[gid].feedback
    memory = by_name["m043_main_p2p_memory"]  # the peak's table fails too; the deadlock example is the model's
    assert memory.points == memory.max_points / 2 and "KeyError" in memory.feedback, memory.feedback
    assert report.score == 1


def test_no_table_that_fits_in_a_notebook_can_hold_the_hidden_space():
    space = m043.hidden_space()
    assert space["budget"] == MAX_NOTEBOOK_BYTES
    # one byte per (pp, M, rank) answer of a per-rank check, one per op token of a whole order: both >= 100x
    assert space["rank_keys"] >= 100 * MAX_NOTEBOOK_BYTES
    assert space["order_tokens"] >= 100 * MAX_NOTEBOOK_BYTES
    assert space["phases_tokens"] >= 10**6 * MAX_NOTEBOOK_BYTES
    # the best table that fits passes all four drawn cases of a check with a chance of 1 in 10,000 or less
    assert space["rank_chance"] < 0.1 and space["order_chance"] < 0.1
    assert space["rank_all"] < 1e-4 and space["order_all"] < 1e-4
    # the count itself, on a space small enough to count by hand: pp 2..3, M 1..2 (keys: 2 * 2 + 3 * 2)
    small = dict(RANK_PP=(2, 3), RANK_M=(1, 2), ORDER_PP=(2, 3), ORDER_M=(1, 2), ORDER_OPS=8)
    old = {name: getattr(m043, name) for name in small}
    try:
        for name, value in small.items():
            setattr(m043, name, value)
        counted = m043.hidden_space(budget=4)
    finally:
        for name, value in old.items():
            setattr(m043, name, value)
    assert counted["rank_keys"] == 10 and counted["phases_tokens"] == 5 * (2 + 4)
    # orders: (2, 1) 4 tokens, (2, 2) 8, (3, 1) 6, (3, 2) 12 > 8 ops: three cases, 18 tokens; 4 bytes hold one
    assert (counted["order_cases"], counted["order_tokens"], counted["order_chance"]) == (3, 18, 1 / 3)
    # per rank: pp 2 (no middle rank) costs 2 keys for half the cases, pp 3 two more for the other half
    assert counted["rank_chance"] == 1.0
    assert "205x" in m043.hidden_space_text() and "202x" in m043.hidden_space_text()


def test_the_drawn_cases_come_from_the_wide_space():
    ranks_seen, orders_seen = [], []
    for seed in range(40):
        cases = lab04.hidden_order_cases(random.Random(seed), per_rank=True)
        assert cases[:len(m043.FIXED)] == m043.FIXED
        for pp, m, ranks in cases[len(m043.FIXED):]:
            assert 2 <= pp <= 1024 and 1 <= m <= 8192 and ranks[0] == 0 and ranks[-1] == pp - 1
            assert len(ranks) == min(pp, 4) and list(ranks) == sorted(set(ranks))
            ranks_seen.append(pp)
        cases = lab04.hidden_order_cases(random.Random(seed))
        assert cases[:len(m043.FIXED)] == m043.FIXED
        for pp, m in cases[len(m043.FIXED):]:
            assert 2 <= pp <= 256 and 1 <= m <= 4096 and 2 * pp * m <= 65_536
            orders_seen.append((pp, m))
    assert max(ranks_seen) > 512 and max(pp for pp, _ in orders_seen) > 128
    assert sum(1 for pp, m in orders_seen if pp <= 8 and m <= 16) <= 1  # the old space: next to never


# -- the seed is the instructor's ------------------------------------------------------------------------------

SEED = 12345


def _grade_command(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline_kit", "grade", str(SOLUTIONS / f"{LAB}.ipynb"),
                           "--seed", str(SEED), *options], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def json_report() -> dict:
    out = _grade_command("--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_the_seed_is_in_the_json_report_only(json_report):
    assert json_report["seed"] == SEED
    assert json_report["score"] == json_report["max_score"] == 10  # the model answer keeps full marks
    out = _grade_command()
    assert out.returncode == 0, out.stderr
    assert f"{LAB}.ipynb: 10 / 10" in out.stdout
    assert str(SEED) not in out.stdout + out.stderr
    assert "hidden cases drawn afresh for this grade (--json records their seed, for the instructor)" in out.stdout


@pytest.mark.slow
def test_grade_me_shows_no_seed(json_report, monkeypatch):
    """``grade_me()``'s table and notes, what it displays and the report it keeps hold no seed (its grader is the
    one above: the ``--json`` report, as ``run_grader`` returns it)."""
    shown = self_grade.SelfGrade(dict(json_report), "lab04.ipynb as saved at 10:00:00", [], lambda name: True)
    assert str(SEED) not in repr(shown) and str(SEED) not in shown._repr_html_()
    assert "Hidden cases were drawn afresh for this self-grade" in repr(shown)
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    monkeypatch.setattr(self_grade, "run_grader", lambda path, seed, progress: (dict(json_report), []))
    with capture_output() as out:
        graded = self_grade.grade_saved(str(SOLUTIONS / f"{LAB}.ipynb"), None, lambda lab, gid: False, {}, [])
    assert "seed" not in graded.report and graded.report["score"] == 10
    displayed = [str(o.data) for o in out.outputs] + [repr(graded), graded._repr_html_()]
    assert displayed and not [text for text in displayed if str(SEED) in text]
