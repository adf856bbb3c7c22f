"""How long do the README's commands take in a fresh clone?  The test command, the quick subset and the book build.

Why a script: these figures change with every round, so they live in one generated file
(``book/data/suite-times.json``, shown by the book's Performance page) rather than in prose.  The script clones
this checkout's HEAD into a temporary folder (what is committed, nothing else), makes a fresh virtual environment
there from ``requirements.txt`` as the README says, and runs each command as the README gives it (read from the
lines after its ``<!-- test-command -->`` and ``<!-- quick-test-command -->`` markers), timing the wall clock and
reading pytest's closing line.  Quote figures from a quiet machine: other work on the cores slows every step.
Run: ``python benchmarks/bench_suite.py [--json book/data/suite-times.json] [--skip-tests]``.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cli import ROOT, parser, run, write_json

from pipeline_kit.inputs import InputError, check_output_path, strict_json

MARKERS = {"command": "<!-- test-command -->", "quick_command": "<!-- quick-test-command -->"}
BOOK_COMMAND = ".venv/bin/jupyter-book build book"
SETUP = "python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt"
CLOSING = re.compile(r"^=*\s*(.*\b(?:passed|failed)\b.*) in ([\d.]+)s", re.M)


def readme_command(readme: str, marker: str) -> str:
    """The command on the second line after ``marker`` (the first is the code fence), as ``.ci/run`` reads it."""
    lines = readme.splitlines()
    at = lines.index(marker)
    return lines[at + 2].strip()


def counts(output: str) -> dict:
    """pytest's closing line as numbers: ``{"passed": 1840, "failed": 0, "skipped": 1, ...}``."""
    found = CLOSING.findall(output)
    if not found:
        return {}
    words = found[-1][0]
    return {name: int(n) for n, name in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", words)}


def timed(command: str, cwd: Path, log: Path) -> tuple[float, int, str]:
    """Run ``command`` in ``cwd`` with bash (its output to ``log``): seconds, exit status, output."""
    start = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env={**os.environ, "CI": "true"}, check=False)
    return round(time.monotonic() - start, 1), proc.returncode, log.read_text(errors="replace")


def main(argv=None) -> int:
    p = parser(__file__, __doc__)
    p.add_argument("--json", metavar="FILE", help="write the figures here (e.g. book/data/suite-times.json)")
    p.add_argument("--skip-tests", action="store_true", help="time only the quick subset and the book build")
    args = p.parse_args(argv)
    if args.json is not None:  # before any work: never one of the files it reads, a FIFO or a missing folder
        try:
            check_output_path(args.json, "argument --json", inputs=[str(ROOT / "README.md"),
                                                                   str(ROOT / "requirements.txt")])
        except InputError as exc:
            p.error(str(exc))
    readme = (ROOT / "README.md").read_text()
    commands = {key: readme_command(readme, marker) for key, marker in MARKERS.items()}
    figures = {**commands, "book_command": BOOK_COMMAND, "cores": os.cpu_count(),
               "date": datetime.date.today().isoformat(), "where": "a fresh clone of HEAD and a fresh venv"}
    with tempfile.TemporaryDirectory(prefix="pipeline-kit-suite-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        if (ROOT.parent / "shared").is_dir():  # CI's layout: ../shared beside the checkout
            os.symlink(ROOT.parent / "shared", Path(tmp) / "shared")
        seconds, code, out = timed(SETUP, clone, Path(tmp) / "setup.log")
        if code:
            print(f"setting up the clone failed (exit {code}):\n{out[-3000:]}", file=sys.stderr)
            return 1
        print(f"set up in {seconds:.0f} s: {SETUP}", flush=True)
        steps = [("quick", commands["quick_command"]), ("book", BOOK_COMMAND)]
        if not args.skip_tests:
            steps.insert(0, ("tests", commands["command"]))
        failed = False
        for step, command in steps:
            seconds, code, out = timed(command, clone, Path(tmp) / f"{step}.log")
            found = counts(out)
            prefix = "" if step == "tests" else f"{step}_"
            figures[f"{prefix}seconds"] = seconds
            if step != "book":
                figures[f"{prefix}tests"] = sum(found.values())
                figures[f"{prefix}passed"] = found.get("passed", 0)
                figures[f"{prefix}skipped"] = found.get("skipped", 0)
            print(f"{step}: {seconds:.0f} s, exit {code}" + (f", {found}" if found else "") + f": {command}",
                  flush=True)
            if code:
                failed = True
                print(out[-3000:], file=sys.stderr)
        shutil.rmtree(clone / ".venv", ignore_errors=True)
    print(strict_json(figures, indent=1))  # the figures on the terminal too, whatever happens to --json
    if args.json and not failed:
        try:
            write_json(args.json, figures)
        except OSError as exc:  # a disk that filled during the run: one line; the old file stays whole
            print(f"python benchmarks/bench_suite.py: error: argument --json: cannot write {args.json!r}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    run(__file__, main)
