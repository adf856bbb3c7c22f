"""Strict reading of everything a user hands the kit: files, text, JSON and its documented shapes.

Why one module: every command reads files, and each used to read them its own way -- so a binary
file, invalid UTF-8, ``"pp": true`` or 100,000 nested brackets ended in a traceback (or, worse, in
a silently wrong answer: ``"pp": 2.7`` became 2).  Here a file is read with an explicit encoding
and a size limit, JSON is parsed with non-finite numbers and deep nesting refused, and a JSON
object is checked against a *shape table* -- one line per field saying what it must be -- so that
every refusal is one :class:`InputError` line naming the file, the field and what is allowed.

No torch, no matplotlib.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .limits import LIMITS, MAX_JSON_DEPTH, LimitError, check_at_most, check_number


class InputError(ValueError):
    """A file, text or JSON value is not what the kit reads; ``str(err)`` says where and what is allowed."""


# -- files and text -----------------------------------------------------------------------------
def check_text_size(text: str, what: str) -> str:
    """Refuse text (given to a parser directly) longer than ``MAX_FILE_BYTES`` characters."""
    if not isinstance(text, str):
        raise InputError(f"{what}: expected text (a str), got {type(text).__name__}")
    check_at_most(f"{what} ({len(text):,} characters)", len(text), "MAX_FILE_BYTES", "characters")
    return text


def read_text(path: str, what: str, limit: str = "MAX_FILE_BYTES") -> str:
    """The UTF-8 text of ``path`` (``-``: standard input; a byte-order mark is allowed), or one line saying why not.

    What the path names is checked before it is opened: a regular file (or ``-``) only -- a FIFO, a device, a
    socket or a folder is refused without opening it, so nothing blocks and ``/dev/zero`` is not read -- of at
    most ``limit`` bytes (a limit of :mod:`pipeline_kit.limits`, by name: its size, and again the bytes read, at
    most one past the limit).  Refused too: NUL bytes (a binary file) and anything that is not valid UTF-8 (the
    message gives line and byte).
    """
    where = f"{what} (standard input)" if path == "-" else f"{what} {path!r}"
    if path == "-":
        data = _read_bounded(sys.stdin.buffer, where, limit)
    else:
        _check_path_text(path, what)
        _check_regular_input(path, what, limit)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except OSError as exc:
            raise InputError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the check: still never read
                raise InputError(f"{where} is not a regular file")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = _read_bounded(fh, where, limit)
        except OSError as exc:
            raise InputError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"{where} is a binary file (byte {nul} is NUL), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{where} is not UTF-8 text: byte {exc.start} (line {line}) is "
                         f"0x{data[exc.start]:02x}") from None


def _read_bounded(fh, where: str, limit: str) -> bytes:
    data = fh.read(LIMITS[limit] + 1)
    if len(data) > LIMITS[limit]:
        raise LimitError(f"{where} is larger than the limit of {LIMITS[limit]:,} bytes ({limit})")
    return data


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "not a regular file")


def _check_regular_input(path: str, what: str, limit: str) -> None:
    """The one input rule: ``path`` (links followed) is a regular file of at most ``LIMITS[limit]`` bytes."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {path!r} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path!r} is {_kind(st.st_mode)}, not a regular file; give a file")
    if st.st_size > LIMITS[limit]:
        raise LimitError(f"{what} {path!r} is larger than the limit of {LIMITS[limit]:,} bytes ({limit}): "
                         f"it has {st.st_size:,}")


def _check_path_text(path: str, what: str) -> None:
    if not path or "\0" in path:  # the OS takes neither (Python raises ValueError for the NUL)
        raise InputError(f"{what}: {path!r} is not a file name")


SOLUTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "solutions")


