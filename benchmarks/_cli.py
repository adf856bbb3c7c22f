"""What every script in ``benchmarks/`` shares on its command line, so that each behaves like the kit's commands.

Why one module: each script used to read its arguments its own way -- one not at all (``--help`` and ``--bogus``
ran the benchmark), one from ``sys.argv`` by hand, one let ``--repeat 0`` through to a traceback, and one wrote
its ``--json`` only after minutes of jobs, into a folder that did not exist.  Here, once: the parser (errors in
one line, exit status 2, defaults shown by ``--help``), a whole-number type for a bound of a benchmark's own
(its error says the bound and why), the output rule (checked before any work, written whole or not at all),
and :func:`run`, which ends Ctrl-C or SIGTERM in one line and a closed ``| head`` quietly.

Not a benchmark itself: ``tests/test_benchmark_args.py`` takes every ``benchmarks/*.py`` whose name does not
start with ``_`` for one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the kit of this checkout, installed or not

from pipeline_kit.argtypes import DefaultsHelpFormatter, OneLineParser, shown  # noqa: E402
from pipeline_kit.inputs import InputError, check_output_path, json_safe, strict_json  # noqa: E402
from pipeline_kit.interrupts import (  # noqa: E402
    OutputStreamError,
    interrupts_end_in_one_line,
    standard_output_guarded,
    write_file_atomically,
)


def prog(script: str) -> str:
    """How the user runs the script, the name its errors start with: ``python benchmarks/NAME.py``."""
    return f"python benchmarks/{Path(script).name}"


def parser(script: str, doc: str) -> OneLineParser:
    """The parser of one benchmark (``script`` is its ``__file__``, ``doc`` its docstring, whose first line
    becomes the description)."""
    return OneLineParser(prog=prog(script), description=doc.strip().splitlines()[0],
                         formatter_class=DefaultsHelpFormatter)


def int_between(low: int, high: int, why: str) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``: a benchmark's own bound, ``why`` naming it in the error (a limit
    of :mod:`pipeline_kit.limits`, or the reason)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low:,} to {high:,} ({why}), got {shown(text)}")
        return value
    return parse


def check_outputs(p: argparse.ArgumentParser, outputs: dict[str, str | None]) -> None:
    """Refuse, before any work, an output (``{"--json": path}``; ``None``: not asked for) that cannot be written,
    in one line ``prog: error: argument --json: ...`` with exit status 2."""
    for flag, path in outputs.items():
        if path is not None:
            try:
                check_output_path(path, f"argument {flag}")
            except InputError as exc:
                p.error(str(exc))


def write_json(path: str, value) -> None:
    """``value`` as JSON (indented; a non-finite number as ``null``), replacing ``path`` whole or not at all."""
    write_file_atomically(path, strict_json(json_safe(value), indent=1))


def run(script: str, main: Callable[[], int]) -> None:
    """Exit with ``main()``'s status; Ctrl-C or SIGTERM print one line ``prog: interrupted`` (exit 130 / 143) once
    ``finally`` blocks have run, a reader that went away (``| head``) ends the script quietly (exit 0), and a
    full disk on standard output is one line (exit 2)."""
    code = 0
    with interrupts_end_in_one_line(prog(script)) as outcome:
        try:
            with standard_output_guarded():  # (the kit's own rule for standard output)
                code = main()
                sys.stdout.flush()
        except BrokenPipeError:
            pass
        except OutputStreamError as exc:  # a full disk: one line, as a refusal
            print(f"{prog(script)}: error: {exc}", file=sys.stderr)
            code = 2
    raise SystemExit(code if outcome.exit_code is None else outcome.exit_code)
