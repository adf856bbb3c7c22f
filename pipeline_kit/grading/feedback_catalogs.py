"""The kit's catalogs kept in step with the source: every f-string and string of prose that a check, a verdict or one
of the book's figures can show is a message of ``pipeline_kit/locale/<lang>/LC_MESSAGES/<module>.po``, written as it
is in the source (:mod:`pipeline_kit.language` says why). ``make-labs --lang zh --update`` adds a new one, marks a
changed one fuzzy and drops one the source lost; ``--check`` (and the test suite) counts what is untranslated,
fuzzy, stale or lost.

Why an extractor of its own rather than Babel's: Babel (``pybabel extract``) takes the strings passed to ``_()``,
and the checks call no ``_()``; it is Babel's catalog, reader, writer and fuzzy update that this module uses. A
string is a message when its words outside the fields are prose (two words, or one among fields): a dictionary key,
a file name or a regular expression is not. A shorter one shown to students is marked by passing it to
:func:`pipeline_kit.language.translated` as it is written (``translated("passed")``); a noun ``plural(n, "noun")``
counts is a message of the context ``counted``; a drawing's single words (a legend's "forward") are messages in the
drawing modules and the book's cells. A docstring is not shown to a student, so it is not a message.
"""

from __future__ import annotations

import ast
import io
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..interrupts import write_file_atomically
from ..translation import markup_problems, read_catalog
from ..language import LOCALE, fields, pieces

KIT = Path(__file__).resolve().parent.parent
# what a student can read: the checks (every course module), the kit's errors a check passes on (the schedules', a
# deadlock's, a layout string's) and the grading modules whose words reach a notebook, a feedback page or a self-grade
SOURCES = ("course/**/*.py", "schedules/*.py", "sim/blocking_p2p.py", "layout/spec.py", "grading/verdict.py",
           "grading/tutor.py", "grading/self_grade.py", "grading/parts.py", "grading/rubric_table.py",
           "grading/report.py", "grading/kitfree.py", "grading/wire.py", "grading/kernel.py", "grading/engine.py",
           "grading/timeline.py", "grading/remote.py", "grading/gradebook.py")
_WORD = re.compile(r"[A-Za-z]{2,}")
_SPOKEN = re.compile(r"(?:(?<=\s)|^)[A-Za-z]{2,}(?=\s|$|[,.:;!?])")  # a word between spaces: not a name's part
_CODE_LIKE = re.compile(r"[_#{}\\/<>=@$]|^\s*$|^\s*-|\w\.\w")  # a name, a colour, markup, a path, a flag: not words
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_SKIPPED_CALLS = {"compile", "match", "search", "fullmatch", "sub", "findall", "split", "startswith", "endswith",
                  "encode", "decode", "strftime", "import_module"}
_KEYED_CALLS = {"get", "getattr", "hasattr", "pop", "setdefault"}  # the first argument is a key, a default is shown
_MARKING_CALLS = {"translated": 0}  # the argument a call shows as words, however short
COUNTED = "counted"  # the context of plural()'s nouns: "{n} {word}" in the language ("3 条消息"), measure word and all


# the words the book's figures and glued values show: the kit's drawing modules, and the book's code cells (where
# the repository holds the book) -- both editions run them once, the Chinese shows them translated
# (pipeline_kit.viz.editions, book/_ext/pk_i18n.py)
FIGURE_SOURCES = ("viz/timeline.py", "viz/diagrams.py", "viz/memory.py", "viz/sweeps.py", "viz/plan.py", "trace.py",
                  "layout/speedup.py", "plan/candidate.py", "plan/explain.py", "plan/verify.py", "plan/memory.py",
                  "plan/frameworks.py", "plan/shapes.py", "plan/search.py")
BOOK = KIT.parent / "book"
_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.M | re.S)


def sources() -> list[Path]:
    found = {p for pattern in SOURCES + FIGURE_SOURCES for p in KIT.glob(pattern)
             if p.name != "__init__.py" or p.stat().st_size}
    found |= set(BOOK.glob("chapters/*.md")) if BOOK.is_dir() else set()
    return sorted(found)


