"""The kit's size limits, in one place, and the checks that apply them before anything is allocated.

Why limits at all: every command builds something whose size the user chooses -- a schedule of
``pp x chunks x microbatches`` ops, a layout's expanded symbols, an image of so many pixels.  Without
a bound, a typo (``--pp 100000 --microbatches 1000000``) runs until the machine kills it.  Each
limit below is generous for what the kit teaches (Megatron's largest pipelines are far smaller)
and small enough that the slowest command stays within seconds to a minute and well under a
4 GB memory cap.  A refusal is one line naming the limit, e.g. ``pp=100000 is more than the
limit of 1,024 ranks (MAX_RANKS)``.

Imports nothing from the kit, no torch: every reader and generator can use it.
"""

from __future__ import annotations

import math

MAX_RANKS = 1024  # pipeline ranks (pp)
MAX_CHUNKS = 128  # model chunks per rank (the virtual pipeline size v)
MAX_MICROBATCHES = 1_000_000  # microbatches per step
MAX_GPUS = 1_048_576  # GPUs a plan is made for (the planner tries every pp that divides them)
MAX_VERIFY_RUNS = 8  # candidates `plan --verify K` runs for real, one torchrun job each
MAX_PLAN_OPS = 6_000_000  # ops in the schedules one plan builds and sizes, over all its candidates; it simulates
#                           every one that fits below 500,000 ops, above only those that could tie (a 145.6B model
#                           on 1,536 GPUs at a global batch of 4,608: 5.3M ops, 5.5 s on 2 cores; ~30 s at worst,
#                           when every candidate fits and has to be simulated)
MAX_OPS = 2_000_000  # ops in one schedule, all ranks together (the simulator does 262,144 in ~1.7 s)
MAX_LAYERS = 1024  # decoder layers of a model config or layout (the exact balancer is quadratic in them)
MAX_MODEL_DIM = 2**31 - 1  # any other model size: hidden, vocab, sequence length, heads, ...
MAX_RUN_MEMORY_BYTES = 32 * 2**30  # pipeline_kit.run's estimate for the whole job: fp32 weights, grads and the
#                                    reference copy, plus every microbatch's activations on every layer
MAX_STEPS = 100_000  # training steps of one run
MAX_SEED = 2**63 - 1  # a random seed (the largest torch takes)
MAX_REPEAT = 100_000  # one repeat count in a layout string (t*n, (...)*n)
MAX_LAYOUT_SYMBOLS = 200_000  # symbols of a layout string once its repeats are expanded
MAX_LAYOUT_NESTING = 32  # parentheses inside parentheses in a layout string
MAX_FILE_BYTES = 32 * 2**20  # any file the kit reads (schedules, timelines, configs, traces), or text given to parsers
MAX_NOTEBOOK_BYTES = 20 * 2**20  # a notebook handed to grade
MAX_GRADEBOOK_BYTES = 256 * 2**20  # a class gradebook's grades.json (gradebook merge reads them)
MAX_JSON_DEPTH = 32  # nesting of arrays and objects in a JSON file
MAX_NUMBER = 1e15  # magnitude of a time, cost, byte count or factor; positive ones are at least 1 / MAX_NUMBER
MAX_SLOTS = 1000  # slots one op takes in a hand-drawn timeline (--fwd-slots, --bwd-slots)
MAX_TIMEOUT_S = 1e6  # any timeout in seconds (about 11.6 days)
MAX_DRAW_OPS = 50_000  # ops in one drawing (matplotlib draws ~3,000 boxes a second)
MAX_DPI = 1200  # resolution of a drawing
MAX_IMAGE_SIDE = 32_768  # pixels along either side of a drawing
MAX_IMAGE_PIXELS = 100_000_000  # pixels of a drawing (400 MB as RGBA)
# What a grader rebuilds from a student's kernel's data (pipeline_kit.grading.wire), checked before any work:
MAX_FRACTION_BITS = 128  # bits of a Fraction's numerator or denominator
MAX_RESIMULATED_OPS = 100_000  # ops of a SimResult the grader simulates again (1F1B at pp=8, M=6,250; ~1 s)
MAX_COST_DENOMINATOR = 2**64  # common denominator of a re-simulated SimResult's Fraction costs (keeps times small)

LIMITS = {name: value for name, value in globals().items() if name.startswith("MAX_")}


class LimitError(ValueError):
    """An input is larger than a documented limit; ``str(err)`` names the input and the limit."""


def _fmt(value) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}"


def check_at_most(what: str, value, limit_name: str, unit: str = "") -> None:
    """Refuse ``value`` above ``LIMITS[limit_name]``: ``"{what} is more than the limit of N unit (NAME)"``."""
    limit = LIMITS[limit_name]
    if value > limit:
        unit = f" {unit}" if unit else ""
        raise LimitError(f"{what} is more than the limit of {_fmt(limit)}{unit} ({limit_name})")


def ops_per_microbatch_stage(name: str, forward_only: bool = False) -> int:
    """Ops one microbatch costs on one virtual stage: F (+ B, or I + W for zero-bubble schedules; DualPipe-V
    splits some of its backwards, so 3 bounds it)."""
    if forward_only:
        return 1
    return 3 if name.startswith("zb") or name in ("interleaved-zb", "dualpipev") else 2


def check_schedule_size(pp: int, microbatches: int, chunks: int = 1, ops_per_cell: int = 2) -> None:
    """Refuse a schedule whose sizes, or whose op count ``pp x chunks x microbatches x ops_per_cell``,
    pass a limit -- before any list is built.  The arguments are already positive integers."""
    check_at_most(f"pp={pp}", pp, "MAX_RANKS", "ranks")
    check_at_most(f"chunks={chunks}", chunks, "MAX_CHUNKS", "chunks per rank")
    check_at_most(f"microbatches={microbatches}", microbatches, "MAX_MICROBATCHES", "microbatches")
    ops = pp * chunks * microbatches * ops_per_cell
    what = f"pp={pp} x chunks={chunks} x microbatches={microbatches}" if chunks > 1 else \
        f"pp={pp} x microbatches={microbatches}"
    check_at_most(f"{what} x {ops_per_cell} op(s) each = {ops:,} ops", ops, "MAX_OPS", "ops")


def check_number(what: str, value: float, positive: bool = False) -> float:
    """A finite number no larger than ``MAX_NUMBER`` (and, when ``positive``, at least its inverse)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise LimitError(f"{what} must be a finite number, got {value!r}")
    low = 1 / MAX_NUMBER if positive else -MAX_NUMBER
    if not low <= value <= MAX_NUMBER:
        raise LimitError(f"{what} is {value!r}, outside [{low:g}, {MAX_NUMBER:g}] (MAX_NUMBER)")
    return value


def limits_table() -> str:
    """The limits as ``NAME  value`` lines (for the README and ``--help`` texts)."""
    return "\n".join(f"{name:<20} {_fmt(value)}" for name, value in LIMITS.items())
