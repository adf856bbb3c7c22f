"""Lab 1 (M041): typical wrong answers lose exactly their rubric points, with feedback that says why."""

import pytest
import torch.nn.functional as F
from lab_grading import assert_partial, grade_answers

from pipeline_kit.course.labs import lab01
from pipeline_kit.course.labs.common import LabCheckFailed

LAB = "lab01_schedule_selection"


@pytest.mark.slow
def test_typical_wrong_answers(tmp_path):
    """One notebook, every independent wrong answer at once; the numpy and dotted-name answers are right."""
    answers = {
        "choose_schedule": '''def choose_schedule(pp, vpp=None):
    if pp == 1:
        return "no-pipelining"
    return "interleaved" if vpp else "1f1b"
''',
        "differences": '''import numpy as np
differences = {}
for name, pp, vpp in (("no-pipelining", 1, None), ("1f1b", 4, None), ("interleaved", 4, 2)):
    result = simulate(select_schedule(pp, vpp)(8), fwd=1, bwd=2)
    differences[name] = {"p2p_messages": np.int64(len(result.transfers)),
                         "peak_rank0": np.array(result.peak_activations)[0],
                         "bubble": np.round(np.float64(result.bubble_fraction), 3)}
''',
        "forward_step": '''import torch.nn.functional as F

def forward_step(data_iterator, model):
    tokens, targets = next(data_iterator)
    logits = model(tokens)

    def loss_func(output_tensor):  # uses the logits it captured, not its argument
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return loss, {"lm loss": loss.detach()}

    return logits, loss_func
''',
        "megatron_function": '''megatron_function = {}
for family, name in (("no-pipelining", "forward_backward_no_pipelining"),
                     ("1f1b", "forward_backward_pipelining_without_interleaving"),
                     ("interleaved", "forward_backward_pipelining_with_interleaving")):
    megatron_function[family] = "megatron.core.pipeline_parallel.schedules." + name
''',
        "follow_up": '''p2p_messages_pp1 = 0
def phases(pp, microbatches, rank):
    warmup = min(pp - rank, microbatches)
    return warmup, microbatches - warmup, warmup
def loss_rank(pp):
    return {1: 0, 2: 1, 4: 3, 8: 7}[pp]  # the visible cases only
def returns_losses(pp, rank):
    return rank == pp - 1
''',
    }
    report = grade_answers(tmp_path, LAB, answers)
    assert_partial(report, {"m041_main_selection": "a virtual size of 1 is one chunk per rank",
                            "m041_main_callback": "use its argument, not a tensor captured from forward_step",
                            "m041_follow_phases": "warmup 4 is one too many",
                            "m041_follow_loss_rank": "raised KeyError"})


def forward_step_with(loss_of, logged=lambda loss: loss.detach(), returns_loss=False):
    def forward_step(data_iterator, model):
        tokens, targets = next(data_iterator)
        logits = model(tokens)

        def loss_func(output_tensor):
            loss = F.cross_entropy(loss_of(output_tensor, logits).reshape(-1, logits.shape[-1]), targets.reshape(-1))
            return loss, {"lm loss": logged(loss)}

        return (loss_func(logits)[0] if returns_loss else logits), loss_func
    return forward_step


def test_callback_contract():
    lab01.check_callback(forward_step_with(lambda out, logits: out))
    with pytest.raises(LabCheckFailed, match="use its argument"):
        lab01.check_callback(forward_step_with(lambda out, logits: logits))
    with pytest.raises(LabCheckFailed, match="still carries the graph"):
        lab01.check_callback(forward_step_with(lambda out, logits: out, logged=lambda loss: loss))
    with pytest.raises(LabCheckFailed, match=r"must return \(output_tensor, loss_func\)"):
        def returns_loss(data_iterator, model):
            tokens, targets = next(data_iterator)
            logits = model(tokens)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        lab01.check_callback(returns_loss)
    with pytest.raises(LabCheckFailed, match="not the mean cross-entropy of the output it is given"):
        lab01.check_callback(forward_step_with(lambda out, logits: 2 * out))


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


def test_equivalent_answers_and_names():
    """A number may come as numpy or Fraction, a function name with its module; a list must be a dict."""
    import numpy as np
    want = lab01.expected_differences()
    lab01.check_differences({k: {kk: np.float64(v) for kk, v in row.items()} for k, row in want.items()})
    lab01.check_returns_losses(lambda pp, rank: np.bool_(rank == pp - 1), [2, 4])
    with pytest.raises(LabCheckFailed, match="a dict keyed by family"):
        lab01.check_megatron_names(["forward_backward_no_pipelining"])
    with pytest.raises(LabCheckFailed, match="look for the function"):
        lab01.check_megatron_names({"no-pipelining": "forward_backward_no_pipelining",
                                    "1f1b": "schedules.forward_backward_pipelining_with_interleaving",
                                    "interleaved": "forward_backward_pipelining_with_interleaving"})


def test_a_str_that_equals_everything_is_refused():
    class Always(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    with pytest.raises(LabCheckFailed, match="choose_schedule"):
        lab01.check_selection(lambda pp, vpp=None: Always("1f1b"), [(1, None)])


def test_the_check_modules_import_neither_torch_nor_matplotlib():
    """The grader imports every lab's checks; torch and matplotlib load only inside the checks that need them."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from pipeline_kit.course.labs import lab01, lab02, lab03, lab04, lab05, lab06, lab07, lab08, lab09\n"
            "from pipeline_kit.course.labs import lab10\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'matplotlib'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
