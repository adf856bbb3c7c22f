"""The fairness harness: a lab's test cells, run in this process on a notebook with typical wrong answers, under
many seeds -- so "the same mistake loses the same points under every seed" is measured, not hoped for.

A lab's catalogue (``tests/fairness_catalogue/labNN.py``) lists its typical wrong answers as :class:`Wrong`
entries: code appended to an answer cell of the solution (it redefines a function the wrong way) or put in its
place, and the test cells that must lose points.  :func:`outcomes` runs the solution notebook top to bottom in one
namespace, as a student's notebook runs (given and answer cells with ``exec``, magics dropped), and each test cell
with the grader's own :func:`pipeline_kit.grading.parts.run_test_cell` -- the same partial credit and feedback as
a grade -- once per seed (``remote.seeded``).  Test cells that read none of the names a wrong answer rebinds are
not run for it (their verdict is the model answer's, which is checked under every seed on its own); their imports
are.

Feedback teaches without handing over an answer (issue 36).  The catalogue's ``REVEALS`` lists, per test cell, text
(a str, or a compiled regex) that gives its answer away -- a formula, a value, the answer named in words: no other
cell's feedback may contain it, nor its own once the case and the student's own values are left out.  And no
feedback states the expected value of a case it names (:func:`expected_values`, :func:`states_value`): the model
answer's value of each ``f(args)`` or ``value[key]`` the feedback writes, or, where the check reads something else
from the answer (a warmup is the length of the phases' first list), what the check module's own function gives --
the catalogue's optional ``EXPECTED`` = {test cell: {answer name: function}}; nor the phrases of
:data:`STATES_ANSWER` ("expected 7", "the simulator gives 3/11"), for the cases no expression names (a trace).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import math
import numbers
import re
from dataclasses import dataclass, field
from fractions import Fraction

import nbformat
from lab_grading import SOLUTIONS, replayed_torchrun

from pipeline_kit.grading import names, parts, remote
from pipeline_kit.language import speaking
from pipeline_kit.grading.notebook import cell_kind, nbgrader_meta

# Three draws of the hidden cases: every wrong answer is graded under each (and a failing check then tries its cases
# one by one, common.every_failing_case, to list them all), so each seed adds to every entry's time; the model
# answer's hidden cases are drawn under seven seeds of their own by tests/test_hidden_cases.py.
SEEDS = range(3)
# ... the last of them in Chinese (``metadata.pipeline_kit.language``): the same points in either language, and the
# feedback all in Chinese (tests/test_fairness.py), at no extra run
CHINESE_SEED = SEEDS[-1]


@dataclass
class Wrong:
    """One typical wrong answer: ``code`` for the answer cell ``cell`` (appended, or in its place with
    ``replace``), which must cost exactly the test cells in ``loses`` some points (all of them unless ``points``
    says how many each loses)."""

    label: str
    cell: str
    code: str
    loses: set[str]
    replace: bool = False
    points: dict[str, float] = field(default_factory=dict)


@dataclass
class Cell:
    kind: str
    gid: str
    source: str
    points: float


def lab_cells(lab: str) -> list[Cell]:
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    return [Cell(cell_kind(c), nbgrader_meta(c).get("grade_id", ""), c.source,
                 float(nbgrader_meta(c).get("points", 0) or 0)) for c in nb.cells if cell_kind(c) != "markdown"]


def _bound(code: str) -> set[str]:
    tree = names.parse(code)
    return set(names.bindings(tree)) if tree is not None else set()


def _affected(code: str, changed: set[str]) -> set[str]:
    """The names a re-run cell binds that can differ from the model run's: bound by a statement that reads a
    changed name (or by one that reads a name such a statement bound), to a fixed point."""
    tree = names.parse(code)
    if tree is None:
        return set()
    statements = [(set(names.bindings(ast.Module(body=[st], type_ignores=[]))),
                   names.used_names(ast.Module(body=[st], type_ignores=[]))) for st in tree.body]
    seen, out = set(changed), set()
    grown = True
    while grown:
        grown = False
        for bound, used in statements:
            if used & seen and not bound <= out:
                out |= bound
                seen |= bound
                grown = True
    return out


def _run_test_cell(cell: Cell, ns: dict, seeds, out: dict) -> None:
    for seed in seeds:
        with remote.seeded(seed), speaking("zh_CN" if seed == CHINESE_SEED else "en"):
            got = parts.run_test_cell(cell.source, ns, f"<test cell {cell.gid}>")
        out.setdefault(cell.gid, {})[seed] = (round(cell.points * got.earned, 2), got.feedback)


def _exec(lab: str, cell: Cell, source: str, ns: dict) -> None:
    exec(compile(names.python_source(source), f"<{lab} {cell.gid or cell.kind}>", "exec"), ns)  # noqa: S102


@functools.lru_cache(maxsize=None)
def _model_run(lab: str) -> tuple[list[Cell], list[dict]]:
    """The solution run once, top to bottom (test cells under seed 0): the namespace before each cell."""
    cells, before = lab_cells(lab), []
    ns: dict = {"__name__": "__main__"}
    with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in cells:
            before.append(dict(ns))
            if cell.kind == "test":
                parts.run_test_cell(cell.source, ns, f"<test cell {cell.gid}>")
            else:
                _exec(lab, cell, cell.source, ns)
    return cells, before


def outcomes(lab: str, wrong: Wrong | None = None, seeds=SEEDS) -> dict[str, dict[int, tuple[float, str]]]:
    """{test cell: {seed: (points earned, feedback)}} for the solution of ``lab``, with ``wrong`` in it.

    The model answer runs top to bottom, as a student's notebook does.  A wrong answer re-runs only what it can
    change: its own cell, and each later cell that reads a name it (or a cell re-run for it) binds, each in the
    model run's namespace before that cell with the re-bound names on top.
    """
    out: dict[str, dict[int, tuple[float, str]]] = {}
    if wrong is None:
        ns: dict = {"__name__": "__main__"}
        with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            for cell in lab_cells(lab):
                if cell.kind == "test":
                    _run_test_cell(cell, ns, seeds, out)
                else:
                    _exec(lab, cell, cell.source, ns)
        return out
    cells, before = _model_run(lab)
    at = next((i for i, c in enumerate(cells) if c.kind == "answer" and c.gid == wrong.cell), None)
    assert at is not None, f"{lab} has no answer cell {wrong.cell}"
    source = wrong.code if wrong.replace else f"{cells[at].source}\n\n{wrong.code}"
    rebound = _bound(wrong.code)
    assert rebound, f"{wrong.label}: the wrong answer binds no name"
    dirty: dict = {}
    with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for i in range(at, len(cells)):
            cell = cells[i]
            if i != at and not names.used_names(names.parse(cell.source) or ast.Module(body=[], type_ignores=[])) \
                    & rebound:
                continue
            ns = {**before[i], **dirty}
            if cell.kind == "test":
                _run_test_cell(cell, ns, seeds, out)
                continue
            _exec(lab, cell, source if i == at else cell.source, ns)
            bound = _bound(wrong.code) if i == at else set()
            bound |= _affected(source if i == at else cell.source, rebound | bound)
            dirty.update({name: ns[name] for name in bound if name in ns})
            rebound |= bound
    return out


def max_points(lab: str) -> dict[str, float]:
    return {c.gid: c.points for c in lab_cells(lab) if c.kind == "test"}


# -- what feedback must not say: another check's answer, its own, or the expected value of its case -------------

# What no feedback says, whatever it checks: a value it expects ("expected 7", "the simulator gives 3/11", "is
# 0.5281 rounded") -- where the case is one :func:`expected_values` cannot evaluate (a trace, a drawn model), too.
STATES_ANSWER = [
    re.compile(r"\bexpected:? (?:\([\w, ]+\) = )?-?[\d\[({'\"]"),
    re.compile(r"\b(?:simulator|simulation|kit|message plan|run) (?:gives|counts|measured|says) (?:exactly )?"
               r"-?[\d\[({'\"]"),
    re.compile(r"\bis -?\d[\d.,]* rounded\b"),
]


def revealed(feedback: str, texts) -> list[str]:
    """The ``REVEALS`` texts (a str, found as it is, or a compiled regex) that ``feedback`` contains."""
    out = []
    for text in texts:
        if isinstance(text, re.Pattern):
            out += [m.group(0) for m in text.finditer(feedback)]
        elif text in feedback:
            out.append(text)
    return out


@functools.lru_cache(maxsize=None)
def _answer_names(lab: str) -> frozenset[str]:
    """The names answer cells bind that a test cell reads (what the checks are given)."""
    cells = lab_cells(lab)
    read = set().union(*(names.used_names(names.parse(c.source) or ast.Module(body=[], type_ignores=[]))
                         for c in cells if c.kind == "test"))
    return frozenset(n for c in cells if c.kind == "answer" for n in _bound(c.source) if n in read)


def _model_namespace(lab: str) -> dict:
    """The model answer's namespace at the end of the notebook (before its last cell, a test cell)."""
    return _model_run(lab)[1][-1]


