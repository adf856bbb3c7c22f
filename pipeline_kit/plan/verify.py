"""``plan --verify K``: run the planner's top K for real with ``torchrun`` and put measured next to predicted.

Why: a plan is a prediction, and the only way to know how far to trust one is to run it.  What a run can
confirm depends on the machine, and the report says which:

* **synthetic** (the CPU default, or ``--synthetic-compute``): the model is not built -- every op waits for its
  stage's predicted time,
  scaled so the fastest candidate's busiest rank computes for about :data:`TARGET_STEP_S`; the real schedule,
  the real P2P (gloo) and the real executor run.  P2P cannot be scaled with the compute, so each run is
  compared twice: with the planner's prediction scaled (its P2P scaled too) and with the simulator driven by
  the scaled compute and the P2P latency the run measured -- the second isolates the schedule.  It confirms the
  order of the candidates as far as the *schedule* decides it, each step time against the simulator's, and the
  peak number of live activations per rank.  It cannot confirm FLOPs -> time, the link's bandwidth, the
  all-reduce or the bytes of memory -- a waiting op allocates nothing -- and with more ranks than cores the
  waits still run on time, the compute would not.  The messages are the runtime's small default tensor, not the
  model's ``s b h``, and the planner's figures are not put next to the measured ones: the scale that turns a
  2 s step into 0.25 s cannot turn a real link's latency with it, so their ratio would measure the scaling.
* **real** (GPUs, the default there): the kit's GPT with the model's sizes trains for a few steps on ``pp``
  GPUs (data parallelism is not run: one pipeline replica); a model the runtime cannot build (grouped-query
  attention, SwiGLU) or a plan with tensor parallelism (the runtime has none) is refused before any run, with
  the reason, rather than replaced by another model.  The live activation bytes and
  ``torch.cuda.max_memory_allocated`` per rank are reported next to the step times.  The runtime trains in fp32
  with plain SGD, so those bytes are not the bf16 + Adam figures the plan sized: the report says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from ..layout.costs import ModelSpec, unbuildable
from ..limits import MAX_RANKS
from .search import PlanError, Search

TARGET_STEP_S = 0.25  # the fastest verified candidate's busiest rank's scaled compute (synthetic mode)
STEPS = 4  # training steps per run; the first is a warm-up, the median of the rest is the figure
CPU_RANKS = 8  # torchrun processes a CPU run may start (oversubscribed: waits, not compute)


MIN_TAU_RUNS = 3  # Kendall's tau over two runs is +1 or -1 -- "same order" says that without a statistic


def kendall_tau(xs: list[float], ys: list[float]) -> float | None:
    """Kendall's tau-a of two equally long lists (1: same order, -1: reversed); None for fewer than 2 items."""
    n = len(xs)
    if n < 2:
        return None
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = xs[i] - xs[j], ys[i] - ys[j]
            score += (a * b > 0) - (a * b < 0)
    return score / (n * (n - 1) / 2)


