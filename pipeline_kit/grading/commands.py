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

CLASS_OPTIONS = ("gradebook", "nbgrader", "shard", "course_secret", "assignment", "student")
EXIT_PROBLEMS = 1  # a class's exit status where every row is graded but a record could not be written


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
                   help='print {"notebook", "lab", "seed", "language", "score", "max_score", "questions", "sandbox", '
                        '"checks": [...]} (a class: {"rows": [...], "shared_runs": {...}})')
    p.add_argument("--progress", action="store_true",
                   help="print 'running cell I/N' on stderr, a line per cell, also with --json or without a terminal "
                        "(the notebook's grade_me() reads them)")
    g = p.add_argument_group("a class")
    g.add_argument("--jobs", "-j", type=_jobs, default=None,
                   help=f"notebooks graded at a time, each in its own sandbox (default: the cores, {default_jobs()})")
    g.add_argument("--gradebook", metavar="DIR", default=None,
                   help="put the rows into DIR/grades.csv, DIR/grades.json and DIR/feedback/<student>/<lab>.html (DIR: "
                        "new, empty, or a gradebook this command wrote, whose other rows stay)")
    g.add_argument("--nbgrader", metavar="COURSE_DIR", default=None,
                   help="grade COURSE_DIR/submitted/<student>/<assignment>/*.ipynb and write the scores into the "
                        "course's nbgrader gradebook.db")
    g.add_argument("--assignment", metavar="NAME", default=None, help="with --nbgrader: only this assignment")
    g.add_argument("--student", metavar="ID", action="append", default=None,
                   help="only this student (repeat it for more): a regrade that changes only their rows of the "
                        "gradebook and of nbgrader's database")
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
    """Grade a class; exit 0 where every row is a score, ``EXIT_NOT_GRADED`` (3) where a notebook was not graded (the
    machine failed twice, not the notebook), 1 where a record could not be written (nbgrader's database locked, a
    feedback page not delivered) -- each after everything else is written, so a script sees what to rerun."""
    from . import classlist, gradebook
    from .batch import Options, grade_class

    folder = gradebook.check_folder(args.gradebook) if args.gradebook else None
    secret = classlist.read_secret(args.course_secret) if args.course_secret else None
    sources = Path(args.solutions) if args.solutions else None
    course = Course(args.nbgrader, args.assignment, args.student, sources) if args.nbgrader else None
    subs = course.submissions(args.notebook) if course else classlist.from_arguments(args.notebook)
    subs = classlist.identify(subs, sources)
    if args.student and not course:
        subs = [s for s in subs if s.student in args.student]
    if course:
        subs = course.check(subs)
    roster = sorted({s.key for s in subs} | ({r.student_lab for r in course.missing} if course else set()))
    in_slice = (lambda key: classlist.shard_of(key, args.shard[1]) == args.shard[0]) if args.shard else None
    if in_slice:
        subs = [s for s in subs if in_slice(s.key)]
    classlist.assign_seeds(subs, args.seed, secret)
    jobs = args.jobs or default_jobs()
    shard = f", slice {args.shard[0]}/{args.shard[1]} of {len(roster)}" if args.shard else ""
    print(f"grading {len(subs)} notebook{'s' if len(subs) != 1 else ''} of "
          f"{len({s.student for s in subs})} student(s){shard}, {jobs} at a time", file=sys.stderr, flush=True)
    for line in course.points_changed() if course else []:
        print(f"points from the course: {line}", file=sys.stderr, flush=True)
    start = time.monotonic()
    rows, shared = grade_class(subs, Options(args.timeout, args.total_timeout, args.solutions, jobs))
    seconds = time.monotonic() - start
    if course:
        rows = course.finish(rows, in_slice)
    meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seeds": "course secret (HMAC of student and lab)" if secret else
            ("--seed" if args.seed is not None else "random, one per notebook"),
            "shard": {"index": args.shard[0], "of": args.shard[1]} if args.shard else None,
            "class": [list(k) for k in roster], "shared_runs": shared, "seconds": round(seconds, 1)}
    problems, written = save_rows(folder, rows, meta, sources)
    if problems:
        problems[0] += "; the scores are only in the table below (rerun: with --course-secret they repeat exactly)"
    if course and args.shard:
        print("nbgrader: a slice writes nothing into the course; `gradebook merge SLICES... --out DIR --nbgrader "
              "COURSE` writes the whole class into its gradebook.db", file=sys.stderr)
    elif course and not problems:
        problems += course.write(rows)
    print_summary(rows, shared, seconds, args.json, folder if written else None, course and course.recorded,
                  problems)
    return exit_status(rows, problems)


