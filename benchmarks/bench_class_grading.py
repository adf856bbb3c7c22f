"""How fast is a class's grade?  The batch command against one ``grade`` call per notebook, side by side.

A generated class: ``--students`` students (at least 12 for the targets) x all ten labs, each notebook a model
answer, the untouched lab or a typical wrong answer (from the fairness catalogue, ``tests/fairness_catalogue``),
in turn.  The same notebooks, with the same seeds (one ``--course-secret``), are graded twice: by
``python -m pipeline_kit grade CLASS --gradebook DIR --jobs J`` and by one ``grade NOTEBOOK --seed S`` call after
another.  Prints both wall times, notebooks per minute, each lab's median and slowest grade in the batch, the
speedup, and whether every score is the same both ways.

Targets (issue 23, 2 cores): the batch at least 2x faster than one at a time, no lab's median grade above 30 s.
Run: ``python benchmarks/bench_class_grading.py`` (about 35 minutes on 2 cores with the default 12 students).
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cli import ROOT, check_outputs, int_between, parser, run, write_json
from pipeline_kit.grading.classlist import course_seed
from pipeline_kit.grading.notebook import nbgrader_meta

SOLUTIONS, LABS = ROOT / "solutions", ROOT / "labs"
KINDS = ("model", "untouched", "wrong")
SECRET = b"bench_class_grading: a fixed course secret"


def wrong_answers(lab: str) -> list:
    """The lab's typical wrong answers: ``Wrong`` entries of ``tests/fairness_catalogue/labNN.py``."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return list(importlib.import_module(f"fairness_catalogue.{lab[:5]}").WRONG)


def with_wrong(lab: str, wrong) -> dict:
    nb = json.loads((SOLUTIONS / f"{lab}.ipynb").read_text())
    for cell in nb["cells"]:
        if nbgrader_meta(cell).get("grade_id") == wrong.cell:
            source = "".join(cell["source"])
            cell["source"] = wrong.code if wrong.replace else f"{source}\n\n{wrong.code}"
            return nb
    raise SystemExit(f"bench_class_grading: {lab} has no answer cell {wrong.cell!r} (the catalogue is stale)")


def make_class(folder: Path, students: int) -> list[tuple[str, str, str, Path]]:
    """``[(student, lab, kind, path)]``: student i's lab j is KINDS[(i + j) % 3], so every lab gets every kind."""
    labs = sorted(p.stem for p in SOLUTIONS.glob("lab*.ipynb"))
    out = []
    for i in range(students):
        student = f"student{i + 1:02d}"
        (folder / student).mkdir(parents=True)
        for j, lab in enumerate(labs):
            kind = KINDS[(i + j) % 3]
            path = folder / student / f"{lab}.ipynb"
            if kind == "wrong":
                catalogue = wrong_answers(lab)
                path.write_text(json.dumps(with_wrong(lab, catalogue[i % len(catalogue)])))
            else:
                path.write_bytes(((SOLUTIONS if kind == "model" else LABS) / f"{lab}.ipynb").read_bytes())
            out.append((student, lab, kind, path))
    return out


def grade_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "pipeline_kit", "grade", *map(str, args)]


def one_at_a_time(notebooks) -> tuple[float, dict]:
    scores, start = {}, time.monotonic()
    for n, (student, lab, _, path) in enumerate(notebooks, 1):
        t0 = time.monotonic()
        proc = subprocess.run(grade_cmd(path, "--json", "--seed", course_seed(SECRET, student, lab)),
                              capture_output=True, text=True, check=False)
        took = time.monotonic() - t0
        report = json.loads(proc.stdout) if proc.returncode == 0 else None
        scores[student, lab] = {"checks": report["checks"] if report else None, "seconds": took}
        print(f"  one at a time {n}/{len(notebooks)}: {student} {lab} {took:.1f} s", file=sys.stderr, flush=True)
    return time.monotonic() - start, scores