def _devices() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def verify(search: Search, k: int, synthetic: bool | None = None, log=None, timeout: float = 300) -> dict:
    """Run the top ``k`` candidates (``synthetic``: None picks by the hardware) and return the report's data."""
    from ..launch import torchrun

    gpus = _devices()
    synthetic = gpus == 0 if synthetic is None else synthetic
    if not synthetic:
        check_real_run(search)
    ranks_here = CPU_RANKS if gpus == 0 else gpus
    chosen, skipped = [], []
    for i in search.ranked[:k]:
        c = search.candidates[i]
        (chosen if c.pp <= min(ranks_here, MAX_RANKS) else skipped).append(i)
    fastest = min(chosen, key=lambda i: search.candidates[i].pipeline_time_s, default=None)
    busiest = max(search.candidates[fastest].busy_s) if fastest is not None else 0.0
    scale = TARGET_STEP_S / busiest if synthetic and busiest else 1.0
    runs = []
    folder = tempfile.mkdtemp(prefix="pipeline-kit-verify-")
    try:
        for n, i in enumerate(chosen, 1):
            c = search.candidates[i]
            out = os.path.join(folder, f"run{i}.json")
            args = _run_args(search.model, c, scale, synthetic, out)
            if log is not None:
                print(f"verify {n}/{len(chosen)}: {c.label()} -- torchrun --nproc-per-node {c.pp} -m pipeline_kit.run "
                      + " ".join(args[:-2]), file=log, flush=True)
            try:
                proc = torchrun(c.pp, *args, timeout=timeout)
            except subprocess.TimeoutExpired:  # torchrun stopped the job as a whole; the row says so
                proc = subprocess.CompletedProcess(args, None, "", f"the job outlived the {timeout:g} s it was given "
                                                   "and was stopped")
            runs.append(_compare(search, i, c, scale, synthetic, proc, out))
            if log is not None:
                print("  " + _line(runs[-1]), file=log, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    done = [r for r in runs if r["measured_s"] is not None]
    predicted = [r["planned_s"] for r in done]  # the planner's own order: its step times, unscaled
    measured = [r["measured_s"] for r in done]
    tau = kendall_tau(predicted, measured) if len(done) >= MIN_TAU_RUNS else None
    report = {"mode": "synthetic" if synthetic else "real", "scale": scale, "runs": runs,
              "skipped": [{"candidate": i, "why": f"pp={search.candidates[i].pp} needs more ranks than the "
                                                  f"{ranks_here} this machine runs"} for i in skipped],
              "kendall_tau": tau,
              "order_agrees": None if len(done) < 2 else sorted(range(len(done)), key=predicted.__getitem__)
              == sorted(range(len(done)), key=measured.__getitem__),
              "confirms": CONFIRMS["synthetic" if synthetic else "real"],
              "cannot_confirm": CANNOT["synthetic" if synthetic else "real"]}
    if log is not None:
        print(summary_text(report), file=log, flush=True)
    return report


CONFIRMS = {"synthetic": ["the schedule's step time for the predicted per-stage times (the simulator)",
                          "the order of the candidates as far as the schedule and P2P latency decide it",
                          "the peak number of live activations per rank"],
            "real": ["step time on this hardware", "the order of the candidates",
                     "peak live activations, their bytes and torch.cuda.max_memory_allocated per rank"]}
CANNOT = {"synthetic": ["the model itself (it is not built: ops wait, messages are small)",
                        "FLOPs -> time (the achieved TFLOP/s)", "the link's bandwidth (gloo on one machine)",
                        "the data-parallel all-reduce (one pipeline replica runs)",
                        "memory in bytes (a waiting op allocates nothing)"],
          "real": ["the data-parallel all-reduce (one pipeline replica runs)",
                   "bf16 and Adam's memory (the runtime trains in fp32 with plain SGD)"]}


def check_real_run(search: Search) -> None:
    """Refuse, before any run, a plan whose model the runtime would not run as planned (:class:`PlanError`, which
    the command line turns into one line and exit 2)."""
    why = unbuildable(search.model)
    if why is None and search.training.tp > 1:
        why = (f"the plan uses tensor parallelism (tp={search.training.tp}) and the runtime has none: a run would "
               "not be the planned configuration")
    if why:
        raise PlanError(f"argument --verify: {why}; --synthetic-compute checks the schedules alone")


def _run_args(m: ModelSpec, c, scale: float, synthetic: bool, out: str) -> list[str]:
    args = ["--schedule", c.schedule, "--microbatches", str(c.microbatches), "--layers", str(m.layers),
            "--layout", c.layout, "--steps", str(STEPS), "--p2p-timeout", "60"]
    if synthetic:
        v = c.chunks
        # rank-level times of 1 ms forward: each per-virtual-stage factor is then the stage's scaled time in ms
        args += ["--synthetic-compute", f"{v},{(c.bwd_ratio or 1) * v}",
                 "--stage-costs", ",".join(repr(1e3 * scale * f) for f in c.stage_fwd_s)]
        if c.bwd_ratio is None:  # measured stage times: the backward's own factors
            args += ["--stage-bwd-costs", ",".join(repr(1e3 * scale * b) for b in c.stage_bwd_s)]
    else:
        args += ["--hidden", str(m.hidden), "--heads", str(m.heads), "--seq-len", str(m.seq_len),
                 "--micro-batch-size", str(m.micro_batch_size), "--vocab", str(m.vocab), "--ffn-hidden", str(m.ffn),
                 "--seed", str(m.seed)] + (["--tie-embeddings"] if m.tie_embeddings else [])
    return args + ["--json", out]


def _compare(search: Search, index: int, c, scale: float, synthetic: bool, proc, out: str) -> dict:
    row = {"candidate": index, "label": c.label(), "planned_s": c.pipeline_time_s,
           "predicted_s": c.pipeline_time_s * scale, "measured_s": None, "ratio": None, "ratio_to_plan": None,
           "predicted_with_measured_p2p_s": None, "peak_activations": None,
           "predicted_peak_activations": None, "peak_activation_bytes": None, "cuda_max_memory_allocated": None,
           "error": None}
    try:
        with open(out, encoding="utf-8") as fh:
            summary = json.load(fh)
    except (OSError, ValueError):
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        row["error"] = (f"exit {proc.returncode}: " if proc.returncode is not None else "") + tail[0][:300]
        return row
    row["measured_s"] = summary["makespan"]
    if not synthetic:  # (synthetic: the plan's P2P cannot be scaled as its compute was, so no ratio to it)
        row["ratio_to_plan"] = summary["makespan"] / row["predicted_s"] if row["predicted_s"] else None
    simulated = summary.get("predicted_makespan") if synthetic else c.pipeline_time_s
    row["predicted_with_measured_p2p_s"] = summary.get("predicted_makespan")
    row["ratio"] = summary["makespan"] / simulated if simulated else None
    row["measured_p2p_latency_s"] = summary.get("p2p_latency")
    row["peak_activations"] = summary["peak_activations"]
    row["predicted_peak_activations"] = summary["simulated_peak_activations"]
    if not synthetic:
        row["peak_activation_bytes"] = summary["peak_activation_bytes"]
        row["cuda_max_memory_allocated"] = summary["cuda_max_memory_allocated"]
    return row


def _line(row: dict) -> str:
    if row["error"]:
        return f"failed: {row['error']}"
    text = f"measured {1e3 * row['measured_s']:.1f} ms"
    if row["predicted_with_measured_p2p_s"]:
        text += (f", simulated with the measured P2P latency {1e3 * row['predicted_with_measured_p2p_s']:.1f} ms "
                 f"(measured/simulated {row['ratio']:.3f})")
    else:
        text += f", planned {1e3 * row['predicted_s']:.1f} ms (measured/planned {row['ratio']:.3f})"
    same = row["peak_activations"] == row["predicted_peak_activations"]
    return text + f"; peak live activations {row['peak_activations']} ({'as' if same else 'NOT as'} simulated)"


def summary_text(report: dict) -> str:
    tau, agrees = report["kendall_tau"], report["order_agrees"]
    order = ("too few runs to compare orders" if agrees is None else
             f"{'the same order' if agrees else 'a different order'} as the planner's step times"
             + (f" (Kendall's tau {tau:+.2f})" if tau is not None else ""))
    lines = [f"verified {len(report['runs'])} candidate(s) ({report['mode']} compute"
             + (f", the model not built: per-stage waits x {report['scale']:.3g}" if report["mode"] == "synthetic"
                else "") + "): " + order]
    lines += [f"  skipped candidate {s['candidate']}: {s['why']}" for s in report["skipped"]]
    lines.append("  this run confirms: " + "; ".join(report["confirms"]))
    lines.append("  it cannot confirm: " + "; ".join(report["cannot_confirm"]))
    return "\n".join(lines)