def save_rows(folder, rows, meta, sources) -> tuple[list[str], bool]:
    """The rows into the gradebook (``([], True)``), or the one line saying why they could not be -- and then
    nothing else is written anywhere (``([problem], False)``): the old gradebook is whole."""
    from . import gradebook
    from .classlist import printable
    if folder is None:
        return [], False
    try:
        gradebook.save(folder, rows, meta, sources, say=lambda line: print(line, file=sys.stderr, flush=True))
    except OSError as exc:
        return [f"gradebook: {printable(str(folder))} was not changed: {exc.strerror or exc}; nothing else was "
                "written"], False
    return [], True


def exit_status(rows, problems) -> int:
    from .batch import NOT_GRADED
    from .notebook import EXIT_NOT_GRADED
    return EXIT_NOT_GRADED if any(r.status == NOT_GRADED for r in rows) else EXIT_PROBLEMS if problems else 0


class Course:
    """An nbgrader course being graded: its submissions, its points and students, and what it gets back."""

    def __init__(self, folder: str, assignment: str | None, students: list[str] | None, sources: Path | None):
        from .nbgrader_db import check_database
        self.folder, self.assignment, self.students, self.sources = folder, assignment, students, sources
        self.missing, self.url, self.notebooks, self.recorded = [], None, {}, False
        if Path(folder, "submitted").is_dir():  # (where it is not, listing the submissions says so)
            check_database(folder)

    def submissions(self, files: list[str]):
        from .classlist import from_nbgrader
        return from_nbgrader(self.folder, self.assignment, self.students, files)

    def check(self, subs):
        """The course's notebooks compared with the kit's (a disagreement: one line, exit 2, before any grade),
        each submission's notebook id the course's notebook of its lab (a renamed file is recorded under the
        assignment's notebook), and the rows of students who handed nothing in."""
        from . import nbgrader_course
        assignments = {s.assignment for s in subs if s.assignment} | ({self.assignment} if self.assignment else set())
        self.open(assignments)
        self.notebooks = nbgrader_course.course_notebooks(self.folder, assignments, self.sources)
        for sub in subs:
            found = [cn for cn in self.notebooks.get(sub.assignment, []) if cn.lab == sub.lab]
            if found:
                sub.notebook_id = found[0].notebook_id
            elif sub.lab and self.notebooks.get(sub.assignment) and sub.problem is None:
                sub.problem = (f"{sub.path.name} is {sub.lab}, which assignment {sub.assignment} does not hold "
                               f"({', '.join(cn.lab for cn in self.notebooks[sub.assignment])})")
        self.missing = nbgrader_course.missing_rows(self.folder, self.url, self.notebooks, subs, self.students)
        return subs

    def open(self, assignments: set[str]) -> None:
        """The course's database, checked (nbgrader's, holding every assignment graded) before anything is
        written."""
        from .nbgrader_db import check_course
        self.url = check_course(self.folder, assignments)

    def points_changed(self) -> list[str]:
        from .nbgrader_course import points_changed
        return points_changed(self.notebooks)

    def finish(self, rows, in_slice):
        """The graded rows with the course's points, the missing ones added, the manual scores given so far and
        the late penalties of the course's policy."""
        from . import nbgrader_course
        by_lab = {(cn.assignment, cn.lab): cn for nbs in self.notebooks.values() for cn in nbs}
        for row in rows:
            cn = by_lab.get((row.assignment, row.lab))
            if cn is not None and row.report:
                row.report = nbgrader_course.with_course_points(row.report, cn)
        rows = rows + [r for r in self.missing if in_slice is None or in_slice(r.student_lab)]
        nbgrader_course.manual_scores(self.url, rows)
        nbgrader_course.late_penalties(self.folder, self.url, rows)
        return rows

    def write(self, rows) -> list[str]:
        from .nbgrader_db import write_course
        problems, self.recorded = write_course(self.folder, self.url, rows, self.sources)
        return [f"nbgrader: {line}" for line in problems]