def batch(folder: Path, book: Path, secret: Path, jobs: int) -> tuple[float, dict]:
    start = time.monotonic()
    proc = subprocess.run(grade_cmd(folder, "--gradebook", book, "--course-secret", secret, "--jobs", jobs),
                          stdout=subprocess.PIPE, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench_class_grading: the batch grade failed (exit {proc.returncode})")
    rows = json.loads((book / "grades.json").read_text())
    return took, {(r["student"], r["lab"]): {"checks": r.get("checks"), "seconds": r["seconds"]} for r in rows["rows"]}


def differences(batch_scores: dict, single_scores: dict) -> list[dict]:
    """The notebooks whose checks differ between the two ways: which checks, their points both ways, and
    whether the points differ or only the feedback text (a real run's timings quoted in it, say)."""
    out = []
    for key, alone in sorted(single_scores.items()):
        batch = batch_scores.get(key, {}).get("checks") or []
        if alone["checks"] == batch:
            continue
        checks = []
        for a, c in zip(alone["checks"] or [], batch):
            if a != c:
                checks.append({"name": a["name"], "alone": a["points"], "batch": c["points"],
                               "points": a["points"] != c["points"], "feedback_alone": a["feedback"],
                               "feedback_batch": c["feedback"]})
        if not checks:  # a grade that failed one way: every check differs
            checks = [{"name": "(the whole grade)", "alone": None, "batch": None, "points": True}]
        out.append({"student": key[0], "lab": key[1], "points": any(c["points"] for c in checks),
                    "checks": checks})
    return out


def main(argv=None) -> int:
    p = parser(__file__, __doc__)
    p.add_argument("--students", type=int_between(1, 200, "a generated class; the targets need at least 12"),
                   default=12, help="students in the generated class, each handing in all ten labs")
    p.add_argument("--jobs", type=int_between(1, 64, "grades at a time"), default=len(os.sched_getaffinity(0)),
                   help="the batch's --jobs")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the figures to FILE")
    args = p.parse_args(argv)
    check_outputs(p, {"--json": args.json})
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        tmp = Path(tmp)
        secret = tmp / "secret"
        secret.write_bytes(SECRET)
        notebooks = make_class(tmp / "class", args.students)
        labs = len(notebooks) // args.students
        print(f"{len(notebooks)} notebooks: {args.students} students x {labs} labs, a third each model answers, "
              f"untouched labs and typical wrong answers; batch with --jobs {args.jobs}", flush=True)
        batch_s, batch_scores = batch(tmp / "class", tmp / "book", secret, args.jobs)
        print(f"batch: {batch_s:.0f} s", flush=True)
        single_s, single_scores = one_at_a_time(notebooks)
    differ = differences(batch_scores, single_scores)
    same = not any(d["points"] for d in differ)
    labs = sorted({lab for _, lab, _, _ in notebooks})
    print(f"\n{'lab':<26} {'batch median':>12} {'batch max':>10} {'alone median':>12} {'alone max':>10}")
    per_lab = {}
    for lab in labs:
        b = [v["seconds"] for (_, lb), v in batch_scores.items() if lb == lab]
        s = [v["seconds"] for (_, lb), v in single_scores.items() if lb == lab]
        per_lab[lab] = {"batch_median_s": statistics.median(b), "batch_max_s": max(b),
                        "alone_median_s": statistics.median(s), "alone_max_s": max(s)}
        print(f"{lab:<26} {statistics.median(b):>11.1f}s {max(b):>9.1f}s {statistics.median(s):>11.1f}s "
              f"{max(s):>9.1f}s")
    speedup = single_s / batch_s
    worst = max(v["batch_median_s"] for v in per_lab.values())
    print(f"\nbatch ({args.jobs} at a time): {batch_s:.0f} s, {len(notebooks) / batch_s * 60:.1f} notebooks/min")
    print(f"one at a time:        {single_s:.0f} s, {len(notebooks) / single_s * 60:.1f} notebooks/min")
    print(f"speedup {speedup:.2f}x (target >= 2x: {'met' if speedup >= 2 else 'NOT met'}); slowest lab median "
          f"{worst:.1f} s (target <= 30 s: {'met' if worst <= 30 else 'NOT met'}); the same points both ways: "
          f"{'yes' if same else 'NO'}")
    for d in differ:
        print(f"  {d['student']} {d['lab']}: " + "; ".join(
            f"{c['name']} {c['alone']} alone, {c['batch']} in the batch" + ("" if c["points"] else " (feedback only)")
            for c in d["checks"]))
    if args.json:
        write_json(args.json, {"notebooks": len(notebooks), "jobs": args.jobs, "batch_s": batch_s,
                               "one_at_a_time_s": single_s, "speedup": speedup, "per_lab": per_lab,
                               "same_points": same, "differences": differ})
    return 0 if same else 1


if __name__ == "__main__":
    run(__file__, main)
