"""One command for a GPU box: every schedule with --check-grads, CUDA memory per rank, and the labs' torchrun cells.

What it runs, each as a user would (``torchrun`` started by :func:`pipeline_kit.launch.torchrun`, which never picks
a backend -- ``pipeline_kit.run`` does: NCCL with one GPU per rank, or the ranks sharing one GPU and sending
through gloo when there are fewer GPUs than ranks):

1. every schedule family on pp = 2 and pp = 4 with ``--check-grads``: the gradients must match the single-process
   reference (max relative error <= 1e-6);
2. per rank, ``torch.cuda.max_memory_allocated`` next to what the kit predicts: weights + gradients of the rank's
   stages plus the activations live at the simulator's peak (peak count x bytes per microbatch-chunk);
3. the labs that start ``torchrun`` (5 and 6), graded by ``python -m pipeline_kit grade`` from their solutions:
   full marks means every torchrun cell ran and its checks passed on this box;
4. plan and verify (issue 26): ``python -m pipeline_kit plan`` for the kit's tiny model on this box's GPUs, then
   ``--verify 2`` runs its top two for real (the real model on GPUs) and reports measured against predicted step
   time, Kendall's tau of the two orders, and ``torch.cuda.max_memory_allocated`` per rank.

Without CUDA it says so and exits 0 having run nothing (``--allow-cpu`` runs it on gloo/CPU anyway, to try the
script itself).  Exit status 1 when a run fails, a gradient differs or a lab loses points.

Run: ``python benchmarks/gpu_check.py [--pp 2,4] [--schedules zbv,dualpipev] [--skip-labs] [--skip-plan]
[--json out.json]``;
``--plan`` prints the commands without running them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cli import ROOT, check_outputs, parser, run, write_json
from pipeline_kit.argtypes import int_at_most, shown, timeout_seconds
from pipeline_kit.schedules import SCHEDULES, ScheduleConfigError, build_schedule

LAYERS = 8  # of the model every job trains: one layer per stage at least, so pp x chunks <= 8
SMALL = ["--layers", str(LAYERS), "--hidden", "64", "--heads", "4", "--seq-len", "32", "--micro-batch-size", "2",
         "--vocab", "256"]
LABS = ["lab05_p2p", "lab06_stages"]
LAB_TIMEOUT_FACTOR = 3  # a lab's grade may take this many --timeout (it starts several torchrun jobs)
PIPELINE_SIZE = int_at_most("MAX_RANKS", "ranks")


def pipeline_sizes(text: str) -> list[int]:
    """``--pp``: comma-separated pipeline sizes, each a positive integer within ``MAX_RANKS``, none twice."""
    sizes = []
    for i, field in enumerate(text.split(","), start=1):
        try:
            pp = PIPELINE_SIZE(field)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"value {i} of {shown(text)} is not a pipeline size: {exc}") from None
        if pp in sizes:
            raise argparse.ArgumentTypeError(f"pp {pp} is given twice in {shown(text)}")
        sizes.append(pp)
    return sizes


def parse(argv=None) -> argparse.Namespace:
    p = parser(__file__, __doc__)
    p.add_argument("--pp", type=pipeline_sizes, default="2,4",
                   help=f"pipeline sizes to run; the jobs' model has {LAYERS} layers, one per stage at least, so pp "
                        f"is at most {LAYERS} (at most {LAYERS // 2} for the families with 2 chunks per rank)")
    p.add_argument("--schedules", default=",".join(SCHEDULES), help="families, comma-separated")
    p.add_argument("--skip-labs", action="store_true", help="do not grade the labs' torchrun notebooks")
    p.add_argument("--skip-plan", action="store_true", help="do not run the plan-and-verify case")
    p.add_argument("--json", metavar="FILE", help="write every result as JSON (checked before any job runs)")
    p.add_argument("--plan", action="store_true", help="print the commands, run nothing")
    p.add_argument("--allow-cpu", action="store_true", help="run even without CUDA (gloo on CPU, no memory figures)")
    p.add_argument("--timeout", type=timeout_seconds, default=600.0, metavar="S",
                   help=f"seconds per torchrun job; a lab's grade gets {LAB_TIMEOUT_FACTOR} times as many")
    args = p.parse_args(argv)
    args.schedules = args.schedules.split(",")
    unknown = [s for s in args.schedules if s not in SCHEDULES]
    if unknown:
        p.error(f"argument --schedules: unknown {unknown}; choose from {', '.join(SCHEDULES)}")
    for pp in args.pp:  # refused here, not by pipeline_kit.run after the jobs before it have run
        for name in args.schedules:
            try:
                stages = build_schedule(name, pp, 2 * pp).stages
            except ScheduleConfigError as exc:
                p.error(f"--schedules {name} with --pp {pp}: {exc}")
            if stages > LAYERS:
                p.error(f"argument --pp: {name} on {pp} ranks has {stages} stages, more than the jobs' model has "
                        f"layers ({LAYERS}): give smaller pipeline sizes")
    check_outputs(p, {"--json": args.json})
    return args


def run_args(name: str, pp: int, out: Path) -> list[str]:
    """``pipeline_kit.run`` arguments: M = 2 pp, a size every family accepts (DualPipe-V needs M >= 2 pp)."""
    return ["--schedule", name, "--microbatches", str(2 * pp), "--steps", "2", "--check-grads", *SMALL,
            "--json", str(out)]


def memory_rows(summary: dict) -> list[dict]:
    """Per rank: CUDA max allocated against weights + grads + activations at the simulated peak (bytes)."""
    sched = build_schedule(summary["schedule"], summary["pp"], summary["microbatches"], summary["chunks"])
    rows = []
    for r in range(sched.pp):
        params = sum(summary["stage_params"][s] for s in sched.stages_of(r))
        predicted = 2 * 4 * params + summary["peak_activation_bytes"][r]  # fp32 weights and grads, SGD keeps no state
        measured = (summary["cuda_max_memory_allocated"] or [None] * sched.pp)[r]
        rows.append({"rank": r, "simulated_peak_activations": summary["simulated_peak_activations"][r],
                     "activation_bytes": summary["peak_activation_bytes"][r], "weight_grad_bytes": 8 * params,
                     "predicted_bytes": predicted, "cuda_max_memory_allocated": measured,
                     "ratio": measured / predicted if measured else None})
    return rows


def check_schedules(args, tmp: Path) -> list[dict]:
    from pipeline_kit.launch import torchrun

    results = []
    for pp in args.pp:
        for name in args.schedules:
            out = tmp / f"{name}-pp{pp}.json"
            t0 = time.monotonic()
            try:
                proc = torchrun(pp, *run_args(name, pp, out), timeout=args.timeout)
            except subprocess.TimeoutExpired as exc:  # the job was stopped: a failure of this run, not the end
                said = f"timed out after {args.timeout:g} s (--timeout)"
                proc = subprocess.CompletedProcess(exc.cmd, None, exc.output or "",
                                                   f"{exc.stderr}\n{said}" if exc.stderr else said)
            took = time.monotonic() - t0
            first = proc.stdout.splitlines()[0] if proc.stdout else ""
            result = {"schedule": name, "pp": pp, "returncode": proc.returncode, "seconds": round(took, 1),
                      "backend_line": first}
            if proc.returncode == 0 and out.exists():
                summary = json.loads(out.read_text())
                result.update(grads_match=summary["grads_match"], max_rel_error=summary["max_rel_error"],
                              grads_bitwise=summary["grads_bitwise"], backend=summary["backend"],
                              device=summary["device"], memory=memory_rows(summary))
            else:
                result["stderr_tail"] = proc.stderr[-2000:]
            results.append(result)
            print_schedule_result(result)
    return results


def print_schedule_result(res: dict) -> None:
    head = f"{res['schedule']:<15} pp={res['pp']}"
    if res["returncode"] != 0 or "grads_match" not in res:
        why = "stopped" if res["returncode"] is None else f"exit {res['returncode']}"
        print(f"{head}  FAILED ({why}): {res.get('stderr_tail', '')[-300:]}", flush=True)
        return
    b, t = res["grads_bitwise"]
    print(f"{head}  {res['backend']}/{res['device']}  grads match: {res['grads_match']} "
          f"(max rel err {res['max_rel_error']:.1e}, {b}/{t} bitwise)  {res['seconds']:.0f} s", flush=True)
    for row in res["memory"]:
        if row["cuda_max_memory_allocated"] is None:
            continue
        print(f"    rank {row['rank']}: peak {row['simulated_peak_activations']} microbatch-chunks live; "
              f"predicted {row['predicted_bytes'] / 2**20:8.2f} MiB (weights+grads "
              f"{row['weight_grad_bytes'] / 2**20:.2f}, activations {row['activation_bytes'] / 2**20:.2f}); "
              f"CUDA max allocated {row['cuda_max_memory_allocated'] / 2**20:8.2f} MiB; "
              f"measured/predicted {row['ratio']:.2f}", flush=True)


def check_labs(args) -> list[dict]:
    results = []
    for lab in LABS:
        cmd = [sys.executable, "-m", "pipeline_kit", "grade", str(ROOT / "solutions" / f"{lab}.ipynb"), "--json",
               "--timeout", "300"]
        timeout = args.timeout * LAB_TIMEOUT_FACTOR
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            proc = subprocess.CompletedProcess(cmd, None, "", f"timed out after {timeout:g} s "
                                               f"({LAB_TIMEOUT_FACTOR} x --timeout)")
        try:
            report = json.loads(proc.stdout)
            res = {"lab": lab, "score": report["score"], "max_score": report["max_score"],
                   "lost": [c["name"] + ": " + c["feedback"] for c in report["checks"]
                            if c["points"] < c["max_points"]]}
        except (ValueError, KeyError):
            res = {"lab": lab, "score": None, "max_score": None, "lost": [proc.stderr[-1000:]]}
        results.append(res)
        print(f"{lab:<15} graded from its solution: {res['score']} / {res['max_score']}"
              + "".join(f"\n    lost: {line}" for line in res["lost"]), flush=True)
    return results


def plan_command(gpus: int) -> list[str]:
    """The plan-and-verify case: the tiny model on this box's GPUs (2 at least, to have a pipeline)."""
    return [sys.executable, "-m", "pipeline_kit", "plan", "--config", "tiny", "--gpus", str(max(gpus, 2)),
            "--gpu-memory-gb", "16", "--global-batch", "16", "--verify", "2", "--json"]


