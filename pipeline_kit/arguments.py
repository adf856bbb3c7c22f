"""The one rule for the arguments of the kit's public Python API: refuse a bad one at the door, by name.

Why: a function handed ``pp=0``, ``None`` or a string where a Schedule belongs used to fail deep inside --
a ZeroDivisionError in a modulo, an AttributeError on ``.microbatches`` -- or, worse, to return nonsense for
a negative number.  The public functions of :mod:`pipeline_kit.schedules`, :mod:`pipeline_kit.sim`,
:mod:`pipeline_kit.layout` and :mod:`pipeline_kit.trace` check their arguments first, through
:class:`Arguments`, so that every refusal has one shape::

    parse_layout: argument pp: expected a positive integer, got 0
    simulate: argument schedule: expected a Schedule (from build_schedule), got str '1f1b'

It is raised as the function's own error class (``LayoutError``, ``CostError``, ...; :class:`ArgumentError`
where it has none), a ValueError; an argument of the wrong type raises that class's :func:`wrong_type`
variant, which is a TypeError too.  Values are quoted by :func:`shown`: at most about 100 characters of any
text (:func:`pipeline_kit.inputs.excerpt`), never a 5 MB line.  The checks run once a call, at the entry
points, never in the loops behind them.  No torch, no matplotlib.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from numbers import Real
from typing import NoReturn

from .inputs import describe, excerpt
from .limits import MAX_NUMBER, LimitError, check_at_most

_HUGE = 10**30  # an integer this large is described by its size, not printed (str() refuses 4,300 digits)
UNITS = {"MAX_RANKS": "ranks", "MAX_CHUNKS": "chunks per rank", "MAX_MICROBATCHES": "microbatches",
         "MAX_LAYERS": "layers", "MAX_GPUS": "GPUs"}  # what a limit counts, as its refusal says it


class ArgumentError(ValueError):
    """A public function was given an argument it does not take; the message names the function, the
    argument, what is allowed and what it got."""


def wrong_type(error: type[Exception]) -> type[Exception]:
    """``error``'s variant for an argument of the wrong type: a subclass of ``error`` *and* of ``TypeError``,
    so ``except LayoutError`` and ``except TypeError`` both catch it.  Made once, kept as ``error.WrongType``
    (so it pickles)."""
    if issubclass(error, TypeError):
        return error
    variant = error.__dict__.get("WrongType")
    if variant is None:
        variant = type(error.__name__, (error, TypeError), {
            "__module__": error.__module__, "__qualname__": f"{error.__qualname__}.WrongType",
            "__doc__": f"A {error.__name__} for an argument of the wrong type (also a TypeError)."})
        error.WrongType = variant
    return variant


def shown(value) -> str:
    """A value as a refusal quotes it, bounded: ``0``, ``nan``, ``None``, ``'x'`` (at most ~100 characters,
    with position and length when cut), ``('send', 1, 'F3')`` (a short list or tuple of such values), ``a list of
    300``, ``a Schedule`` (an object's repr could be megabytes)."""
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if -_HUGE < value < _HUGE else f"an integer of {value.bit_length():,} bits"
    if isinstance(value, str):
        return excerpt(value)
    if type(value) in (list, tuple) and 0 < len(value) <= 4 and all(
            v is None or type(v) in (bool, int, float, str) for v in value):
        inner = ", ".join(map(shown, value)) + ("," if len(value) == 1 and type(value) is tuple else "")
        return f"[{inner}]" if type(value) is list else f"({inner})"
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    if isinstance(value, (list, tuple, dict, set, frozenset, bytes, bytearray, range)):
        return f"{article} {kind} of {len(value):,}" if len(value) else f"an empty {kind}"
    return f"{article} {kind}"


def typed(value) -> str:
    """:func:`shown` with the type in front for plain values (``str 'x'``, ``float 1.5``): what a refusal of
    the wrong type says it got."""
    return f"{type(value).__name__} {shown(value)}" if isinstance(value, (str, int, float)) else shown(value)


def json_object(data, where: str, fields, error: type[Exception] = ArgumentError) -> dict:
    """``data`` if it is a dict, else the refusal :func:`pipeline_kit.inputs.check_object` would give --
    ``where: expected a JSON object with fields a, b, got 5`` -- for any value, JSON or not (a huge int too)."""
    if not isinstance(data, dict):
        got = describe(data) if data is None or type(data) in (bool, str, list, float) else shown(data)
        raise wrong_type(error)(f"{where}: expected a JSON object with fields {', '.join(fields)}, got {got}")
    return data


def integer_words(low: int | None = 1, high: int | None = None) -> str:
    """``a positive integer``, ``a non-negative integer``, ``an integer >= 2``, ``an integer in 0..3``, ``an
    integer`` (``low`` None: any)."""
    if low is None:
        return "an integer"
    if high is not None:
        return f"an integer in {shown(low)}..{shown(high)}"
    return {1: "a positive integer", 0: "a non-negative integer"}.get(low, f"an integer >= {low}")


def number_words(low: float = 0.0, positive: bool = False) -> str:
    """``a positive number``, ``a non-negative number``, ``a number >= 2``, ``a finite number``."""
    if positive:
        return "a positive number"
    if low <= -MAX_NUMBER:
        return "a finite number"
    return "a non-negative number" if low == 0 else f"a number >= {low:g}"


def is_number(value, low: float = 0.0, positive: bool = False) -> bool:
    """A real number (not a bool) of at least ``low`` (at least ``1 / MAX_NUMBER`` when ``positive``, as the limits
    say) and at most ``MAX_NUMBER``: so finite (NaN compares false; a huge int is compared, never made a float)."""
    return (isinstance(value, Real) and not isinstance(value, bool) and low <= value <= MAX_NUMBER
            and (not positive or value >= 1 / MAX_NUMBER))


class Arguments:
    """The checks of one call, e.g. ``Arguments("parse_layout", LayoutError).integer("pp", pp, none=True)``.

    ``func`` names the function in every message; ``None`` gives the short form ``pp must be a positive
    integer, got 0`` that the schedule generators have always used (the book's JavaScript explorer repeats
    those words).  ``error`` is the class raised.  Each check returns the value it accepted.
    """

    __slots__ = ("func", "error")

    def __init__(self, func: str | None, error: type[Exception] = ArgumentError):
        self.func = func
        self.error = error

    def message(self, name: str, allowed: str, value, wrong: bool = False) -> str:
        if self.func is None:
            return f"{name} must be {allowed}, got {shown(value)}"
        return f"{self.func}: argument {name}: expected {allowed}, got {typed(value) if wrong else shown(value)}"

    def refuse(self, name: str, allowed: str, value, wrong: bool = False) -> NoReturn:
        """Raise the error (its TypeError variant when ``wrong``: the value has the wrong type)."""
        raise (wrong_type(self.error) if wrong else self.error)(self.message(name, allowed, value, wrong))

    def fail(self, text: str, wrong: bool = False) -> NoReturn:
        """Raise the error with ``text`` after the function's name (a rule that no single check says)."""
        raise (wrong_type(self.error) if wrong else self.error)(f"{self.func}: {text}" if self.func else text)

    def integer(self, name: str, value, low: int | None = 1, high: int | None = None, limit: str | None = None,
                none: bool = False, why: str = "") -> int | None:
        """An ``int`` (not a bool, not 2.0) in ``low..high`` and at most the named limit of
        :mod:`pipeline_kit.limits`; ``None`` too when ``none``.  ``why`` says where ``high`` comes from
        (``"a rank below pp=4"``), so a refusal caused by another argument names it too.  ``low=None`` checks the
        type only, for a function whose own rule then says what is allowed."""
        if value is None and none:
            return None
        words = integer_words(low, high) + (f" ({why})" if why else "")
        if not isinstance(value, int) or isinstance(value, bool):
            self.refuse(name, words + (" or None" if none else ""), value, wrong=True)
        if (low is not None and value < low) or (high is not None and value > high):
            self.refuse(name, words, value)
        if limit is not None:
            what = f"{self.func}: argument {name}: {shown(value)}" if self.func else f"{name}={shown(value)}"
            try:
                check_at_most(what, value, limit, UNITS.get(limit, ""))
            except LimitError as exc:
                raise self.error(str(exc)) from None
        return value

    def number(self, name: str, value, low: float = 0.0, positive: bool = False, none: bool = False):
        """A finite real number (not a bool) of at least ``low`` (above 0 when ``positive``) and at most
        ``MAX_NUMBER``; ``None`` too when ``none``."""
        if value is None and none:
            return None
        if not isinstance(value, Real) or isinstance(value, bool):
            self.refuse(name, number_words(low, positive) + (" or None" if none else ""), value, wrong=True)
        if not is_number(value, low, positive):
            limit = (f" of at most {MAX_NUMBER:g} (MAX_NUMBER)" if value > MAX_NUMBER else  # NaN: neither
                     f" of at least {1 / MAX_NUMBER:g} (1 / MAX_NUMBER)" if positive and 0 < value else "")
            self.refuse(name, number_words(low, positive) + limit, value)
        return value

    def numbers(self, name: str, value, low: float = 0.0, length: int | None = None, most: int | None = None,
                per: str = "") -> list:
        """A list of numbers (or a tuple, an array: anything sized to iterate but text, a dict or a set), each as
        :meth:`number` checks it, of ``length`` items when given (``per`` says what one is for: ``"one per stage of
        pp=4"``) and at most ``most``."""
        if isinstance(value, (str, bytes, dict, set, frozenset)) or not isinstance(value, Sized) or not isinstance(
                value, Iterable):
            self.refuse(name, "a list of numbers", value, wrong=True)
        if (length is not None and len(value) != length) or (most is not None and len(value) > most):
            count = f"{length:,}" if length is not None else f"at most {most:,}"
            self.refuse(name, f"a list of {count} numbers" + (f" ({per})" if per else ""), value)
        for i, v in enumerate(value):
            if not is_number(v, low):
                self.number(f"{name}[{i}]", v, low)
        return list(value)

    def boolean(self, name: str, value) -> bool:
        if not isinstance(value, bool):
            self.refuse(name, "True or False", value, wrong=True)
        return value

    def text(self, name: str, value, choices: Sequence[str] = (), none: bool = False) -> str | None:
        """A ``str``; with ``choices``, one of them; ``None`` too when ``none``."""
        if value is None and none:
            return None
        allowed = f"one of {', '.join(map(repr, choices))}" if choices else "a str"
        if not isinstance(value, str):
            self.refuse(name, allowed + (" or None" if none else ""), value, wrong=True)
        if choices and value not in choices:
            self.refuse(name, allowed, value)
        return value

    def instance(self, name: str, value, kind: type | tuple[type, ...], what: str, none: bool = False):
        """An instance of ``kind``, described as ``what`` (``"a Schedule (from build_schedule)"``)."""
        if value is None and none:
            return None
        if not isinstance(value, kind):
            self.refuse(name, what + (" or None" if none else ""), value, wrong=True)
        return value

    def function(self, name: str, value, none: bool = False):
        """Something callable."""
        if (value is None and none) or callable(value):
            return value
        self.refuse(name, "a function" + (" or None" if none else ""), value, wrong=True)
