"""Lab 1's typical wrong answers (schedule selection, the three control flows, the callback, the phases)."""

import re

from fairness import Wrong

SEL = "m041_main_selection"
DIFF = "m041_main_differences"
CB = "m041_main_callback"
SRC = "m041_main_source"
NOP2P = "m041_follow_no_p2p"
PHASES = "m041_follow_phases"
LOSS = "m041_follow_loss_rank"
FLOW = "m041_follow_control_flow"

VPP_TRUTHY = '''
def choose_schedule(pp, vpp=None):
    if pp == 1:
        return "no-pipelining"
    return "interleaved" if vpp else "1f1b"
'''
NO_PP1 = '''
def choose_schedule(pp, vpp=None):
    if vpp is not None and vpp > 1:
        return "interleaved"
    return "no-pipelining" if pp == 1 else "1f1b"
'''
MEGATRON_NAMES = '''
def choose_schedule(pp, vpp=None):
    if pp == 1:
        return "forward_backward_no_pipelining"
    if vpp is not None and vpp > 1:
        return "forward_backward_pipelining_with_interleaving"
    return "forward_backward_pipelining_without_interleaving"
'''

_DIFF = '''
differences = {}
for name, pp, vpp in (("no-pipelining", 1, None), ("1f1b", 4, None), ("interleaved", 4, 2)):
    result = simulate(select_schedule(pp, vpp)(8), fwd=1, bwd=2)
    differences[name] = {"p2p_messages": P2P, "peak_rank0": PEAK, "bubble": BUBBLE}
'''
ONE_DIRECTION = _DIFF.replace("P2P", "len(result.transfers) // 2").replace("PEAK", "result.peak_activations[0]") \
    .replace("BUBBLE", "round(result.bubble_fraction, 3)")
PEAK_LIST = _DIFF.replace("P2P", "len(result.transfers)").replace("PEAK", "result.peak_activations") \
    .replace("BUBBLE", "round(result.bubble_fraction, 3)")
PERCENT = _DIFF.replace("P2P", "len(result.transfers)").replace("PEAK", "result.peak_activations[0]") \
    .replace("BUBBLE", "round(100 * result.bubble_fraction, 1)")

_FWD = '''
import torch.nn.functional as F

def forward_step(data_iterator, model):
    tokens, targets = next(data_iterator)
    logits = model(tokens)

    def loss_func(output_tensor):
        loss = F.cross_entropy(LOGITS.reshape(-1, LOGITS.shape[-1]), targets.reshape(-1))
        return loss, {"lm loss": LOGGED}

    return RETURN
'''
# (a loss_func that uses the captured logits is caught too, but live.check_callback's feedback for it prints a
# cross-entropy of seed-drawn logits, so it differs by seed: not listed here until live.py fixes it)
DETACHED = _FWD.replace("LOGITS", "output_tensor").replace("LOGGED", "loss").replace("RETURN", "logits, loss_func") \
    .replace("return loss, {", "loss = loss.detach()\n        return loss, {")
NOT_DETACHED = _FWD.replace("LOGITS", "output_tensor").replace("LOGGED", "loss").replace("RETURN", "logits, loss_func")
RETURNS_LOSS = _FWD.replace("LOGITS", "output_tensor").replace("LOGGED", "loss.detach()") \
    .replace("RETURN", "loss_func(logits)[0]")

SWAPPED = '''
megatron_function = {**megatron_function, "1f1b": megatron_function["interleaved"],
                     "interleaved": megatron_function["1f1b"]}
'''
ENTRY_POINT = '''
megatron_function = {family: "get_forward_backward_func" for family in ("no-pipelining", "1f1b", "interleaved")}
'''
AS_LIST = '''
megatron_function = ["forward_backward_no_pipelining", "forward_backward_pipelining_without_interleaving",
                     "forward_backward_pipelining_with_interleaving"]
'''