def check_plan(args, gpus: int) -> dict:
    cmd = plan_command(gpus)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout * 2, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {args.timeout * 2:g} s"}
    try:
        report = json.loads(proc.stdout)["verify"]
    except (ValueError, KeyError):
        return {"ok": False, "error": proc.stderr[-1000:]}
    ok = bool(report["runs"]) and all(r["error"] is None for r in report["runs"])
    for r in report["runs"]:
        print(f"plan --verify: {r['label']}: measured {r['measured_s']} s, planned {r['predicted_s']} s, "
              f"cuda max memory {r['cuda_max_memory_allocated']}" if r["error"] is None else
              f"plan --verify: {r['label']}: FAILED {r['error']}", flush=True)
    print(f"plan --verify: mode {report['mode']}, Kendall's tau {report['kendall_tau']}", flush=True)
    return {"ok": ok, **report}


def main(argv=None) -> int:
    args = parse(argv)
    if args.plan:
        for pp in args.pp:
            for name in args.schedules:
                print("torchrun --standalone --nproc-per-node", pp, "-m pipeline_kit.run",
                      " ".join(run_args(name, pp, Path(f"{name}-pp{pp}.json"))))
        if not args.skip_labs:
            for lab in LABS:
                print(f"python -m pipeline_kit grade solutions/{lab}.ipynb --json --timeout 300")
        if not args.skip_plan:
            print(" ".join(["python", *plan_command(2)[1:]]) + "   (--gpus: this box's GPU count)")
        return 0
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False): skipped, nothing was run")
        return 0
    gpus = torch.cuda.device_count()
    print(f"gpu_check: {gpus} CUDA device(s)"
          + (f" ({torch.cuda.get_device_name(0)}); pp <= {gpus}: NCCL, one GPU per rank; larger pp: the ranks share "
             f"GPUs and send through gloo" if gpus else "; running on CPU (--allow-cpu)"), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        schedules = check_schedules(args, Path(tmp))
    labs = [] if args.skip_labs else check_labs(args)
    planned = None if args.skip_plan else check_plan(args, gpus)
    ok = all(r["returncode"] == 0 and r.get("grads_match") for r in schedules) and all(
        r["score"] is not None and r["score"] == r["max_score"] for r in labs) and (planned is None or planned["ok"])
    if args.json:
        write_json(args.json, {"gpus": gpus, "ok": ok, "schedules": schedules, "labs": labs, "plan": planned})
    print(f"gpu_check: {'all passed' if ok else 'FAILURES above'} ({len(schedules)} runs, {len(labs)} labs)")
    return 0 if ok else 1


if __name__ == "__main__":
    run(__file__, main)
