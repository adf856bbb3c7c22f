"""Lab 2's typical wrong answers (GPipe and 1F1B drawn by hand, read off and measured)."""

from fairness import Wrong

from pipeline_kit.grading import timeline_grid
from pipeline_kit.schedules import Op, Schedule, build_schedule, one_f_one_b
from pipeline_kit.sim import simulate


def _grid(schedule, **costs) -> str:
    return timeline_grid(simulate(schedule, **{"fwd": 1, "bwd": 1, **costs}))


GPIPE, ONE_F_ONE_B = _grid(build_schedule("gpipe", 4, 8)), _grid(build_schedule("1f1b", 4, 8))
LONG_WARMUP = Schedule("1f1b+1", 4, 8, 1, [  # every rank one warmup forward too many
    [Op("F", m) for m in range(min(4 - r, 8))] + [op for m in range(min(4 - r, 8), 8)
                                                  for op in (Op("F", m), Op("B", m - min(4 - r, 8)))]
    + [Op("B", m) for m in range(8 - min(4 - r, 8), 8)] for r in range(4)])
SAME_WARMUP = Schedule("1f1b-same-warmup", 4, 8, 1, [  # every rank runs rank 0's warmup
    [Op("F", m) for m in range(3)] + [op for m in range(3, 8) for op in (Op("F", m), Op("B", m - 3))]
    + [Op("B", m) for m in range(5, 8)] for r in range(4)])
REVERSED_BACKWARDS = Schedule("gpipe-reversed", 4, 8, 1, [
    [Op("F", m) for m in range(8)] + [Op("B", m) for m in reversed(range(8))] for _ in range(4)])


def grid(name: str, text: str) -> str:
    return f'{name} = """\n{text}"""'