def print_summary(rows, shared, seconds, as_json, folder, url, problems) -> None:
    """The class's table and one line of counts: graded, refused (the notebook's fault: 0 points) and not graded
    (the machine's: no score, rerun them) apart, since only the last needs the instructor to act."""
    from .batch import GRADED, MISSING, NOT_GRADED, REFUSED
    from .classlist import printable
    for line in problems:
        print(printable(line), file=sys.stderr)
    if as_json:
        print(json.dumps({"rows": [r.to_dict() for r in rows], "shared_runs": shared, "seconds": round(seconds, 1)}))
        return
    width = max([len(r.student) for r in rows] + [7])
    lab_w = max([len(r.lab) for r in rows] + [3])
    print(f"{'student':<{width}}  {'lab':<{lab_w}}  {'score':>13}  {'seed':>10}  {'seconds':>7}  note")
    for r in sorted(rows, key=lambda r: (r.student, r.lab)):
        score = f"{r.score:g} / {r.max_score:g}" if r.report else "-"
        print(printable(f"{r.student:<{width}}  {r.lab:<{lab_w}}  {score:>13}  "
                        f"{r.seed if r.seed is not None else '':>10}  {r.seconds:>7.1f}  {r.why}"))
    count = {s: sum(1 for r in rows if r.status == s) for s in (GRADED, REFUSED, NOT_GRADED, MISSING)}
    failed = (" (the machine failed, not the notebook: rerun them"
              + ("; nothing was written into nbgrader's gradebook.db for them" if url else "") + ")"
              if count[NOT_GRADED] else "")
    missing = f", {count[MISSING]} without a submission (0 points)" if count[MISSING] else ""
    print(f"{count[GRADED]} graded, {count[REFUSED]} refused{missing}, {count[NOT_GRADED]} not graded{failed}, "
          f"in {seconds:.0f} s" + (f"; gradebook: {printable(str(folder))}" if folder else "")
          + ("; scores written to nbgrader's gradebook.db" if url else ""))
    for lab, s in sorted(shared.items()):
        print(f"shared runs{' of ' + lab if lab else ''}: {s['what']}"
              + (f" (made once in {s['seconds']:g} s, reused by every grade of the lab)" if not s["error"] else ""))


def add_gradebook_args(p: argparse.ArgumentParser) -> None:
    from .gradebook_views import add_view_args
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p), required=True)
    m = sub.add_parser("merge", help="join the gradebooks of a class's --shard K/N slices into one",
                       description="join the gradebooks of a class's --shard K/N slices into one: refuses a "
                                   "student's lab graded twice, reports slices and notebooks missing")
    m.add_argument("folders", metavar="DIR", nargs="+", help="the slices' gradebook folders")
    m.add_argument("--out", metavar="DIR", required=True, help="the merged gradebook (new, empty, or one "
                                                               "this command wrote, whose other rows stay)")
    m.add_argument("--nbgrader", metavar="COURSE_DIR", default=None,
                   help="also write the merged rows into the course's gradebook.db and feedback/ (the slices of an "
                        "nbgrader course write nothing there themselves)")
    r = sub.add_parser("record", help="write a gradebook's rows into an nbgrader course (after a locked database)",
                       description="write a gradebook's rows into an nbgrader course: its gradebook.db, feedback/ "
                                   "and autograded/ -- what `grade --nbgrader` does after grading, for a gradebook "
                                   "whose database write failed")
    r.add_argument("folder", metavar="DIR", help="the gradebook")
    r.add_argument("--nbgrader", metavar="COURSE_DIR", required=True, help="the course")
    add_view_args(sub)


def cmd_gradebook(args: argparse.Namespace) -> int:
    """``gradebook merge``: every slice checked whole before the ``--out`` folder is changed (a bad one: one line,
    exit 2, nothing changed); exit 1 where the merge is incomplete (missing slices, notebooks graded in no slice),
    3 where a row is not graded.  ``gradebook record``: a gradebook's rows into the course."""
    from . import gradebook
    from .classlist import printable
    if args.action not in ("merge", "record"):
        from .gradebook_views import cmd_view
        return cmd_view(args)
    course = Course(args.nbgrader, None, None, None) if args.nbgrader else None
    if args.action == "record":
        rows = gradebook.existing_rows(gradebook.check_folder(args.folder, "DIR"))[1]
        return _into_course(course, rows, [])
    merged, problems = gradebook.merge(args.folders, args.out)
    meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **merged["meta"]}
    if course:
        course.open({r.assignment for r in merged["rows"] if r.assignment})
    failed, written = save_rows(merged["folder"], merged["rows"], meta, None)
    if not written:
        return _into_course(None, merged["rows"], failed)
    print(f"merged {len(args.folders)} gradebook(s): {len(merged['rows'])} rows of "
          f"{len({r.student for r in merged['rows']})} student(s) into {printable(args.out)}")
    return _into_course(course, merged["rows"], [f"gradebook merge: {p}" for p in problems])


def _into_course(course, rows, problems: list[str]) -> int:
    """The rows into the course (where one is named), every problem printed; the exit status of the rows."""
    from .classlist import printable
    if course is not None:
        if course.url is None:
            course.open({r.assignment for r in rows if r.assignment})
        problems = problems + course.write(rows)
        if course.recorded:
            print(f"wrote {sum(1 for r in rows if r.assignment)} rows into {printable(course.folder)}/gradebook.db "
                  "and its feedback/")
    for line in problems:
        print(printable(line), file=sys.stderr)
    return exit_status(rows, problems)
