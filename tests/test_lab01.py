"""Lab 1 (M041): typical wrong answers lose exactly their rubric points, with feedback that says why."""

import pytest
from lab_grading import assert_partial, grade_answers

from pipeline_kit.grading.labs import lab01
from pipeline_kit.grading.labs.common import LabCheckFailed

LAB = "lab01_schedule_selection"


def test_interleaving_with_one_chunk(tmp_path):
    wrong = '''def choose_schedule(pp, vpp=None):
    if pp == 1:
        return "no-pipelining"
    return "interleaved" if vpp else "1f1b"
'''
    report = grade_answers(tmp_path, LAB, {"choose_schedule": wrong})
    assert_partial(report, {"m041_main_selection": "a virtual size of 1 is one chunk per rank"})


def test_warmup_off_by_one(tmp_path):
    wrong = '''p2p_messages_pp1 = 0
def phases(pp, microbatches, rank):
    warmup = min(pp - rank, microbatches)
    return warmup, microbatches - warmup, warmup
def loss_rank(pp):
    return pp - 1
def returns_losses(pp, rank):
    return rank == pp - 1
'''
    report = grade_answers(tmp_path, LAB, {"follow_up": wrong})
    assert_partial(report, {"m041_follow_phases": "warmup 4 is one too many"})


def test_forward_step_returns_the_loss(tmp_path):
    wrong = '''import torch.nn.functional as F
def forward_step(data_iterator, model):
    tokens, targets = next(data_iterator)
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
'''
    report = grade_answers(tmp_path, LAB, {"forward_step": wrong})
    assert_partial(report, {"m041_main_callback": "must return (output_tensor, loss_func)"})


def test_check_functions_directly():
    lab01.check_selection(lambda pp, vpp=None: "no-pipelining" if pp == 1 else "interleaved" if vpp and vpp > 1
                          else "1f1b", [(1, 4), (2, 1), (4, 2)])
    with pytest.raises(LabCheckFailed, match="Megatron ignores the virtual size"):
        lab01.check_selection(lambda pp, vpp=None: "interleaved" if vpp else "1f1b", [(1, 4)])
    with pytest.raises(LabCheckFailed, match="is more than the 2 microbatches"):
        lab01.check_phases(lambda pp, m, r: (pp - r - 1, m - (pp - r - 1), pp - r - 1), [(4, 2)])
    with pytest.raises(LabCheckFailed, match="count both directions"):
        want = lab01.expected_differences()
        want["1f1b"] = {**want["1f1b"], "p2p_messages": want["1f1b"]["p2p_messages"] // 2}
        lab01.check_differences(want)
