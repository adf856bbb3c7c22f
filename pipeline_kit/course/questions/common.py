"""The vocabulary every check speaks: call the student's code, check a value's type, compare it with the kit's,
recognise a known wrong value, and say precisely what is wrong.

Why a vocabulary and not a framework: the feedback of each check is hand-written prose (it is the product),
so the checks stay plain functions; what they share is the steps around the prose.  A check passes silently
or raises :class:`LabCheckFailed` (an ``AssertionError``) whose message is the student's feedback.

* :func:`call` runs a student function; its exceptions become feedback naming the call, and what it returns
  is made :func:`plain`.
* :func:`plain` turns numpy scalars and arrays into Python numbers and lists, and ``str``/``int``/``float``
  subclasses into the exact built-in type -- so an answer cannot bring its own ``__eq__``, and a student who
  computes with numpy is not marked down for it.  :func:`check` applies it to every argument of a check.
* :func:`expect_number` / :func:`expect_int` / :func:`expect_numbers` accept what a student may reasonably
  write for a number (``int``, ``float``, ``Fraction``, numpy) and refuse the rest with the type named.
* :func:`first_match` is the "known wrong value" table: the first typical mistake whose value the answer
  equals gives the feedback.  :func:`expect_rounded` accepts a value rounded correctly to the digits it shows.
"""

from __future__ import annotations

import functools
import inspect
import math
import tempfile
import numbers
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path

from ...grading.parts import NOT_ANSWERED, LabCheckFailed, OutOfTime, listing


def fail(message: str) -> None:
    raise LabCheckFailed(message)


# The book's chapters (``book/chapters/<key>.md``) by their titles.  Feedback teaches without the value it checks:
# it names what fails and the case, and points to the section that teaches the idea, ``book("gpipe-1f1b", "The
# three phases, per rank")`` -- each pointer's heading is checked against the book (tests/test_fairness.py).
BOOK_CHAPTERS = {
    "why-pp": "Why pipeline parallelism",
    "entry-point": "The schedule entry point",
    "gpipe-1f1b": "GPipe and 1F1B",
    "bubble": "The bubble",
    "p2p": "What crosses a stage boundary; P2P without deadlock",
    "stages": "Building stages; where the loss lives",
    "imbalance": "Finding imbalance; custom layouts",
    "interleaved": "Interleaved (virtual) pipeline",
    "memory": "Activation memory per rank",
    "case-study": "Case study: why PP8/M16 gives 2.59x",
    "zero-bubble": "Beyond 1F1B: zero bubble and the V",
    "planning": "Planning a pipeline",
}


def book(chapter: str, section: str) -> str:
    """A pointer to the section of the book that teaches an idea: ``(the book: GPipe and 1F1B, 'Dependencies,
    drawn')``."""
    return f"(the book: {BOOK_CHAPTERS[chapter]}, '{section}')"


def describe(value, limit: int = 80) -> str:
    """A short repr; objects without a readable one (iterators, modules) show as ``<TypeName>``."""
    text = repr(value)
    if " object at 0x" in text or "\n" in text:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_numpy(value) -> bool:
    return type(value).__module__ == "numpy"


_EXACT = frozenset({int, float, str, bool, type(None), Fraction})  # already plain: returned as they are


def plain(value):
    """``value`` with numpy scalars/arrays as Python numbers/lists and built-in subclasses as exact built-ins.

    Containers (dict, list, tuple, set) are rebuilt with their items made plain; any other object (a
    ``Schedule``, a tensor, a function) is returned as it is.
    """
    kind = type(value)
    if kind in _EXACT:
        return value
    if kind is list and all(map(_EXACT.__contains__, map(type, value))):  # a long list of ops or numbers, at C speed
        return list(value)
    if _is_numpy(value):
        if hasattr(value, "tolist"):  # numpy arrays and scalars: .tolist() gives Python numbers and lists
            return plain(value.tolist())
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Fraction):
        return Fraction(value.numerator, value.denominator)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in dict.items(value)}
    if isinstance(value, list):
        return [plain(v) for v in list.__iter__(value)]
    if kind is tuple:
        return tuple(plain(v) for v in value)
    if kind in (set, frozenset):
        return kind(plain(v) for v in value)
    return value