_OPEN, _CLOSE = "([{", ")]}"


def _group_end(text: str, i: int) -> int | None:
    """The end of the bracketed group (or quoted string) that starts at ``text[i]``; None if it does not close."""
    if text[i] in "'\"":
        j = text.find(text[i], i + 1)
        return None if j < 0 else j + 1
    depth, j, quote = 0, i, None
    while j < len(text):
        ch = text[j]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"" and depth:
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _expr_end(text: str, i: int, call: bool = True) -> int:
    """Where the expression that starts with a name ending at ``i`` ends: a call's parentheses, then subscripts."""
    if call and i < len(text) and text[i] == "(":
        end = _group_end(text, i)
        if end is None:
            return i
        i = end
    while i < len(text) and text[i] == "[":
        end = _group_end(text, i)
        if end is None:
            break
        i = end
    return i


_STATED = re.compile(r"\s*(?:=|is|returned|gives|has (?:shape|dtype))\s+(?:the string |an? (?:\w+ )?)?")
_GOT = re.compile(r"\bgot\b(?: (?:a |an )?(?:int|float|str|bool|list|tuple|dict|set|NoneType)\b)?")


def _value_end(text: str, i: int) -> int:
    """The end of the value written at ``text[i]``: a bracketed group, a quoted string or one word."""
    if i < len(text) and text[i] in _OPEN + "'\"":
        end = _group_end(text, i)
        if end is not None:
            return end
    m = re.compile(r"[^\s,;:()]+").match(text, i)
    return i if m is None else m.end() - (1 if m.group(0).endswith(".") else 0)


