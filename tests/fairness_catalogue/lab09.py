"""Lab 9's typical wrong answers (ZB-V: stages in a V, messages, bubble, speedup, memory, what the V buys)."""

import re

from fairness import Wrong

# -- placement: each of the three functions is a third of the cell; a helper's mistake costs once -------------
LOOPED_STAGE = "def v_stage(rank, chunk, pp):\n    return chunk * pp + rank\n"
SWAPPED_STAGE = "def v_stage(rank, chunk, pp):\n    return 2 * pp - 1 - rank if chunk == 0 else rank\n"
ONE_TOO_FAR = "def v_stage(rank, chunk, pp):\n    return rank if chunk == 0 else 2 * pp - rank\n"
# v_owner and v_rank_layers built on a looped v_stage: the one mistake costs v_stage's point only
LOOPED_ALL = '''
def v_stage(rank, chunk, pp):
    return chunk * pp + rank


def v_owner(stage, pp):
    for rank in range(pp):
        for chunk in (0, 1):
            if v_stage(rank, chunk, pp) == stage:
                return rank, chunk


def v_rank_layers(rank, pp, layers):
    stages = even_layout(layers, 2 * pp).stages
    return sorted(i for chunk in (0, 1) for i in stages[v_stage(rank, chunk, pp)].layers)
'''
OWNER_SWAPPED = "def v_owner(stage, pp):\n    return (0, stage) if stage < pp else (1, 2 * pp - 1 - stage)\n"
OWNER_LOOPED = "def v_owner(stage, pp):\n    return stage % pp, stage // pp\n"
LAYERS_UNSORTED = '''
def v_rank_layers(rank, pp, layers):
    stages = even_layout(layers, 2 * pp).stages
    return [i for chunk in (1, 0) for i in stages[v_stage(rank, chunk, pp)].layers]
'''
LAYERS_BLOCK = '''
def v_rank_layers(rank, pp, layers):
    return list(even_layout(layers, pp).stages[rank].layers)
'''
LAYERS_TWO_EACH = '''
def v_rank_layers(rank, pp, layers):
    return [2 * rank, 2 * rank + 1, layers - 2 - 2 * rank, layers - 1 - 2 * rank]
'''

# -- messages -------------------------------------------------------------------------------------------------
EVERY_BOUNDARY = "def v_messages(pp, M):\n    return 2 * M * (2 * pp - 1)\n"
FORWARD_ONLY = "def v_messages(pp, M):\n    return M * (2 * pp - 2)\n"
ONE_MICROBATCH = "def v_messages(pp, M):\n    return 2 * (2 * pp - 2)\n"
FLOAT_MESSAGES = "def v_messages(pp, M):\n    return 4.0 * M * (pp - 1)\n"

# -- bubble ---------------------------------------------------------------------------------------------------
NO_BUBBLE = "def zbv_bubble(pp, M):\n    return 0\n"
ONE_F_ONE_B = "def zbv_bubble(pp, M):\n    return (pp - 1) / (M + pp - 1)\n"
INTERLEAVED = "def zbv_bubble(pp, M):\n    return (pp - 1) / (2 * M + pp - 1)\n"
OVER_IDEAL = "def zbv_bubble(pp, M):\n    return (pp - 1) / (6 * M)\n"
PERCENT = "def zbv_bubble(pp, M):\n    return 100 * (pp - 1) / (6 * M + pp - 1)\n"

# -- speedup --------------------------------------------------------------------------------------------------
UPSIDE_DOWN = "def zbv_speedup(pp, M):\n    return (6 * M + pp - 1) / (6 * (M + pp - 1))\n"
NO_ZBV_BUBBLE = "def zbv_speedup(pp, M):\n    return (M + pp - 1) / M\n"
BUBBLE_RATIO = "def zbv_speedup(pp, M):\n    return (6 * M + pp - 1) / (M + pp - 1)\n"
DIFFERENCE = "def zbv_speedup(pp, M):\n    return 6 * (M + pp - 1) - (6 * M + pp - 1)\n"
UNIT_1F1B = "def zbv_speedup(pp, M):\n    return 3 * (M + pp - 1) / (6 * M + pp - 1)\n"

