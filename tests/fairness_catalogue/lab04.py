"""Lab 4's typical wrong answers (the 1F1B generator): each costs its own rubric point, once, under every seed."""

import re

from fairness import Wrong

from pipeline_kit.course.questions.m043 import megatron_warmup


def _phases(warmup: str, steady: str = 'f"F{warmup + i}", f"B{i}"', cooldown: str = "range(microbatches - warmup, "
            "microbatches)") -> str:
    return f'''
def one_f_one_b_phases(pp, microbatches, rank):
    warmup = {warmup}
    steady = []
    for i in range(microbatches - warmup):
        steady += [{steady}]
    return [f"F{{m}}" for m in range(warmup)], steady, [f"B{{m}}" for m in {cooldown}]
'''


def _order(warmup: str) -> str:
    return f'''
def one_f_one_b_order(pp, microbatches, rank):
    warmup = {warmup}
    order = [f"F{{m}}" for m in range(warmup)]
    for m in range(warmup, microbatches):
        order += [f"F{{m}}", f"B{{m - warmup}}"]
    return order + [f"B{{m}}" for m in range(microbatches - warmup, microbatches)]
'''


def _in_flight(expr: str) -> str:
    return f"\ndef max_in_flight(pp, microbatches, rank):\n    return {expr}\n"


PHASES, WARMUP, ORDER, MEMORY = "m043_main_phases", "m043_main_warmup", "m043_main_dependencies", "m043_main_p2p_memory"
JOIN_TOO_LONG = _phases("min(pp - rank, microbatches)") + '''
def one_f_one_b_order(pp, microbatches, rank):
    warmup, steady, cooldown = one_f_one_b_phases(pp, microbatches, rank)
    return warmup + steady + cooldown
'''

WRONG = [
    # (a lookup table of the kit's outputs is no entry: it fails on its first drawn case, which each seed names
    # differently -- tests/test_hidden_space.py grades it, 0 on the generator's checks under any seed)
    # the three phases, for the student's own warmup
    Wrong("phases-backward-of-the-newest", "phases", _phases("min(pp - rank - 1, microbatches)",
                                                             steady='f"F{warmup + i}", f"B{warmup + i}"'), {PHASES}),
    Wrong("phases-backward-first", "phases", _phases("min(pp - rank - 1, microbatches)",
                                                     steady='f"B{i}", f"F{warmup + i}"'), {PHASES}),
    Wrong("phases-cooldown-reversed", "phases", _phases(
        "min(pp - rank - 1, microbatches)", cooldown="reversed(range(microbatches - warmup, microbatches))"), {PHASES}),
    # the warmup length (the phases' shape is right for it)
    Wrong("warmup-one-too-many", "phases", _phases("min(pp - rank, microbatches)"), {WARMUP}),
    Wrong("warmup-same-on-every-rank", "phases", _phases("min(pp - 1, microbatches)"), {WARMUP}),
    Wrong("warmup-reversed", "phases", _phases("min(rank, microbatches)"), {WARMUP}),
    Wrong("warmup-not-capped-at-M", "phases", _phases("pp - rank - 1"), {WARMUP}),  # only M < pp - 1 shows it
    # the whole order, written on its own
    Wrong("order-warmup-one-too-many", "order", _order("min(pp - rank, microbatches)"), {ORDER}),
    Wrong("order-gpipe", "order", _order("microbatches"), {ORDER}),
    Wrong("order-not-capped-at-M", "order", _order("pp - rank - 1"), {ORDER}),  # only M < pp - 1 shows it
    Wrong("order-forward-only", "order", "\ndef one_f_one_b_order(pp, microbatches, rank):\n"
          "    return [f'F{m}' for m in range(microbatches)]\n", {ORDER}),
    # an order that joins phases with a wrong warmup: the warmup's mistake, charged where it is (here the order
    # cell redefines the phases, so the earlier checks saw the right ones and nothing is lost)
    Wrong("order-joins-its-own-phases", "order", JOIN_TOO_LONG, set()),
    # memory and the deadlock
    Wrong("memory-warmup-only", "p2p_memory", _in_flight("min(pp - rank - 1, microbatches)"), {MEMORY}),
    Wrong("memory-not-capped-at-M", "p2p_memory", _in_flight("pp - rank"), {MEMORY}),  # only M < pp shows it
    Wrong("memory-gpipe", "p2p_memory", _in_flight("microbatches"), {MEMORY}),
    Wrong("memory-current-microbatch", "p2p_memory", _in_flight("1"), {MEMORY}),
    Wrong("deadlock-example-runs", "p2p_memory", 'deadlock_example = {"pp": 2, "microbatches": 2, "ranks": '
          '[["F0", "F1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]}', {MEMORY}),
    Wrong("deadlock-example-stuck-on-one-rank", "p2p_memory", 'deadlock_example = {"pp": 2, "microbatches": 2, '
          '"ranks": [["B0", "F0", "F1", "B1"], ["F0", "F1", "B0", "B1"]]}', {MEMORY}),
]
REVEALS = {
    WARMUP: ["pp - rank - 1", "min(pp - rank - 1, M)", re.compile(r"pp - r - 1"), re.compile(r"warmup is \d")],
    MEMORY: ["min(pp - rank, M)", "pp - rank, M", re.compile(r"peak_activations\[\d+\] is \d"),
             "only rank 0 holds pp"],
    # the order's op at a position, or how many forwards 1F1B runs first (the warmup's and the memory's answer too)
    ORDER: [re.compile(r"1F1B runs [FB]\d+ there"), re.compile(r"1F1B runs \d+ forwards? first"),
            re.compile(r"forward F\d+ is followed by"), re.compile(r"in flight, B\d")],
    # the phases' ops for the student's own warmup (a pair's forward or backward, named)
    PHASES: [re.compile(r"must start with [FB]\d"), re.compile(r"runs B\d+, the backward"),
             re.compile(r"its backward is B\d")],
}
# the warmup's check reads the length of the phases' first list: its expected value is Megatron's warmup
EXPECTED = {WARMUP: {"one_f_one_b_phases": megatron_warmup}}