_NONE = object()


def _evaluate(expr: str, ns: dict, call: bool):
    """The model answer's value of ``expr`` (as the feedback wrote it), or ``_NONE`` when it cannot be evaluated."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return _NONE
    if call != any(isinstance(n, ast.Call) for n in ast.walk(tree)):
        return _NONE
    try:
        with replayed_torchrun(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            return eval(compile(tree, "<feedback>", "eval"), dict(ns))  # noqa: S307 -- the kit's own model answer
    except Exception:  # noqa: BLE001 -- an expression the feedback abbreviates ("...", "<cfg ...>"): not checked
        return _NONE


def _arguments(text: str) -> set:
    """The numbers a case's arguments write, ``(4, 2, 0)`` or ``(pp=4, M=2)``."""
    return {value for _, value in _numbers(re.sub(r"\w+=", " ", text.replace("(", " ").replace(")", " ")))}


def expected_values(lab: str, feedback: str, overrides: dict | None = None) -> tuple[list, str]:
    """The expected values of the cases ``feedback`` names, each with the numbers its arguments write (``(want,
    inputs)``), and the feedback with those cases (and the student's own value stated after each, or after "got",
    any ``<description>`` of an input, and a listing's counts) blanked out.

    A case is an expression the feedback writes with an answer's name: ``f(4, 8, 0)``, ``value['key']``.  Its
    expected value is the model answer's -- the solution notebook run top to bottom -- or, for a name in
    ``overrides``, what the check module's own function (``overrides[name]``) gives for the same arguments.
    """
    overrides = overrides or {}
    ns = _model_namespace(lab)
    names = sorted((_answer_names(lab) & ns.keys()) | overrides.keys(), key=len, reverse=True)
    spans, wants = [], []
    for name in names:
        for m in re.finditer(rf"(?<![\w.'\"]){re.escape(name)}\b", feedback):
            if any(a <= m.start() < b for a, b in spans):
                continue
            target = overrides.get(name, ns.get(name))
            call = callable(target)
            end = _expr_end(feedback, m.end(), call)
            if end == m.end() and call:
                continue
            want = _evaluate(feedback[m.start():end], {**ns, name: target}, call)
            if want is not _NONE:
                wants.append((want, _arguments(feedback[m.end():end])))
            stated = _STATED.match(feedback, end)
            spans.append((m.start(), _value_end(feedback, stated.end()) if stated else end))
    for m in _GOT.finditer(feedback):
        spans.append((m.start(), _value_end(feedback, m.end() + 1) if m.end() < len(feedback) else m.end()))
    spans += [(m.start(), m.end()) for m in re.finditer(r"<[^<>]*>", feedback)]
    # a listing's counts ("; and 3 more: ", "(and 2 not listed)") count cases; they state no case's value
    spans += [(m.start(), m.end()) for m in (*parts.FOLD.finditer(feedback),
                                             *re.finditer(r"\(and [0-9,]+ not listed\)", feedback))]
    text = list(feedback)
    for a, b in spans:
        text[a:b] = " " * (b - a)
    return wants, "".join(text)


