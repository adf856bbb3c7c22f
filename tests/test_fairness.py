"""Fair grading (issue 27): the same answer earns the same points, with the same feedback, under every seed.

For each lab with a catalogue in ``tests/fairness_catalogue``: the model answer scores full marks under 20
seeds; each typical wrong answer loses exactly the points its entry names, the same under all 20 seeds, with
feedback that is the same under every seed, counts its words right and teaches without handing over an answer:
it gives away no check's answer (its own included: the catalogue's ``REVEALS``) and never states the expected
value of a case it names (:func:`fairness.expected_values`).
"""

import ast
import importlib
import re

import pytest
from fairness import (CHINESE_SEED, SEEDS, STATES_ANSWER, english_left, expected_values, max_points, outcomes,
                      revealed, states_value)
from lab_grading import ROOT, lab_names

from pipeline_kit.course.questions.common import BOOK_CHAPTERS

CATALOGUES = {lab: importlib.import_module(f"fairness_catalogue.{lab[:5]}") for lab in lab_names()
              if importlib.util.find_spec(f"fairness_catalogue.{lab[:5]}") is not None}
ENTRIES = [(lab, w) for lab, module in CATALOGUES.items() for w in module.WRONG]


# "1 messages": a count of one with a plural noun (words that end in s but are singular are left alone)
ONE_PLURAL = re.compile(r"(?<![\d.,/])\b1 (?!of\b)([a-z]+s)\b")
SINGULAR_S = {"is", "was", "has", "does", "this", "plus", "minus", "pass", "process", "class", "less", "bias",
              "axis", "status", "its", "across", "as", "us", "ms", "gpus", "counts"}
# "8 message": a count above one with a singular noun the kit's feedback counts
MANY_SINGULAR = re.compile(r"(?<![\d.,/])\b(?:[2-9]|\d{2,}) (message|microbatch|statement|rank|byte|stage|layer|op"
                           r"|chunk|step|point|case)\b(?! \w+ing\b)")


def _grammar(text: str) -> list[str]:
    bad = [m.group(0) for m in ONE_PLURAL.finditer(text) if m.group(1) not in SINGULAR_S]
    return bad + [m.group(0) for m in MANY_SINGULAR.finditer(text)]


@pytest.mark.parametrize("lab", sorted(CATALOGUES))
def test_the_model_answer_scores_full_marks_under_every_seed(lab, one_thread):
    top = max_points(lab)
    for gid, by_seed in outcomes(lab).items():
        for seed, (points, feedback) in by_seed.items():
            assert points == top[gid], f"{lab} {gid} under seed {seed}: {points}/{top[gid]}: {feedback}"


@pytest.mark.parametrize("lab", sorted(CATALOGUES))
def test_every_known_wrong_form_has_three_typical_answers(lab):
    labels = [wrong.label for wrong in CATALOGUES[lab].WRONG]
    assert len(labels) == len(set(labels)), "two entries share a label"
    count: dict[str, int] = {}
    for wrong in CATALOGUES[lab].WRONG:
        for gid in wrong.loses:
            count[gid] = count.get(gid, 0) + 1
    assert {g: n for g, n in count.items() if n < 3} == {}, "test cells with fewer than 3 typical wrong answers"
    assert set(CATALOGUES[lab].REVEALS) <= set(max_points(lab)), "REVEALS names a test cell the lab does not have"


@pytest.mark.parametrize("lab,wrong", ENTRIES, ids=[f"{lab[:5]}-{w.label}" for lab, w in ENTRIES])
def test_a_wrong_answer_loses_the_same_points_under_every_seed(lab, wrong, one_thread):
    top = max_points(lab)
    got = outcomes(lab, wrong)
    for gid, by_seed in got.items():
        verdicts = {}
        for seed, (points, feedback) in by_seed.items():
            # the points, and the feedback's first failing case (a visible or fixed one): the hidden cases listed
            # after it are each seed's own draw; in Chinese (one seed), the same points
            first_case = feedback.split("; ")[0] if seed != CHINESE_SEED else by_seed[SEEDS[0]][1].split("; ")[0]
            verdicts.setdefault((points, first_case), []).append(seed)
        assert len(verdicts) == 1, f"{gid} differs by seed: " + " | ".join(
            f"seeds {seeds}: {points}/{top[gid]} {feedback!r}" for (points, feedback), seeds in verdicts.items())
    first = {gid: by_seed[SEEDS[0]] for gid, by_seed in got.items()}
    lost = {gid for gid, (points, _) in first.items() if points < top[gid]}
    assert lost == wrong.loses, f"lost points in {sorted(lost)}, expected {sorted(wrong.loses)}: " + "; ".join(
        f"{g}: {first[g][1]}" for g in sorted(lost ^ wrong.loses) if g in first)
    for gid, points in wrong.points.items():
        lost_points = round(top[gid] - first[gid][0], 2)
        assert lost_points == round(points, 2), f"{gid} lost {lost_points}, expected {points}"
    chinese = {gid: by_seed[CHINESE_SEED][1] for gid, by_seed in got.items() if gid in lost}
    untranslated = {gid: english_left(text) for gid, text in chinese.items() if english_left(text)}
    assert not untranslated, f"English left in the Chinese feedback: {untranslated}"
    catalogue = CATALOGUES[lab]
    for gid in lost:
        feedback = first[gid][1]
        assert feedback, f"{gid} lost points without feedback"
        wants, own_text = expected_values(lab, feedback, getattr(catalogue, "EXPECTED", {}).get(gid))
        for other, texts in catalogue.REVEALS.items():
            # looked for with the student's own values (and the cases) left out: a value the student's code returned
            # is theirs already, even where it happens to be another check's answer
            leaked = revealed(own_text, texts)
            assert not leaked, f"{gid}'s feedback gives away {other}'s answer {leaked}: {feedback!r}"
        stated = [found for want, inputs in wants for found in states_value(own_text, want, inputs)]
        stated += revealed(own_text, STATES_ANSWER)
        assert not stated, f"{gid}'s feedback states the expected value of its case {stated}: {feedback!r}"
        assert _grammar(feedback) == [], f"{gid}'s feedback miscounts: {_grammar(feedback)} in {feedback!r}"
        assert len(re.findall(r"\(the book: .*?'\)", feedback)) == feedback.count("(the book: "), \
            f"{gid}'s feedback is cut inside its pointer to the book: {feedback!r}"


def _book_pointers():
    """Every ``book("chapter", "Section")`` call of the check modules, with where it is."""
    for path in sorted((ROOT / "pipeline_kit" / "course" / "questions").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "book":
                args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
                yield f"{path.name}:{node.lineno}", args


def test_every_pointer_to_the_book_names_a_section_it_has():
    """Feedback points to the section that teaches the idea: the chapter's title and a heading of that chapter."""
    pointers = list(_book_pointers())
    assert pointers, "no feedback points to the book"
    for where, args in pointers:
        assert len(args) == 2 and all(isinstance(a, str) for a in args), f"{where}: book() takes two literal strs"
        chapter, section = args
        assert chapter in BOOK_CHAPTERS, f"{where}: no chapter {chapter!r}"
        text = (ROOT / "book" / "chapters" / f"{chapter}.md").read_text()
        headings = re.findall(r"^#+ (.+?)\s*$", text, re.M)
        assert any(h == BOOK_CHAPTERS[chapter] or h.startswith(BOOK_CHAPTERS[chapter] + " (") for h in headings), \
            f"{where}: chapter {chapter!r} is not titled {BOOK_CHAPTERS[chapter]!r}"
        assert section in headings, f"{where}: {chapter}.md has no heading {section!r}"
