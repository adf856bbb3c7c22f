"""Helpers every lab's checks share: call the student's code safely and say precisely what is wrong."""

from __future__ import annotations

import math
from collections.abc import Callable


class LabCheckFailed(AssertionError):
    """A check failed; the message is the student's feedback."""


def fail(message: str) -> None:
    raise LabCheckFailed(message)


def describe(value, limit: int = 80) -> str:
    """A short repr; objects without a readable one (iterators, modules) show as ``<TypeName>``."""
    text = repr(value)
    if " object at 0x" in text or "\n" in text:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call(func: Callable, *args, name: str | None = None, shown: str | None = None, **kwargs):
    """``func(*args)``; an exception from the student's code becomes feedback naming the call (``shown``, or
    ``name(args)``)."""
    if not callable(func):
        fail(f"{name or 'your answer'} must be a function, got {type(func).__name__} {describe(func)}")
    label = name or getattr(func, "__name__", "your function")
    if shown is None:
        shown = f"{label}({', '.join([describe(a) for a in args] + [f'{k}={describe(v)}' for k, v in kwargs.items()])})"
    try:
        return func(*args, **kwargs)
    except LabCheckFailed:
        raise
    except NotImplementedError:
        fail(f"not answered yet: {label} still raises NotImplementedError")
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
        fail(f"not answered yet: {name} still raises NotImplementedError")
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
    expect_type(value, (int, float), what)
    if not math.isfinite(value):
        fail(f"{what} must be a finite number, got {value!r}")
    return float(value)


def close(a: float, b: float, rel: float = 1e-6, abs_: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


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