_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?(?![\w/]|\.\d)")
_FRACTION = re.compile(r"(?<![\w./])(\d+)/(\d+)(?![\w/]|\.\d)")
_OPERATOR_BEFORE = re.compile(r"(?:[+*/^]|(?<!-)-|\bx)\s*$")  # (an operand, not a value: "pp - 1"; "--" is a dash)
_OPERATOR_AFTER = re.compile(r"\s*(?:[+*/^]|-(?!-)|x\b)")


def _numbers(text: str):
    """The numbers ``text`` states (not the operands of a formula such as ``pp - 1``): (written form, value)."""
    for m in _FRACTION.finditer(text):
        if int(m.group(2)):
            yield m.group(0), Fraction(int(m.group(1)), int(m.group(2)))
    text = _FRACTION.sub(lambda m: " " * len(m.group(0)), text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", lambda m: " " * len(m.group(0)), text)
    for m in _NUMBER.finditer(text):
        if _OPERATOR_BEFORE.search(text, 0, m.start()) or _OPERATOR_AFTER.match(text, m.end()) \
                or text[m.end():m.end() + 1] == "%":
            continue
        yield m.group(0), float(m.group(0).replace(",", ""))


def _states_number(text: str, want) -> list[str]:
    want = float(want)
    found = []
    for written, value in _numbers(text):
        if isinstance(value, Fraction):
            if math.isclose(float(value), want, rel_tol=1e-9):
                found.append(written)
            continue
        digits = written.split("e")[0]
        d = len(digits.split(".")[1]) if "." in digits else 0
        if want == int(want) and abs(want) < 1e15:
            if value == want:
                found.append(written)
        elif d >= 2 and len(digits.replace(",", "").replace(".", "").lstrip("0")) >= 2 \
                and abs(value - want) <= 0.5 * 10 ** -d * (1 + 1e-9):
            found.append(written)
    return found


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _literals(text: str):
    for i, ch in enumerate(text):
        if ch in _OPEN:
            end = _group_end(text, i)
            if end is not None:
                with contextlib.suppress(ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    yield text[i:end], ast.literal_eval(text[i:end])


def _plain(value):
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return value


def states_value(text: str, want, inputs=frozenset()) -> list[str]:
    """Where ``text`` (the feedback with its cases blanked out) writes ``want``: a number as a number (unless it is
    one of the case's ``inputs``: it cannot be told from them), a string quoted, a bool as True/False, a list or
    dict as a literal (or a list of op strings as ``F0 F1 F2``); a list's, tuple's or dict's items that are lists
    too, the same way."""
    want = _plain(want)
    if isinstance(want, bool):
        bare = re.sub(r"True or False|True/False|False or True", "", text)
        return re.findall(rf"\b{want}\b", bare)
    if isinstance(want, numbers.Real):
        if want in inputs or not math.isfinite(float(want)):
            return []
        return _states_number(text, want)
    if isinstance(want, str):
        return [q for q in (f"'{want}'", f'"{want}"') if q in text]
    if not isinstance(want, (list, tuple, dict)):
        return []
    items = list(want.values()) if isinstance(want, dict) else list(want)
    found = [written for written, value in _literals(text) if _same(value, want)]
    if items and all(isinstance(v, str) and re.fullmatch(r"[FBIW]\d+(?:c\d+)?", v) for v in items) and len(items) > 1:
        found += re.findall(rf"(?<!\w){re.escape(' '.join(items))}(?!\w)", text)
    for item in items:
        if isinstance(_plain(item), (list, tuple, dict)):
            found += states_value(text, item, inputs)
    return found


# English left in a Chinese feedback: three English words in a row, once code (`...`), quoted text, calls, names
# with an underscore or a dot, and Python's own messages (an exception the student's code raised) are left out
_CODE = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"|\w+\([^()]*\)|\b\w*[_.]\w*\b|\w+Error: [^；;）)]*")
_ENGLISH_RUN = re.compile(r"\b[A-Za-z]{2,}(?:[ -][A-Za-z]{2,}){2,}\b")


def english_left(text: str) -> list[str]:
    return _ENGLISH_RUN.findall(_CODE.sub(" ", text))
