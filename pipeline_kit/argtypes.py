"""Argument types and the one-line-error parser shared by every command line in the kit.

Every bad argument ends in one line on stderr naming the argument and what is allowed, with exit
status 2 -- never a traceback.
"""

from __future__ import annotations

import argparse

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


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line (no usage dump) with exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0 or value >= 2**63:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer below 2**63, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 1,1,1.5,1, got {text!r}") from None
    if not values or any(not v >= 0 or v == float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated non-negative numbers, got {text!r}")
    return values