def check_output_path(path: str, what: str, inputs: Iterable[str] = ()) -> str:
    """The one output rule, applied before any work: refuse a path that cannot be written (its folder is missing
    or not writable, or it is a folder), one that would destroy what the user has -- one of the command's
    ``inputs``, a FIFO, device or socket, anything inside the kit's ``solutions/`` -- and nothing else.  A
    regular file there is replaced only whole (:func:`pipeline_kit.interrupts.atomic_output`); a link is
    followed, so the file it names is the one replaced.  Nothing is created: the check leaves no file behind."""
    _check_path_text(path, what)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"{what}: cannot write {path!r}: {exc.strerror or exc}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what}: {path!r} is a folder; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what}: {path!r} is {_kind(st.st_mode)}; an output is written only to a regular file "
                         "(give another name)")
    for source in inputs:
        if source and source != "-" and same_file(path, source):
            raise InputError(f"{what}: {path!r} is also an input of this command ({source!r}); writing it would "
                             "replace what it reads: give another name")
    if inside(path, SOLUTIONS):
        raise InputError(f"{what}: {path!r} is inside the kit's solutions/ (the one source of every lab); write "
                         "somewhere else")
    if not os.path.isdir(folder):
        raise InputError(f"{what}: cannot write {path!r}: the folder {folder!r} does not exist")
    if st is not None and not os.access(path, os.W_OK):
        raise InputError(f"{what}: cannot write {path!r}: permission denied")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{what}: cannot write {path!r}: the folder {folder!r} is not writable")
    return path


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same inode, or (for a path not there yet) the same real path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` (links resolved) is ``folder`` or lies below it."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def excerpt(text: str, at: int | None = None, limit: int = 100) -> str:
    """The one quoting rule of messages: ``repr`` of at most ``limit`` characters of ``text`` (from position
    ``at``, or its start), and, where it was cut, where the quote starts and how long the whole is -- so a 5 MB
    token gives a short line, never a 5 MB one."""
    text = str(text)
    start = 0 if at is None else max(0, min(at, len(text)))
    piece = text[start:start + limit]
    if len(text) <= limit and start == 0:
        return repr(text)
    where = f"at character {start:,} of {len(text):,}" if start else f"{len(text):,} characters"
    return f"{piece!r}... ({where})" if start + limit < len(text) else f"{piece!r} ({where})"


def listed(items, limit: int = 10, show=str) -> str:
    """The first ``limit`` of ``items`` as a message lists them, ``"1, 2, 3 and 1,020 more"``: a list of a
    thousand missing ranks is a short line too."""
    items = list(items)
    more = f" and {len(items) - limit:,} more" if len(items) > limit else ""
    return ", ".join(show(x) for x in items[:limit]) + more


# -- JSON ---------------------------------------------------------------------------------------
def _refuse_constant(name: str):
    raise InputError(f"{name} is not a JSON number (non-finite numbers are refused)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"the number {text} is too large for a float (non-finite numbers are refused)")
    return value


def _no_duplicate_keys(pairs: list) -> dict:
    """An object whose keys are all different: JSON readers disagree on which of two equal keys wins (Python's
    takes the last), so a file that says ``"pp"`` twice is refused instead of read one way here."""
    value = dict(pairs)
    if len(value) < len(pairs):
        seen: set = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise InputError(f"the key {excerpt(twice)} appears twice in one object (duplicate keys are refused)")
    return value


def parse_json(text: str, what: str):
    """Parse JSON text: ``NaN``/``Infinity`` and numbers that overflow are refused, and so is nesting
    deeper than ``MAX_JSON_DEPTH`` (the parser's own recursion guard stops far deeper input first)."""
    check_text_size(text, what)
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                           object_pairs_hook=_no_duplicate_keys)
    except InputError as exc:
        raise InputError(f"{what}: {exc}") from None
    except RecursionError:
        raise LimitError(f"{what}: JSON nested deeper than the limit of {MAX_JSON_DEPTH} levels "
                         f"(MAX_JSON_DEPTH)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{what}: not valid JSON: {exc}") from None
    _check_depth(value, what)
    return value


def _check_depth(value, what: str) -> None:
    """Walk the parsed value level by level (no recursion): at most ``MAX_JSON_DEPTH`` nested containers."""
    level, depth = ([value] if isinstance(value, (dict, list)) else []), 1
    while level:
        if depth > MAX_JSON_DEPTH:
            raise LimitError(f"{what}: JSON nested deeper than the limit of {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)")
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item)
                 if isinstance(v, (dict, list))]
        depth += 1


def read_json(path: str, what: str, limit: str = "MAX_FILE_BYTES"):
    """:func:`read_text` then :func:`parse_json`, errors naming ``what`` and the file."""
    return parse_json(read_text(path, what, limit), f"{what} {path}")


def json_safe(value):
    """``value`` with every non-finite float replaced by ``None`` (``null``): a diverged loss is
    written as ``null``, never as the ``NaN`` that JSON readers refuse."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def strict_json(value, **kwargs) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity`` (which are not JSON)."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        raise InputError("the result holds a non-finite number (an overflow): use smaller inputs") from None


# -- shapes -------------------------------------------------------------------------------------
Check = Callable[[object, str], object]  # (value, where) -> the value, or raise InputError


def describe(value) -> str:
    """A JSON value as an error message shows it: ``true``, ``2.7``, ``null``, ``an array``..."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"  # (json.dumps refuses 4,300 digits and more)
    if not isinstance(value, (str, int, float, bool)) and value is not None:
        return f"a {type(value).__name__}"  # not JSON at all (a value given through the Python API)
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def integer(low: int = 1, limit: str | None = None) -> Check:
    """A whole number (not a bool, not 2.0) at least ``low`` and at most the named limit."""
    def check(value, where: str):
        if type(value) is not int or value < low:
            raise InputError(f"{where}: expected an integer >= {low}, got {describe(value)}")
        if limit:
            check_at_most(f"{where} = {value:,}", value, limit)
        return value
    return check


def number(low: float = 0.0) -> Check:
    """A finite number (not a bool) of at least ``low`` and at most ``MAX_NUMBER`` (a time of 1e308 would
    overflow to inf as soon as it is scaled or summed)."""
    def check(value, where: str):
        if type(value) not in (int, float) or not math.isfinite(value) or value < low:
            raise InputError(f"{where}: expected a number >= {low:g}, got {describe(value)}")
        return check_number(where, value)  # the limits' one bound on numbers (a LimitError beyond it)
    return check


def text(*choices: str) -> Check:
    """A string; with ``choices``, one of them."""
    def check(value, where: str):
        if not isinstance(value, str) or (choices and value not in choices):
            allowed = f"one of {', '.join(map(repr, choices))}" if choices else "a string"
            raise InputError(f"{where}: expected {allowed}, got {describe(value)}")
        return value
    return check


def boolean(value, where: str):
    if not isinstance(value, bool):
        raise InputError(f"{where}: expected true or false, got {describe(value)}")
    return value


def nullable(inner: Check) -> Check:
    """``null`` or what ``inner`` accepts."""
    return lambda value, where: None if value is None else inner(value, where)


def array(item: Check, what: str = "items") -> Check:
    """An array whose every element ``item`` accepts (errors name the index)."""
    def check(value, where: str):
        if not isinstance(value, list):
            raise InputError(f"{where}: expected an array of {what}, got {describe(value)}")
        return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return check


@dataclass(frozen=True)
class Field:
    """One line of a shape table: how to check the field, and whether it must be there."""

    check: Check
    required: bool = False
    default: object = None


def check_object(data, table: dict[str, Field], where: str, ignore_unknown: bool = False) -> dict:
    """``data`` checked against ``table``: every field present and of the right shape, defaults filled in."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object with fields {', '.join(table)}, got {describe(data)}")
    missing = [name for name, f in table.items() if f.required and name not in data]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}; the fields are {', '.join(table)}")
    unknown = [name for name in data if name not in table]
    if unknown and not ignore_unknown:
        raise InputError(f"{where}: unknown field(s) {listed(unknown, 5, excerpt)}; the fields are "
                         f"{', '.join(table)}")
    return {name: f.check(data[name], f"{where}: field {name!r}") if name in data else f.default
            for name, f in table.items()}