def check(func: Callable) -> Callable:
    """Decorate a check: every argument is made :func:`plain` before the check sees it (functions stay as
    they are; :func:`call` makes their results plain).

    A check of a list of ``cases`` fails on its first failing case; then every case is tried again on its own, so
    the feedback lists each failing case (:func:`every_failing_case`; the first ``parts.MAX_LISTED`` up front, the
    rest folded): two edge-case bugs show in one grade, not two.  The points do not change: any failing case fails
    the check."""
    signature = inspect.signature(func)
    by_case = "cases" in signature.parameters

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        args, kwargs = tuple(plain(a) for a in args), {k: plain(v) for k, v in kwargs.items()}
        try:
            return func(*args, **kwargs)
        except LabCheckFailed as exc:
            if not by_case or type(exc) is not LabCheckFailed or exc.parts or exc.lost != 1.0 \
                    or str(exc).startswith(NOT_ANSWERED):  # (the same for every case: nothing more to list)
                raise
            messages = every_failing_case(func, signature.bind(*args, **kwargs))
            if len(messages) < 2:
                raise
            raise LabCheckFailed(listing(messages), parts=messages) from None

    return wrapper


def every_failing_case(func: Callable, bound: inspect.BoundArguments) -> list[str]:
    """The feedback of each of ``bound``'s cases that fails on its own, in order, repeats once.  A case that runs
    out of time ends the search (the grade's clock is the student's): what was found is kept."""
    cases = bound.arguments.get("cases")
    if not isinstance(cases, (list, tuple)) or len(cases) < 2:
        return []
    messages: list[str] = []
    for case in cases:
        bound.arguments["cases"] = [case]
        try:
            func(*bound.args, **bound.kwargs)
        except LabCheckFailed as exc:
            if str(exc) not in messages:
                messages.append(str(exc))
        except OutOfTime:
            break
    return messages


def call(func: Callable, *args, name: str | None = None, shown: str | None = None, **kwargs):
    """``func(*args)`` made :func:`plain`; an exception from the student's code becomes feedback naming the call
    (``shown``, or ``name(args)``)."""
    if not callable(func):
        fail(f"{name or 'your answer'} must be a function, got {type(func).__name__} {describe(func)}")
    label = name or getattr(func, "__name__", "your function")
    if shown is None:
        shown = f"{label}({', '.join([describe(a) for a in args] + [f'{k}={describe(v)}' for k, v in kwargs.items()])})"
    try:
        return plain(func(*args, **kwargs))
    except LabCheckFailed:
        raise
    except NotImplementedError:
        fail(f"{NOT_ANSWERED}: {label} still raises NotImplementedError")
    except Exception as exc:  # noqa: BLE001 -- the student's bug, reported instead of a traceback
        fail(f"{shown} raised {type(exc).__name__}: {exc}")


def expect_raises(func, *args, exception: type[Exception] = ValueError, name: str, why: str) -> None:
    """``func(*args)`` must raise ``exception`` (bad input the student's function should refuse).

    Returning anything, or raising something else, is feedback that names the call and says ``why``.
    """
    shown = ", ".join(describe(a) for a in args)
    try:
        out = func(*args)
    except exception:
        return
    except NotImplementedError:
        fail(f"{NOT_ANSWERED}: {name} still raises NotImplementedError")
    except Exception as exc:  # noqa: BLE001 -- the student's bug, reported instead of a traceback
        fail(f"{name}({shown}) raised {type(exc).__name__}: {exc}; raise {exception.__name__} ({why})")
    fail(f"{name}({shown}) returned {describe(out)}; it must raise {exception.__name__}: {why}")