WRONG = [
    Wrong("selection-vpp-truthy", "choose_schedule", VPP_TRUTHY, {SEL}),
    Wrong("selection-ignores-pp1", "choose_schedule", NO_PP1, {SEL}),
    Wrong("selection-megatron-names", "choose_schedule", MEGATRON_NAMES, {SEL}),
    Wrong("differences-one-direction", "differences", ONE_DIRECTION, {DIFF}, replace=True, points={DIFF: 1.0}),
    Wrong("differences-peak-list", "differences", PEAK_LIST, {DIFF}, replace=True, points={DIFF: 1.0}),
    Wrong("differences-percent", "differences", PERCENT, {DIFF}, replace=True, points={DIFF: 1.0}),
    Wrong("callback-loss-detached", "forward_step", DETACHED, {CB}, replace=True),
    Wrong("callback-not-detached", "forward_step", NOT_DETACHED, {CB}, replace=True),
    Wrong("callback-returns-loss", "forward_step", RETURNS_LOSS, {CB}, replace=True),
    Wrong("source-swapped", "megatron_function", SWAPPED, {SRC}, points={SRC: 1.33}),
    Wrong("source-entry-point", "megatron_function", ENTRY_POINT, {SRC}),
    Wrong("source-list", "megatron_function", AS_LIST, {SRC}),
    Wrong("no-p2p-both-directions", "follow_up", "p2p_messages_pp1 = 2 * 8", {NOP2P}),
    Wrong("no-p2p-pp4", "follow_up", "p2p_messages_pp1 = len(simulate(select_schedule(4)(8)).transfers)", {NOP2P}),
    Wrong("no-p2p-str", "follow_up", 'p2p_messages_pp1 = "0"', {NOP2P}),
    Wrong("phases-one-too-many", "follow_up", '''
def phases(pp, microbatches, rank):
    warmup = min(pp - rank, microbatches)
    return warmup, microbatches - warmup, warmup
''', {PHASES}),
    Wrong("phases-uncapped", "follow_up", '''
def phases(pp, microbatches, rank):
    warmup = pp - rank - 1
    return warmup, microbatches - warmup, warmup
''', {PHASES}),
    Wrong("phases-cooldown-is-steady", "follow_up", '''
def phases(pp, microbatches, rank):
    warmup = min(pp - rank - 1, microbatches)
    return warmup, microbatches - warmup, microbatches - warmup
''', {PHASES}),
    # returns_losses calls this loss_rank: its mistake costs the loss_rank point only
    Wrong("loss-rank-table", "follow_up", '''
def loss_rank(pp):
    return {1: 0, 2: 1, 4: 3, 8: 7}[pp]  # the visible cases only
''', {LOSS}),
    Wrong("loss-rank-first", "follow_up", '''
def loss_rank(pp):
    return 0
''', {LOSS}),
    Wrong("loss-rank-one-node", "follow_up", '''
def loss_rank(pp):
    return min(pp, 8) - 1
''', {LOSS}),
    Wrong("returns-losses-rank0", "follow_up", '''
def returns_losses(pp, rank):
    return rank == 0
''', {FLOW}),
    Wrong("returns-losses-list", "follow_up", '''
def returns_losses(pp, rank):
    return [0.0] if rank == pp - 1 else []
''', {FLOW}),
    Wrong("returns-losses-not-first", "follow_up", '''
def returns_losses(pp, rank):
    return rank > 0
''', {FLOW}),
]
REVEALS = {  # the lab text names the 1F1B and interleaved functions; only this one is left to find
    SRC: ["forward_backward_no_pipelining"],
    LOSS: ["rank pp - 1", "pp - 1", re.compile(r"last stage, rank \d")],
    # a rank's warmup, the formula or its value ("so rank r runs pp - r - 1 = 3")
    PHASES: [re.compile(r"pp - r(?:ank)? - 1"), re.compile(r"\bruns? \d+ warmup"), "min(pp - rank - 1, M)"],
    # the family a case selects, named in words after "so Megatron runs"
    SEL: [re.compile(r"Megatron runs the [\w -]+\(")],
}