def domain(path: Path) -> str:
    """``course/questions/m042.py`` -> ``course.questions.m042``, ``book/chapters/bubble.md`` ->
    ``book.chapters.bubble``: the catalog's name."""
    root = KIT if path.is_relative_to(KIT) else KIT.parent
    return ".".join(path.relative_to(root).with_suffix("").parts)


def python_of(path: Path) -> str:
    """A module's source; a chapter's code cells, each at its own lines (the rest blank, magics and cell options
    too), so a message's location is the chapter's line."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".md":
        return text
    lines = [""] * (text.count("\n") + 1)
    for cell in _CODE_CELL.finditer(text):
        first = text.count("\n", 0, cell.start(1))
        for i, line in enumerate(cell.group(1).split("\n")):
            if not line.lstrip().startswith(("%", "!", ":")):
                lines[first + i] = line
    return "\n".join(lines)


def catalog_path(path: Path, lang: str) -> Path:
    return LOCALE / lang / "LC_MESSAGES" / f"{domain(path)}.po"


def _template(node: ast.AST) -> str:
    """A string or f-string as a template: text with literal braces doubled, each field as it is written."""
    if isinstance(node, ast.Constant):
        return node.value.replace("{", "{{").replace("}", "}}")
    out = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            out.append(value.value.replace("{", "{{").replace("}", "}}"))
        else:
            conversion = "" if value.conversion == -1 else "!" + chr(value.conversion)
            spec = "" if value.format_spec is None else ":" + _spec(value.format_spec)
            out.append("{" + ast.unparse(value.value) + conversion + spec + "}")
    return "".join(out)


def _spec(node: ast.JoinedStr) -> str:
    return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}" for v in node.values)


def is_prose(template: str) -> bool:
    """Two words or more (``"every op exactly once"``), or a word among fields (``"{shown} raised {name}: {exc}"``):
    a single word alone is a key, a name or a value."""
    cut = pieces(template)
    literal = " ".join(t for is_field, t in cut if not is_field)
    if len(_WORD.findall(literal)) >= 2 and " " in literal.strip():
        return True
    spoken = _SPOKEN.findall(_QUOTED.sub(" ", "\x00".join(t if not f else "\x00" for f, t in cut)))
    return bool(spoken) and any(is_field for is_field, _ in cut)  # ("{what}['pp']", "local[{k}]": code, not words)


def templates(path: Path) -> list[tuple[str, int, str | None]]:
    """``(template, line, context)`` for each message of a module, in source order, each once; the context is
    :data:`COUNTED` for a noun ``plural(n, "noun")`` counts, else None."""
    tree = ast.parse(python_of(path), str(path))
    drawn = not path.is_relative_to(KIT) or path.relative_to(KIT).as_posix().startswith("viz/")  # a legend's "forward"
    skipped: set[int] = set()
    marked: set[int] = set()  # translated("passed"): a message however short
    counted: set[int] = set()  # plural(n, "microbatch")
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skipped.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.JoinedStr):
            skipped.update(id(v) for v in node.values)
            for v in node.values:
                if isinstance(v, ast.FormattedValue) and v.format_spec is not None:
                    skipped.add(id(v.format_spec))
                    skipped.update(id(x) for x in v.format_spec.values)
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _SKIPPED_CALLS:
                skipped.update(id(a) for a in node.args)
            if name in _KEYED_CALLS:
                skipped.update(id(a) for a in node.args[:1 if name == "get" or name == "setdefault" else 2])
            if name in _MARKING_CALLS and len(node.args) > _MARKING_CALLS[name]:
                marked.add(id(node.args[_MARKING_CALLS[name]]))
            if name == "plural" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                counted.add(id(node.args[1]))
        if isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.IfExp):
            marked.update(id(x) for x in (node.value.body, node.value.orelse))  # {'more' if a > b else 'fewer'}
        if isinstance(node, ast.Compare):  # (" object at 0x" in text: a test, not a message)
            skipped.update(id(x) for x in [node.left, *node.comparators])
    out: dict[tuple[str, str | None], tuple[int, int]] = {}
    for node in ast.walk(tree):
        if id(node) in counted and isinstance(node.value, str):
            out.setdefault((node.value, COUNTED), (node.lineno, node.col_offset))
            continue
        if id(node) in skipped:
            continue
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            text = _template(node)
            literal = " ".join(t for is_field, t in pieces(text) if not is_field)
            shown = id(node) in marked or (drawn and not _CODE_LIKE.search(literal))
            if (is_prose(text) or (shown and _WORD.search(literal))) and (text, None) not in out:
                out[text, None] = (node.lineno, node.col_offset)
    return [(text, at[0], context) for (text, context), at in sorted(out.items(), key=lambda item: item[1])]


def _write(path: Path, catalog) -> None:
    from babel.messages.pofile import write_po
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=120, omit_header=False, sort_output=False, include_previous=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(str(path), buffer.getvalue().decode("utf-8"))


@dataclass
class Tally:
    messages: int = 0
    untranslated: list[str] = field(default_factory=list)   # "catalog: msgid"
    fuzzy: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)          # a catalog missing, or not the source's messages
    lost: list[str] = field(default_factory=list)           # a field or code span the translation lost or invented

    def problems(self) -> list[str]:
        return ([f"untranslated: {m}" for m in self.untranslated] + [f"fuzzy: {m}" for m in self.fuzzy]
                + [f"stale: {m}" for m in self.stale] + [f"lost: {m}" for m in self.lost])


def field_problems(msgid: str, msgstr: str) -> list[str]:
    """The fields and code spans ``msgstr`` lost or invented.  Every field must be shown (a number, a name, a
    value), except a conditional one (a plural's ``s``) that a language without plurals drops."""
    want, have = fields(msgid), fields(msgstr)
    out = [f"invents {f}" for f in have if f not in want]
    out += [f"loses {f}" for f in want if f not in have and " if " not in f]
    return out + [f"loses {m}" for m in markup_problems(msgid, msgstr) if not m.startswith("`{")]


def update(lang: str, only: set[str] | None = None) -> Tally:
    """Bring ``lang``'s catalogs in step with the source (Babel's fuzzy update; ``only``: these catalogs, by
    name); the tally after it."""
    from babel.messages.catalog import Catalog

    for path in sources():
        if only is not None and domain(path) not in only:
            continue
        found = templates(path)
        target = catalog_path(path, lang)
        if not found:
            if target.exists():
                target.unlink()
            continue
        template = Catalog(project="pipeline-kit feedback", fuzzy=False)
        for msgid, line, context in found:
            template.add(msgid, locations=[(str(path.relative_to(KIT.parent)), line)], context=context)
        catalog = read_catalog(target) if target.exists() else Catalog(locale=lang, project="pipeline-kit feedback",
                                                                 fuzzy=False)
        catalog.update(template, update_header_comment=False, update_creation_date=False)
        catalog.obsolete.clear()
        _write(target, catalog)
    return tally(lang)


def tally(lang: str) -> Tally:
    out = Tally()
    expected = {catalog_path(p, lang): p for p in sources()}
    for target, path in expected.items():
        wanted = [(m, context) for m, _, context in templates(path)]
        if not wanted:
            continue
        name = target.stem
        if not target.exists():
            out.stale.append(f"{name}: no catalog (make-labs --lang {lang.split('_')[0]} --update)")
            out.messages += len(wanted)
            continue
        catalog = read_catalog(target)
        have = [(m.id, m.context) for m in catalog if m.id]
        if Counter(have) != Counter(wanted):  # (not sorted: a context is None or "counted", which do not compare)
            out.stale.append(f"{name}: its messages are not the source's (make-labs --lang "
                             f"{lang.split('_')[0]} --update)")
        for message in catalog:
            if not message.id:
                continue
            out.messages += 1
            if not message.string:
                out.untranslated.append(f"{name}: {message.id}")
            elif message.fuzzy:
                out.fuzzy.append(f"{name}: {message.id}")
            else:
                out.lost += [f"{name}: {message.id} -- {p}" for p in field_problems(message.id, message.string)]
    for extra in sorted((LOCALE / lang / "LC_MESSAGES").glob("*.po")):
        if extra not in expected:
            out.stale.append(f"{extra.stem}: a catalog for no source module")
    return out