def tweak(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


GPIPE_ORDER, ONE_F_ONE_B_ORDER = "m042_main_gpipe_order", "m042_main_1f1b_order"
DEPENDENCIES = "m043_follow_dependencies"
ACTIVATIONS, BUBBLE, IMBALANCE = "m042_main_activations", "m042_main_bubble", "m042_main_imbalance"
FILL, DRAIN, FORMULA, SLOW = "m042_follow_fill", "m042_follow_drain", "m042_follow_formula", "m042_follow_slow_stage"
F0, EARLIEST, RANK0 = "m043_follow_f0_propagation", "m043_follow_earliest_b0", "m043_follow_stage0_warmup"


def formula(expr: str) -> str:
    return f"\ndef rank_idle(pp, microbatches, f, b):\n    return {expr}\n"


WRONG = [
    # the drawings
    Wrong("gpipe-drawn-as-1f1b", "gpipe_grid", grid("gpipe_grid", ONE_F_ONE_B), {GPIPE_ORDER}),
    Wrong("gpipe-missing-an-op", "gpipe_grid", grid("gpipe_grid", tweak(GPIPE, "B6 B7 .  .  .", "B6 .  .  .  .")),
          {GPIPE_ORDER}),
    Wrong("gpipe-backwards-reversed", "gpipe_grid", grid("gpipe_grid", _grid(REVERSED_BACKWARDS)), {GPIPE_ORDER}),
    Wrong("gpipe-with-p2p-delays", "gpipe_grid",
          grid("gpipe_grid", _grid(build_schedule("gpipe", 4, 8), p2p_latency=1)), {GPIPE_ORDER}),
    Wrong("1f1b-drawn-as-gpipe", "one_f_one_b_grid", grid("one_f_one_b_grid", GPIPE), {ONE_F_ONE_B_ORDER}),
    Wrong("1f1b-warmup-one-too-many", "one_f_one_b_grid", grid("one_f_one_b_grid", _grid(LONG_WARMUP)),
          {ONE_F_ONE_B_ORDER}),
    Wrong("1f1b-same-warmup-on-every-rank", "one_f_one_b_grid", grid("one_f_one_b_grid", _grid(SAME_WARMUP)),
          {ONE_F_ONE_B_ORDER}),
    Wrong("1f1b-b0-too-early", "one_f_one_b_grid", grid("one_f_one_b_grid", tweak(
        ONE_F_ONE_B, "r2: .  .  F0 F1 .  B0", "r2: .  .  F0 F1 B0 .")), {DEPENDENCIES}),
    Wrong("1f1b-with-p2p-delays", "one_f_one_b_grid",
          grid("one_f_one_b_grid", _grid(one_f_one_b(4, 8), p2p_latency=1)), {DEPENDENCIES}),
    Wrong("1f1b-b7-a-slot-late", "one_f_one_b_grid", grid("one_f_one_b_grid", tweak(
        ONE_F_ONE_B, "B6 F7 B7 .  .  .", "B6 F7 .  B7 .  .")), {DEPENDENCIES}),
    # activations
    Wrong("peaks-current-microbatch", "peak_live", 'peak_live = {"gpipe": [8, 8, 8, 8], "1f1b": [1, 1, 1, 1]}',
          {ACTIVATIONS}, points={ACTIVATIONS: 1}),
    Wrong("peaks-warmup-only", "peak_live", 'peak_live = {"gpipe": [8, 8, 8, 8], "1f1b": [3, 2, 1, 0]}',
          {ACTIVATIONS}, points={ACTIVATIONS: 1}),
    Wrong("peaks-reversed", "peak_live", 'peak_live = {"gpipe": [8, 8, 8, 8], "1f1b": [1, 2, 3, 4]}', {ACTIVATIONS}),
    Wrong("peaks-swapped", "peak_live", 'peak_live = {"gpipe": [4, 3, 2, 1], "1f1b": [8, 8, 8, 8]}', {ACTIVATIONS},
          points={ACTIVATIONS: 2}),
    Wrong("peaks-a-list", "peak_live", "peak_live = [[8, 8, 8, 8], [4, 3, 2, 1]]", {ACTIVATIONS}),
    # the bubble
    Wrong("idle-inner-gaps-only", "bubble", 'idle_slots = {"gpipe": [6, 4, 2, 0], "1f1b": [6, 4, 2, 0]}', {BUBBLE},
          points={BUBBLE: 1}),
    Wrong("bubble-over-ideal", "bubble", 'bubble_fraction = {"gpipe": 3 / 8, "1f1b": 3 / 8}', {BUBBLE},
          points={BUBBLE: 1}),
    Wrong("bubble-1f1b-smaller", "bubble", 'bubble_fraction = {**bubble_fraction, "1f1b": 0.2}', {BUBBLE},
          points={BUBBLE: 0.5}),
    Wrong("bubble-percent", "bubble", 'bubble_fraction = {"gpipe": 27.3, "1f1b": 27.3}', {BUBBLE}),
    # imbalance and P2P
    Wrong("slow-forward-only", "imbalance", "slow_makespan = {n: simulate(build_schedule(n, pp, M), fwd=[1, 1, 2, 1], "
          "bwd=2).makespan for n in ('gpipe', '1f1b')}", {IMBALANCE}),
    Wrong("slow-equal-stages", "imbalance", "slow_makespan = {n: simulate(build_schedule(n, pp, M), fwd=1, "
          "bwd=2).makespan for n in ('gpipe', '1f1b')}", {IMBALANCE}),
    Wrong("hops-every-transfer", "imbalance", "latency_hops = {n: len(simulate(build_schedule(n, pp, M), fwd=1, "
          "bwd=2).transfers) "
          "for n in ('gpipe', '1f1b')}", {IMBALANCE}),
    Wrong("hops-extra-time", "imbalance", "latency_hops = {k: v * 0.1 for k, v in latency_hops.items()}", {IMBALANCE}),
    # the follow-up
    Wrong("fill-reversed", "follow_up", "fill_idle = fill_idle[::-1]", {FILL}),
    Wrong("fill-charges-f-plus-b", "follow_up", "fill_idle = [3 * v for v in fill_idle]", {FILL}),
    Wrong("fill-none", "follow_up", "fill_idle = [0, 0, 0, 0]", {FILL}),
    Wrong("drain-reversed", "follow_up", "drain_idle = drain_idle[::-1]", {DRAIN}),
    Wrong("drain-charges-f", "follow_up", "drain_idle = [0, 1, 2, 3]", {DRAIN}),
    Wrong("drain-none", "follow_up", "drain_idle = [0, 0, 0, 0]", {DRAIN}),
    Wrong("formula-one-direction", "follow_up", formula("(pp - 1) * f"), {FORMULA}),
    Wrong("formula-pp-offsets", "follow_up", formula("pp * (f + b)"), {FORMULA}),
    Wrong("formula-assumes-f-1", "follow_up", formula("(pp - 1) * (1 + b)"), {FORMULA}),  # hidden cases only
    Wrong("formula-capped-at-M", "follow_up", formula("min(microbatches, pp - 1) * (f + b)"), {FORMULA}),  # hidden
    Wrong("formula-share-of-step", "follow_up", formula("(pp - 1) / (microbatches + pp - 1)"), {FORMULA}),
    Wrong("slow-beat-equal-stages", "follow_up", "slow_beat = 3", {SLOW}, points={SLOW: 1}),
    Wrong("slow-idle-equal-stages", "follow_up", "slow_idle = result.idle", {SLOW}, points={SLOW: 1}),
    Wrong("slow-idle-only-stage-2", "follow_up", "slow_idle = [result.idle[0], result.idle[1], slow_idle[2], "
          "result.idle[3]]", {SLOW}),
    # reading the 1F1B drawing
    Wrong("f0-from-0", "reading", "f0_slots = [0, 1, 2, 3]", {F0}),
    Wrong("f0-all-at-once", "reading", "f0_slots = [1, 1, 1, 1]", {F0}),
    Wrong("f0-two-per-rank", "reading", "f0_slots = [1, 3, 5, 7]", {F0}),
    Wrong("earliest-on-rank-0", "reading", "earliest_backward = {'op': 'B0', 'rank': 0, 'slot': 8}", {EARLIEST}),
    Wrong("earliest-in-f0-slot", "reading", "earliest_backward = {'op': 'B0', 'rank': 3, 'slot': 4}", {EARLIEST}),
    Wrong("earliest-last-microbatch", "reading", "earliest_backward = {'op': 'B7', 'rank': 3, 'slot': 5}", {EARLIEST}),
    Wrong("earliest-a-tuple", "reading", "earliest_backward = ('B0', 3, 5)", {EARLIEST}),
    Wrong("rank0-warmup-counts-steady", "reading", "rank0_warmup = 4", {RANK0}),
    Wrong("rank0-warmup-gpipe", "reading", "rank0_warmup = 8", {RANK0}),
    Wrong("rank0-b0-at-the-first-backward", "reading", "rank0_b0_slot = 5", {RANK0}),
    Wrong("rank0-b0-from-0", "reading", "rank0_b0_slot = 7", {RANK0}),
]
REVEALS = {  # phrases that give a check's answer away (a student's own value echoed back is not one)
    ACTIVATIONS: ["holds 8 microbatches' activations", "[4, 3, 2, 1]", "1F1B's rank 0 holds only pp"],
    BUBBLE: ["the bubbles are equal", "0.273"],
    FILL: ["only waits for the forwards of the ranks above it"],
    DRAIN: ["b = 2 each"],
    FORMULA: ["(pp - 1) * (f + b)", "in the forward fill and again in the backward drain"],
    SLOW: ["[31, 31, 7, 31]"],
    F0: ["F0 moves one rank down per slot", "slot of F0 on rank"],
    EARLIEST: ["B0 starts on the last rank", "only the last stage computes", "'slot': 5"],
    RANK0: ["rank0_b0_slot = 8", "rank 0 runs 3 warmup"],
}
