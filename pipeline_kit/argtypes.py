"""Argument types and the one-line-error parser shared by every command line in the kit.

Every bad argument ends in one line on stderr naming the argument and what is allowed, with exit
status 2 -- never a traceback.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from .inputs import excerpt
from .limits import LIMITS, MAX_NUMBER, MAX_RANKS

EXIT_INVALID = 1  # the input was read but is not a valid schedule
EXIT_USAGE = 2  # a bad argument


class UsageError(Exception):
    """A bad argument detected after parsing (e.g. a configuration a schedule refuses)."""


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """``--help`` shows every option's default value (options without one, or off by default, show none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if action.option_strings and shown and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """``message`` with every character that would start a new line (``str.splitlines`` knows ten) escaped,
    so that an error quoting the user's input is still one line."""
    return str(message).translate(_LINE_BREAKS)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line (no usage dump) with exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")

    def _check_value(self, action, value):  # argparse's own would quote a 100 kB argument whole
        if action.choices is not None and value not in action.choices:
            raise argparse.ArgumentError(action, f"invalid choice: {shown(value)} (choose from "
                                                 f"{', '.join(map(repr, action.choices))})")


def shown(text: str, width: int = 40) -> str:
    """``text`` as an argument's error quotes it: :func:`pipeline_kit.inputs.excerpt` (the one quoting rule), at
    most ``width`` characters of it."""
    return excerpt(text, limit=width)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {shown(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {shown(text)}")
    return value


def int_at_most(limit_name: str, unit: str) -> Callable[[str], int]:
    """A positive integer no larger than the named limit of :mod:`pipeline_kit.limits` (checked before use)."""
    limit = LIMITS[limit_name]

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            unit_text = f" {unit}" if unit else ""
            raise argparse.ArgumentTypeError(f"{shown(text)} is more than the limit of {limit:,}{unit_text} "
                                             f"({limit_name})")
        return value

    return parse


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {shown(text)}") from None
    if not math.isfinite(value) or abs(value) > MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"expected {what} of at most {MAX_NUMBER:g} (MAX_NUMBER), got {shown(text)}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {shown(text)}") from None
    if value < 0 or value >= 2**63:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer below 2**63, got {shown(text)}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, "a non-negative number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {shown(text)}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, "a positive number")
    if value < 1 / MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"expected a positive number of at least {1 / MAX_NUMBER:g} "
                                         f"(1 / MAX_NUMBER), got {shown(text)}")
    return value


def timeout_seconds(text: str) -> float:
    """A positive number of seconds, at most ``MAX_TIMEOUT_S``."""
    value = positive_float(text)
    if value > LIMITS["MAX_TIMEOUT_S"]:
        raise argparse.ArgumentTypeError(f"{shown(text)} seconds is more than the limit of {LIMITS['MAX_TIMEOUT_S']:g} "
                                         f"(MAX_TIMEOUT_S)")
    return value


def float_list(text: str) -> list[float]:
    """Comma-separated non-negative numbers; an empty field (``1,,1``) is an error, not skipped."""
    fields = text.split(",")
    if len(fields) > MAX_RANKS * LIMITS["MAX_CHUNKS"]:
        raise argparse.ArgumentTypeError(f"{len(fields):,} values are more than one per virtual stage allows "
                                         f"(MAX_RANKS x MAX_CHUNKS = {MAX_RANKS * LIMITS['MAX_CHUNKS']:,})")
    values = []
    for i, field in enumerate(fields, start=1):
        if not field.strip():
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 1,1,1.5,1: value {i} of "
                                             f"{shown(text)} is empty")
        try:
            values.append(non_negative_float(field))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 1,1,1.5,1 (non-negative, at "
                                             f"most {MAX_NUMBER:g}): value {i} of {shown(text)} is "
                                             f"{shown(field.strip())}") from None
    return values
