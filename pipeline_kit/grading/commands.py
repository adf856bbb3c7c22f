"""The ``grade`` and ``gradebook`` commands: one notebook as before, or a whole class into a gradebook.

Why one command for both: an instructor who can grade one notebook can grade a class by naming a folder; with
one notebook and no class option, ``grade`` prints what it always printed (a student's ``grade_me()`` reads it).
Every output is checked before the first grade (a gradebook folder, the course database), so a long batch
never ends in "cannot write".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

from ..argtypes import UsageError, non_negative_int, timeout_seconds
from ..launch import FIXED_ENV, replayed

CLASS_OPTIONS = ("gradebook", "nbgrader", "shard", "course_secret", "assignment")


def _jobs(text: str) -> int:
    from .batch import MAX_JOBS
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of grades at a time, got {text!r}") from None
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_JOBS} grades at a time, got {value}")
    return value


def _shard(text: str) -> tuple[int, int]:
    from .classlist import parse_shard
    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def add_grade_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebook", metavar="NOTEBOOK", nargs="*",
                   help="lab notebooks (.ipynb) and class folders (CLASS/<student>/*.ipynb; a notebook right in "
                        "CLASS is a student named by its file; a file's student is its folder's name)")
    p.add_argument("--timeout", type=timeout_seconds, default=60.0,
                   help="seconds a cell, or one call of the student's code, may run before it is interrupted "
                        "(default 60; some cells allow more)")
    p.add_argument("--total-timeout", type=timeout_seconds, default=1800.0,
                   help="seconds one notebook's grade may take; the checks not run by then score 0 (default 1800)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="seed of the hidden cases (default: a fresh one per notebook, printed in the report); "
                        "repeats a grade")
    p.add_argument("--solutions", metavar="DIR", default=None,
                   help="folder of canonical notebooks (default: the kit's solutions/)")
    p.add_argument("--json", action="store_true",
                   help='print {"notebook", "lab", "seed", "score", "max_score", "questions", "sandbox", "checks": '
                        '[...]} (a class: {"rows": [...], "shared_runs": {...}})')
    p.add_argument("--progress", action="store_true",
                   help="print 'running cell I/N' on stderr, a line per cell, also with --json or without a terminal "
                        "(the notebook's grade_me() reads them)")
    g = p.add_argument_group("a class")
    g.add_argument("--jobs", "-j", type=_jobs, default=None,
                   help=f"notebooks graded at a time, each in its own sandbox (default: the cores, {default_jobs()})")
    g.add_argument("--gradebook", metavar="DIR", default=None,
                   help="write DIR/grades.csv, DIR/grades.json and DIR/feedback/<student>/<lab>.html (DIR: new, "
                        "empty, or a gradebook this command wrote)")
    g.add_argument("--nbgrader", metavar="COURSE_DIR", default=None,
                   help="grade COURSE_DIR/submitted/<student>/<assignment>/*.ipynb and write the scores into the "
                        "course's nbgrader gradebook.db")
    g.add_argument("--assignment", metavar="NAME", default=None, help="with --nbgrader: only this assignment")
    g.add_argument("--course-secret", metavar="FILE", default=None,
                   help="derive each seed from this secret, the student and the lab (HMAC-SHA256): a regrade "
                        "repeats exactly, and students cannot predict their hidden cases")
    g.add_argument("--shard", metavar="K/N", type=_shard, default=None,
                   help="grade only the K-th of N deterministic slices of the class (a Slurm array task, a "
                        "Kubernetes indexed Job); `gradebook merge` joins the slices' gradebooks")


def cmd_grade(args: argparse.Namespace) -> int:
    if args.seed is not None and args.course_secret:
        raise UsageError("argument --seed: not allowed with --course-secret (the secret decides each seed)")
    if args.assignment and not args.nbgrader:
        raise UsageError("argument --assignment: only with --nbgrader COURSE_DIR")
    class_mode = (len(args.notebook) != 1 or any(getattr(args, k) for k in CLASS_OPTIONS)
                  or (args.notebook and Path(args.notebook[0]).is_dir()))
    if not args.notebook and not args.nbgrader:
        raise UsageError("the following arguments are required: NOTEBOOK (or --nbgrader COURSE_DIR)")
    if not class_mode:
        return grade_one(args)
    return grade_many(args)


def grade_one(args: argparse.Namespace) -> int:
    from .engine import grade
    from .notebook import EXIT_NOT_GRADED, GradeError, NotGraded

    def progress(i: int, n: int) -> None:
        if args.progress:
            print(f"running cell {i + 1}/{n}", file=sys.stderr, flush=True)
        else:
            print(f"\rrunning cell {i + 1}/{n}", end="", file=sys.stderr, flush=True)

    def warn(line: str) -> None:
        print(("\n" if show_progress and not args.progress else "") + line, file=sys.stderr, flush=True)

    # Ctrl-C / SIGTERM: main() prints "interrupted" after the grade's finally-blocks have ended the kernel
    # (and everything it started) and removed its folder
    show_progress = args.progress or (not args.json and sys.stderr.isatty())
    if args.jobs is not None:
        raise UsageError("argument --jobs: one notebook is graded by one process; --jobs is for a class")
    try:
        report = grade(args.notebook[0], Path(args.solutions) if args.solutions else None, args.timeout,
                       progress=progress if show_progress else None, seed=args.seed, warn=warn,
                       total_timeout=args.total_timeout)
    except NotGraded as exc:  # the machine's failure, not the student's: no score at all, a documented status
        print(f"python -m pipeline_kit grade: not graded: {exc}", file=sys.stderr, flush=True)
        return EXIT_NOT_GRADED
    except GradeError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 -- a bug of the grader's: one line, never a traceback (the kernel is gone)
        raise UsageError(f"cannot grade: the grader failed ({type(exc).__name__}: {exc})") from None
    if show_progress and not args.progress:
        print(file=sys.stderr)
    out = report.to_dict()
    if os.environ.get(FIXED_ENV):  # graded in a class's batch: which of its jobs were the batch's shared runs
        out["shared_runs"] = sorted(set(replayed))
    print(json.dumps(out) if args.json else report.text())
    return 0


def grade_many(args: argparse.Namespace) -> int:
    """Grade a class; exit 0, or ``EXIT_NOT_GRADED`` (3) where a notebook was not graded (the machine failed twice,
    not the notebook), after every other row is written -- so a script sees that a rerun is needed."""
    from . import classlist, gradebook, nbgrader_db
    from .batch import NOT_GRADED, Options, grade_class
    from .notebook import EXIT_NOT_GRADED

    folder = gradebook.check_folder(args.gradebook) if args.gradebook else None
    secret = classlist.read_secret(args.course_secret) if args.course_secret else None
    sources = Path(args.solutions) if args.solutions else None
    subs = classlist.from_nbgrader(args.nbgrader, args.assignment) if args.nbgrader else []
    subs += classlist.from_arguments(args.notebook)
    subs = classlist.identify(subs, sources)
    roster = sorted({s.key for s in subs})
    if args.shard:
        k, n = args.shard
        subs = [s for s in subs if classlist.shard_of(s.key, n) == k]
    classlist.assign_seeds(subs, args.seed, secret)
    url = nbgrader_db.check_course(args.nbgrader, {s.assignment for s in subs if s.assignment and s.lab}) \
        if args.nbgrader else None
    jobs = args.jobs or default_jobs()
    shard = f", slice {args.shard[0]}/{args.shard[1]} of {len(roster)}" if args.shard else ""
    print(f"grading {len(subs)} notebook{'s' if len(subs) != 1 else ''} of "
          f"{len({s.student for s in subs})} student(s){shard}, {jobs} at a time", file=sys.stderr, flush=True)
    start = time.monotonic()
    rows, shared = grade_class(subs, Options(args.timeout, args.total_timeout, args.solutions, jobs))
    seconds = time.monotonic() - start
    problems = nbgrader_db.record(url, rows) if url else []
    meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seeds": "course secret (HMAC of student and lab)" if secret else
            ("--seed" if args.seed is not None else "random, one per notebook"),
            "shard": {"index": args.shard[0], "of": args.shard[1]} if args.shard else None,
            "class": [list(k) for k in roster], "shared_runs": shared, "seconds": round(seconds, 1)}
    if folder is not None:
        gradebook.write(folder, rows, meta, sources)
    print_summary(rows, shared, seconds, args.json, folder, url, problems)
    return EXIT_NOT_GRADED if any(r.status == NOT_GRADED for r in rows) else 0


def print_summary(rows, shared, seconds, as_json, folder, url, problems) -> None:
    """The class's table and one line of counts: graded, refused (the notebook's fault: 0 points) and not graded
    (the machine's: no score, rerun them) apart, since only the last needs the instructor to act."""
    from .batch import GRADED, NOT_GRADED, REFUSED
    from .classlist import printable
    for line in problems:
        print(f"nbgrader: {printable(line)}", file=sys.stderr)
    if as_json:
        print(json.dumps({"rows": [r.to_dict() for r in rows], "shared_runs": shared, "seconds": round(seconds, 1)}))
        return
    width = max([len(r.student) for r in rows] + [7])
    lab_w = max([len(r.lab) for r in rows] + [3])
    print(f"{'student':<{width}}  {'lab':<{lab_w}}  {'score':>13}  {'seed':>10}  {'seconds':>7}  error")
    for r in sorted(rows, key=lambda r: (r.student, r.lab)):
        score = f"{r.score:g} / {r.max_score:g}" if r.report else "-"
        print(printable(f"{r.student:<{width}}  {r.lab:<{lab_w}}  {score:>13}  "
                        f"{r.seed if r.seed is not None else '':>10}  {r.seconds:>7.1f}  {r.why}"))
    count = {s: sum(1 for r in rows if r.status == s) for s in (GRADED, REFUSED, NOT_GRADED)}
    failed = (" (the machine failed, not the notebook: rerun them"
              + ("; nothing was written into nbgrader's gradebook.db for them" if url else "") + ")"
              if count[NOT_GRADED] else "")
    print(f"{count[GRADED]} graded, {count[REFUSED]} refused, {count[NOT_GRADED]} not graded{failed}, "
          f"in {seconds:.0f} s" + (f"; gradebook: {printable(str(folder))}" if folder else "")
          + ("; scores written to nbgrader's gradebook.db" if url else ""))
    for lab, s in sorted(shared.items()):
        print(f"shared runs{' of ' + lab if lab else ''}: {s['what']}"
              + (f" (made once in {s['seconds']:g} s, reused by every grade of the lab)" if not s["error"] else ""))


def add_gradebook_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p), required=True)
    m = sub.add_parser("merge", help="join the gradebooks of a class's --shard K/N slices into one",
                       description="join the gradebooks of a class's --shard K/N slices into one: refuses a "
                                   "student's lab graded twice, reports slices and notebooks missing")
    m.add_argument("folders", metavar="DIR", nargs="+", help="the slices' gradebook folders")
    m.add_argument("--out", metavar="DIR", required=True, help="the merged gradebook (new, empty, or one "
                                                               "this command wrote)")


def cmd_gradebook(args: argparse.Namespace) -> int:
    """``gradebook merge``: every slice checked whole before the ``--out`` folder is made (a bad one: one line,
    exit 2, nothing made); exit 1 where the merge is incomplete (missing slices, notebooks graded in no slice or
    not graded)."""
    from . import gradebook
    from .classlist import printable
    merged, problems = gradebook.merge(args.folders, args.out)
    meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **merged["meta"]}
    gradebook.write(merged["folder"], merged["rows"], meta)
    for line in problems:
        print(f"gradebook merge: {printable(line)}", file=sys.stderr)
    print(f"merged {len(args.folders)} gradebook(s): {len(merged['rows'])} rows of "
          f"{len({r.student for r in merged['rows']})} student(s) into {printable(args.out)}")
    return 1 if problems else 0


