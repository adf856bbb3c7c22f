"""The labs' instructions in another language, from gettext catalogs beside the solutions (``make-labs --lang zh``).

Why catalogs and not a second set of notebooks: ``solutions/`` stays the one source of every lab.  Each markdown
cell of a solution is cut into paragraphs (a blank line apart; a fenced code block stays whole); each paragraph is a
message of ``solutions/locale/<lang>/LC_MESSAGES/<lab>.po``, whose ``msgstr`` is its translation.  A lab in
``<lang>`` is its solution with those paragraphs replaced, then released as the English one is (nbgrader's
preprocessors, :func:`~pipeline_kit.grading.release.release_notebook`), so its cells, grade ids, checks and points
are the English lab's and one gradebook holds both.  When an English paragraph changes, ``--update`` keeps its old
translation marked fuzzy (or adds it untranslated), and the release refuses a lab with any such paragraph: an
English edit cannot reach students in another language without its translation.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from ..translation import markup_problems, read_catalog

LANGS = {"zh": "zh_CN"}  # --lang -> the catalog's locale
_FENCE = re.compile(r"^\s*(```|~~~)")


def paragraphs(text: str) -> list[str]:
    """A markdown cell's paragraphs: blank-line separated, a fenced code block kept whole."""
    out, block, fenced = [], [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        if not line.strip() and not fenced:
            if block:
                out.append("\n".join(block))
                block = []
            continue
        block.append(line)
    if block:
        out.append("\n".join(block))
    return out


def messages(nb) -> list[str]:
    """Every paragraph of every markdown cell an instructor wrote (an nbgrader answer cell is the student's)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and not cell.metadata.get("nbgrader", {}).get("solution"):
            out += [p for p in paragraphs(cell.source) if p not in out]
    return out


def catalog_path(solution: Path, lang: str) -> Path:
    return solution.parent / "locale" / LANGS[lang] / "LC_MESSAGES" / f"{solution.stem}.po"


def update(solution: Path, lang: str) -> tuple[int, int, int]:
    """Merge the solution's current paragraphs into its catalog (new ones untranslated, changed ones fuzzy with the
    old translation kept as a start); returns (messages, untranslated, fuzzy)."""
    import nbformat
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po
    template = Catalog(locale=LANGS[lang], project="pipeline-kit labs")
    for text in messages(nbformat.read(str(solution), as_version=4)):
        template.add(text)
    path = catalog_path(solution, lang)
    if path.exists():
        catalog = read_catalog(path)
        created = catalog.creation_date
        catalog.update(template, no_fuzzy_matching=False)
        catalog.obsolete.clear()
        catalog.creation_date = created  # (a catalog whose messages did not change is left byte for byte)
    else:
        catalog = Catalog(locale=LANGS[lang], project="pipeline-kit labs")
        for message in template:
            if message.id:
                catalog.add(message.id)
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0, omit_header=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_bytes() != buffer.getvalue():
        path.write_bytes(buffer.getvalue())
    return _tally([m.id for m in template if m.id], {m.id: m for m in catalog if m.id})


def counts(solution: Path, lang: str) -> tuple[int, int, int]:
    """(messages, untranslated, fuzzy) of the solution's paragraphs against its catalog."""
    import nbformat
    path = catalog_path(solution, lang)
    have = {m.id: m for m in read_catalog(path) if m.id} if path.exists() else {}
    return _tally(messages(nbformat.read(str(solution), as_version=4)), have)


def _tally(wanted: list[str], have: dict) -> tuple[int, int, int]:
    """(messages, untranslated, fuzzy) of the paragraphs ``wanted`` against the catalog's messages ``have``; a
    translation that lost a code span, math or a link target (:func:`~pipeline_kit.translation.markup_problems`)
    counts as fuzzy, as the book's do."""
    missing = sum(1 for w in wanted if w not in have or not have[w].string)
    fuzzy = sum(1 for w in wanted if w in have and have[w].string
                and (have[w].fuzzy or markup_problems(w, have[w].string)))
    return len(wanted), missing, fuzzy


def translated(nb, solution: Path, lang: str, problem) -> None:
    """Replace ``nb``'s instructions by their translations in place; ``problem(text)`` is raised (as it builds it)
    when a paragraph has none, or only a fuzzy one."""
    path = catalog_path(solution, lang)
    if not path.exists():
        raise problem(f"{solution.name}: no catalog {path} (make-labs --lang {lang} --update makes it)")
    have = {m.id: m for m in read_catalog(path) if m.id}
    n, missing, fuzzy = _tally(messages(nb), have)
    if missing or fuzzy:
        raise problem(f"{solution.name}: {missing} paragraph(s) untranslated and {fuzzy} fuzzy of {n} in {path}; "
                      "translate them (and remove their fuzzy flags), then make the labs again")
    for cell in nb.cells:
        if cell.cell_type == "markdown" and not cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "\n\n".join(have[p].string for p in paragraphs(cell.source))
            cell.source = _links(cell.source, lang)
    # the checks' feedback and the verdicts in the same language (pipeline_kit.language): the grader and the
    # tutor read it here; it changes no cell, so nbgrader's checksums and one gradebook for both languages hold
    nb.metadata.setdefault("pipeline_kit", {})["language"] = LANGS[lang]


def _links(text: str, lang: str) -> str:
    """A lab in ``lang`` sits in ``labs-<lang>/``, beside ``labs/``: its links to the built book go to that
    language's edition (``book/_build/html/<lang>/``)."""
    return text.replace("../book/_build/html/", f"../book/_build/html/{lang}/")