def expect_type(value, types, what: str) -> None:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in types:
        fail(f"{what} must be {' or '.join(t.__name__ for t in types)}, got bool {value!r}")
    if not isinstance(value, types):
        fail(f"{what} must be {' or '.join(t.__name__ for t in types)}, got {type(value).__name__} {describe(value)}")


def expect_number(value, what: str) -> float:
    """A finite real number as a float: ``int``, ``float``, ``Fraction`` and numpy scalars are all fine."""
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(f"{what} must be int or float, got {type(value).__name__} {describe(value)}")
    if not math.isfinite(value):
        fail(f"{what} must be a finite number, got {value!r}")
    return float(value)


def expect_int(value, what: str) -> int:
    """An integer (numpy integers too); a float is refused, even a whole one: the answer is a count or an index."""
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        fail(f"{what} must be an integer, got {type(value).__name__} {describe(value)}")
    return int(value)


def expect_numbers(value, what: str, length: int | None = None, each: str | None = None) -> list[float]:
    """A list (or tuple, range, numpy array) of numbers; ``length``, when given, with feedback naming ``each``."""
    value = plain(value)
    expect_type(value, (list, tuple, range), what)
    if length is not None and len(value) != length:
        fail(f"{what} needs one number per {each or 'item'} ({length}), got {len(value)}: {describe(value)}")
    return [expect_number(v, f"{what}[{i}]") for i, v in enumerate(value)]


