"""The labs and the checks' feedback name the book's sources for what they are (book/intro.md, "The sources"): the
interview question bank, the textbook chapter, the model answer -- never "the seeds", "a seed figure", "the seed
model" or the preset's old name ``seed-pp8`` (it is ``bank-pp8``).  "seed" is left only in its random-number
sense, and only in the few forms :data:`RANDOM_SEED` lists."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "labs").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
CHECK_MODULES = sorted((ROOT / "pipeline_kit" / "course" / "questions").glob("*.py")) + \
    sorted((ROOT / "pipeline_kit" / "course" / "labs").glob("*.py"))

# Every "seed" that may stay: each means a random seed.  Keep it this short; a new entry needs a reason.
RANDOM_SEED = (
    "--seed",  # the option of pipeline_kit.run (lab 7's experiment holds it fixed) and of `grade`
    "a different seed changes the data order and the initial weights",  # lab 7's feedback on a changed --seed
)
FIELD = "seed"  # a string constant that is just this word: the random-seed field of ModelSpec / GPTConfig / run args

# Docstrings are the developers' text, where "seed" is the random seed throughout ("under every seed"): there
# only the source-document sense is refused.
SOURCE_SENSE = re.compile(r"\bseeds'|\bthe seed's\b|\bthe seeds\b|\bseed-pp8\b|"
                          r"\bseed (model|figure|answer|document|question|rubric|setup|case|run|text)s?\b", re.I)


def _leftover(text: str) -> bool:
    for allowed in RANDOM_SEED:
        text = text.replace(allowed, "")
    return re.search("seed", text, re.I) is not None


def _cells(path: Path):
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        source = cell["source"]
        yield index, cell["cell_type"], "".join(source) if isinstance(source, list) else source


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, nodes) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}


def _strings(path: Path):
    """(line, text, is_docstring) of every string constant of a module, f-strings' literal parts included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value, id(node) in docs


def test_the_notebooks_do_not_call_the_sources_seeds():
    assert len(NOTEBOOKS) >= 18, NOTEBOOKS
    found = [f"{path.relative_to(ROOT)} cell {index} ({kind}): {line.strip()}"
             for path in NOTEBOOKS for index, kind, source in _cells(path)
             for line in source.splitlines() if _leftover(line)]
    assert not found, ("'seed' in a notebook: name the source (the interview question bank, the textbook chapter, "
                       "the model answer) or, for a random seed, use a form in RANDOM_SEED:\n" + "\n".join(found))


def test_the_check_modules_do_not_call_the_sources_seeds():
    assert len(CHECK_MODULES) >= 20, CHECK_MODULES
    found = []
    for path in CHECK_MODULES:
        for lineno, text, is_doc in _strings(path):
            if is_doc:
                bad = [line for line in text.splitlines() if SOURCE_SENSE.search(line)]
            elif text == FIELD:
                continue
            else:
                bad = [line for line in text.splitlines() if _leftover(line)]
            found += [f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}" for line in bad]
    assert not found, ("'seed' in a check's string (feedback, names): say 'the interview question bank' (or the "
                       "other source's name), 'bank-pp8'; a random seed only in a form in RANDOM_SEED:\n"
                       + "\n".join(found))


def test_every_allowed_form_is_still_used():
    """An entry of RANDOM_SEED that nothing uses any more is removed, so the list stays as short as it can be."""
    text = "\n".join(source for path in NOTEBOOKS for _, _, source in _cells(path))
    text += "\n".join(value for path in CHECK_MODULES for _, value, is_doc in _strings(path) if not is_doc)
    assert [allowed for allowed in RANDOM_SEED if allowed not in text] == []


def test_each_lab_opens_with_its_chapter_and_links_that_open():
    """Issue 36: a lab's first cell names its chapter(s) by title, linked to the built book's page (which
    JupyterLab shows as a page, not raw MyST) and to the source for a reader without a build."""
    for path in sorted((ROOT / "labs").glob("lab*.ipynb")):
        first = "".join(json.loads(path.read_text())["cells"][0]["source"]).split("\n")
        line = next((ln for ln in first[:4] if ln.startswith("**Read first:**")), None)
        assert line, f"{path.name}: no 'Read first' line under its title"
        found = re.findall(r"\*([^*]+)\*, \[in the built book\]\(\.\./book/_build/html/chapters/([\w-]+)\.html\) "
                           r"\(\[its source\]\(\.\./book/chapters/([\w-]+)\.md\)", line)
        assert found, f"{path.name}: {line}"
        for title, html, md in found:
            chapter = ROOT / "book" / "chapters" / f"{md}.md"
            assert html == md and chapter.is_file(), f"{path.name}: {md}"
            heading = next(ln for ln in chapter.read_text().splitlines() if ln.startswith("# "))
            assert heading[2:].startswith(title), f"{path.name}: {title!r} is not {heading!r}"