# -- memory ---------------------------------------------------------------------------------------------------
PEAKS_1F1B = "def zbv_peaks(pp, M):\n    return [min(pp - r, M) for r in range(pp)]\n"
PEAKS_DOUBLED = "def zbv_peaks(pp, M):\n    return [2 * min(pp - r, M) for r in range(pp)]\n"
PEAKS_FLAT = "def zbv_peaks(pp, M):\n    return [2 * pp] * pp\n"
PEAKS_NO_2M = "def zbv_peaks(pp, M):\n    return [min(M + 1 + r, 2 * pp) for r in range(pp)]\n"
PEAKS_REVERSED = "def zbv_peaks(pp, M):\n    return [min(M + pp - r, 2 * M, 2 * pp) for r in range(pp)]\n"

# -- what the V buys and what PyTorch refuses ---------------------------------------------------------------
FEWER_MESSAGES = 'v_buys = {"ends_together", "local_turn", "even_memory", "tied_local", "fewer_messages"}\n'
MISSES_TIED = 'v_buys = {"ends_together", "local_turn", "even_memory"}\n'
TWO_FALSE = 'v_buys = {"ends_together", "local_turn", "even_memory", "tied_local", "less_memory", "no_idle"}\n'
ONE_STRING = 'v_buys = "ends_together"\n'
ZBV_NEEDS_2PP = "def v_accepted(name, pp, M, chunks):\n    return chunks == 2 and M >= 2 * pp\n"
M_AT_LEAST_PP = "def v_accepted(name, pp, M, chunks):\n    return chunks == 2 and (name == 'zbv' or M >= pp)\n"
AT_LEAST_2 = "def v_accepted(name, pp, M, chunks):\n    return chunks >= 2 and (name == 'zbv' or M >= 2 * pp)\n"
M_ABOVE_2PP = "def v_accepted(name, pp, M, chunks):\n    return chunks == 2 and (name == 'zbv' or M > 2 * pp)\n"
AS_INT = "def v_accepted(name, pp, M, chunks):\n    return int(chunks == 2 and (name == 'zbv' or M >= 2 * pp))\n"

P, MSG, BUB, VS, MEM, WHY, REF = ("zbv_main_placement", "zbv_main_messages", "zbv_main_bubble", "zbv_main_vs_1f1b",
                                  "zbv_follow_memory", "zbv_follow_why", "zbv_follow_refusal")