def close(a: float, b: float, rel: float = 1e-6, abs_: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def first_match(got: float, candidates, rel: float = 1e-6) -> str | None:
    """The known wrong value ``got`` equals, if any: ``candidates`` is a list of ``(value, feedback)`` pairs
    (the feedback is returned) or a dict ``{name: value}`` (the name is returned); the first match wins."""
    pairs = [(v, k) for k, v in candidates.items()] if isinstance(candidates, Mapping) else candidates
    for value, message in pairs:
        if close(got, float(value), rel=rel, abs_=1e-9):
            return message
    return None


def decimals(value: float) -> int | None:
    """How many decimals ``value`` shows in its shortest repr (``0.438`` -> 3); None for exponent notation."""
    text = repr(float(value))
    if "e" in text or "E" in text or "inf" in text or "nan" in text:
        return None
    return len(text.split(".")[1].rstrip("0")) if "." in text else 0


def expect_rounded(got: float, want, what: str, min_decimals: int = 3) -> bool:
    """Is ``got`` the exact ``want``, or ``want`` rounded correctly to the decimals ``got`` shows?

    True: it is (with at least ``min_decimals`` decimals).  A value within one unit of its last decimal
    but rounded the wrong way, or right but with fewer decimals than asked, fails here as a precision
    issue.  False: it is not ``want`` at all -- the caller goes on to the known wrong values.
    """
    want = float(want)
    if close(got, want, rel=1e-6, abs_=1e-12):  # computed, not rounded (float32 included)
        return True
    d = decimals(got)
    if d is None or abs(got - want) >= 10 ** -d:
        return False
    right = abs(got - want) <= 0.5 * 10 ** -d * (1 + 1e-9)
    if right and d >= min_decimals:
        return True
    if not right:  # (the value it should round to is the answer: not shown)
        fail(f"{what} = {got:.{d}f} is rounded the wrong way in its last decimal: a precision issue -- round to the "
             "nearest value, or keep more decimals")
    fail(f"{what} = {got:.{d}f} is right to {d} decimal{'s' if d != 1 else ''}, but give at least {min_decimals} "
         "(a precision issue)")


def drawn(rng, n: int, make, fixed=()) -> list:
    """A test cell's hidden cases: the ``fixed`` edge cases, then ``n`` more made by ``make(rng)``, no repeats.

    ``rng`` is ``hidden_rng(<grade id>)``: drawn per grade from the run's seed, so reading the kit's source does
    not tell a student the cases; the edge cases stay fixed because a draw may miss them.
    """
    out, tries = list(fixed), 0
    while len(out) < len(fixed) + n and tries < 50 * n:
        case, tries = make(rng), tries + 1
        if case not in out:
            out.append(case)
    return out


def counts_text(counts) -> str:
    """The layout string with E on the first stage, L on the last and ``counts[k]`` decoder layers on stage k."""
    from ...layout import Layout
    return str(Layout.from_counts(counts))


def draw_counts(r, stages: int, most: int = 5) -> list[int]:
    """Decoder layers per stage, at least one in all: the endpoint stages may hold none (they hold E or L), the
    others at least one."""
    while True:
        counts = [r.randint(0 if k in (0, stages - 1) else 1, most) for k in range(stages)]
        if sum(counts):
            return counts


def draw_spec(r, layers: int):
    """A model with ``layers`` decoder layers and drawn sizes (heads divide hidden), 16- or 32-bit, tied or not."""
    from ...layout import ModelSpec
    heads = r.choice([2, 4, 8, 16])
    return ModelSpec(vocab=r.choice([128, 1000, 32000, 50304]), seq_len=r.choice([16, 128, 512, 2048]),
                     hidden=heads * r.choice([8, 32, 64]), heads=heads, layers=layers, ffn_mult=r.choice([2, 4]),
                     tie_embeddings=r.random() < 0.3, micro_batch_size=r.randint(1, 4), dtype_bytes=r.choice([2, 4]))


def expect_keys(mapping, keys, what: str) -> None:
    expect_type(mapping, dict, what)
    missing = [k for k in keys if k not in mapping]
    if missing:
        fail(f"{what} is missing {', '.join(map(repr, missing))} (it has {', '.join(map(repr, mapping)) or 'no keys'})")


def expect_choices(value, menu, what: str) -> set:
    """A set of names picked from ``menu`` (any collection of them); anything off the menu is named."""
    expect_type(value, (set, frozenset, list, tuple), what)
    got = set(value)
    unknown = got - set(menu)
    if unknown:
        fail(f"{what} contains {sorted(unknown, key=str)}; choose from {sorted(menu)}")
    return got


@functools.lru_cache(maxsize=None)
def kit_run_file(nproc: int, args: tuple[str, ...], timeout: float = 150) -> str:
    """The text of the file a real ``torchrun`` job of the kit writes: ``args`` name it as ``"{file}"``.

    Why here: data a test cell checks against must come from the check module, not from a given cell the
    student can overwrite (see the engine's contract), and a real run is the kit's to make.  The job runs once
    per process (the given cell's call and the test cell's share it in the student's kernel; the grader runs
    its own).
    """
    from ...launch import torchrun
    with tempfile.TemporaryDirectory(prefix="pipeline-kit-run-") as tmp:
        path = Path(tmp) / "out.json"
        proc = torchrun(nproc, *(str(path) if a == "{file}" else a for a in args), timeout=timeout)
        if proc.returncode != 0 or not path.is_file():
            raise RuntimeError(f"torchrun failed:\n{proc.stdout}\n{proc.stderr}")
        return path.read_text()


def student_layout(text, what: str, pp: int, layers: int):
    """Parse a layout string a student wrote: one stage per rank, or feedback quoting the parser's reason."""
    from ...layout import LayoutError, parse_layout
    expect_type(text, str, what)
    try:
        lay = parse_layout(text, pp=pp, layers=layers)
    except LayoutError as exc:
        fail(f"{what} = {text!r} is not a legal layout for pp={pp}, {layers} layers: {exc}")
    if lay.num_stages != pp:
        fail(f"{what} has {lay.num_stages} stages; use one per rank ({pp}): a re-split moves layers between "
             "ranks, it does not add virtual stages")
    return lay