WRONG = [
    Wrong("v_stage-looped", "placement", LOOPED_STAGE, {P}, points={P: 1.0}),
    Wrong("v_stage-swapped", "placement", SWAPPED_STAGE, {P}, points={P: 1.0}),
    Wrong("v_stage-one-too-far", "placement", ONE_TOO_FAR, {P}, points={P: 1.0}),
    Wrong("placement-all-on-a-looped-v_stage", "placement", LOOPED_ALL, {P}, replace=True, points={P: 1.0}),
    Wrong("v_owner-chunk-first", "placement", OWNER_SWAPPED, {P}, points={P: 1.0}),
    Wrong("v_owner-looped", "placement", OWNER_LOOPED, {P}, points={P: 1.0}),
    Wrong("v_rank_layers-unsorted", "placement", LAYERS_UNSORTED, {P}, points={P: 1.0}),
    Wrong("v_rank_layers-contiguous", "placement", LAYERS_BLOCK, {P}, points={P: 1.0}),
    Wrong("v_rank_layers-two-per-stage", "placement", LAYERS_TWO_EACH, {P}, points={P: 1.0}),
    Wrong("v_messages-every-boundary", "messages", EVERY_BOUNDARY, {MSG}),
    Wrong("v_messages-forward-only", "messages", FORWARD_ONLY, {MSG}),
    Wrong("v_messages-one-microbatch", "messages", ONE_MICROBATCH, {MSG}),
    Wrong("v_messages-float", "messages", FLOAT_MESSAGES, {MSG}),
    Wrong("zbv_bubble-zero", "bubble", NO_BUBBLE, {BUB}),
    Wrong("zbv_bubble-1f1b", "bubble", ONE_F_ONE_B, {BUB}),
    Wrong("zbv_bubble-interleaved", "bubble", INTERLEAVED, {BUB}),
    Wrong("zbv_bubble-over-ideal", "bubble", OVER_IDEAL, {BUB}),
    Wrong("zbv_bubble-percent", "bubble", PERCENT, {BUB}),
    Wrong("zbv_speedup-upside-down", "vs_1f1b", UPSIDE_DOWN, {VS}),
    Wrong("zbv_speedup-no-zbv-bubble", "vs_1f1b", NO_ZBV_BUBBLE, {VS}),
    Wrong("zbv_speedup-bubble-ratio", "vs_1f1b", BUBBLE_RATIO, {VS}),
    Wrong("zbv_speedup-difference", "vs_1f1b", DIFFERENCE, {VS}),
    Wrong("zbv_speedup-1f1b-unit-costs", "vs_1f1b", UNIT_1F1B, {VS}),
    Wrong("zbv_peaks-1f1b", "memory", PEAKS_1F1B, {MEM}),
    Wrong("zbv_peaks-1f1b-doubled", "memory", PEAKS_DOUBLED, {MEM}),
    Wrong("zbv_peaks-flat", "memory", PEAKS_FLAT, {MEM}),
    Wrong("zbv_peaks-no-2M-cap", "memory", PEAKS_NO_2M, {MEM}),
    Wrong("zbv_peaks-reversed", "memory", PEAKS_REVERSED, {MEM}),
    Wrong("v_buys-fewer-messages", "why", FEWER_MESSAGES, {WHY}, points={WHY: 0.5}),
    Wrong("v_buys-misses-tied", "why", MISSES_TIED, {WHY}, points={WHY: 0.5}),
    Wrong("v_buys-two-false", "why", TWO_FALSE, {WHY}, points={WHY: 1.0}),
    Wrong("v_buys-a-string", "why", ONE_STRING, {WHY}, points={WHY: 2.0}),
    Wrong("v_accepted-zbv-needs-2pp", "refusal", ZBV_NEEDS_2PP, {REF}),
    Wrong("v_accepted-M-at-least-pp", "refusal", M_AT_LEAST_PP, {REF}),
    Wrong("v_accepted-chunks-at-least-2", "refusal", AT_LEAST_2, {REF}),
    Wrong("v_accepted-M-above-2pp", "refusal", M_ABOVE_2PP, {REF}),
    Wrong("v_accepted-int", "refusal", AS_INT, {REF}, points={REF: 1.0}),
]

REVEALS = {
    MSG: ["4M(pp-1)", "4M(pp−1)", "4·M·(pp − 1)", "4 * M * (pp - 1)", "2M(2pp-2)", "2·M·(2·pp − 2)"],
    BUB: ["6M units", "(pp-1)/(6M+pp-1)", "(pp - 1)/(6M + pp - 1)", "6M+pp-1", "6M + pp - 1", "6·M + pp − 1"],
    VS: ["6(M+pp-1)/(6M+pp-1)", "6(M + pp - 1)"],
    MEM: ["M+1+r", "M + 1 + r"],
    WHY: ["'ends_together'", "'local_turn'", "'even_memory'", "'tied_local'"],
    P: [re.compile(r"rank 0 holds the last"), re.compile(r"in a V stage \d+ is on rank \d")],
    REF: ["ZB-V takes any M", "DualPipe-V that needs M >= 2pp"],
}
