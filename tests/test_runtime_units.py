"""Runtime pieces that need no process group: model stages, backend choice, message plans, faults."""

import pytest

torch = pytest.importorskip("torch")

from pipeline_kit.runtime.env import choose
from pipeline_kit.runtime.faults import Fault, FaultSpecError
from pipeline_kit.runtime.model import GPT, GPTConfig, build_stage, make_batch, split_layers
from pipeline_kit.runtime.p2p import Message, message_plan
from pipeline_kit.schedules import interleaved, one_f_one_b


def test_stages_hold_only_their_part_and_match_the_reference():
    cfg = GPTConfig(layers=4)
    stages = [build_stage(cfg, s, 4) for s in range(4)]
    assert [s.pre_process for s in stages] == [True, False, False, False]
    assert [s.post_process for s in stages] == [False, False, False, True]
    assert [list(s.layer_ids) for s in stages] == [[0], [1], [2], [3]]
    ref = dict(GPT(cfg).named_parameters())
    assert sum(s.num_params() for s in stages) == sum(p.numel() for p in ref.values())
    for s in stages:
        for name, p in s.named_parameters():
            assert torch.equal(p, ref[name]), name  # same seed per layer: identical parameters


def test_stage_forward_takes_tokens_first_and_activations_elsewhere():
    cfg = GPTConfig(layers=2, seq_len=8)
    first, last = build_stage(cfg, 0, 2), build_stage(cfg, 1, 2)
    tokens, _ = make_batch(cfg, 1, 3, step=0)
    act = first(tokens[0])
    assert act.shape == (3, 8, cfg.hidden)
    assert last(act).shape == (3, 8, cfg.vocab)
    assert torch.allclose(last(act), GPT(cfg)(tokens[0]))


def test_endpoint_stages_are_heavier():
    cfg = GPTConfig(layers=16, vocab=4096, hidden=64)
    params = [build_stage(cfg, s, 8).num_params() for s in range(8)]
    assert params[0] > params[3] and params[7] > params[3]  # embedding / output layer live at the ends


@pytest.mark.parametrize("layers,stages,message", [(3, 4, "cannot split 3 layers over 4 pipeline stages")])
def test_split_layers_errors(layers, stages, message):
    with pytest.raises(ValueError, match=message):
        split_layers(layers, stages)
    assert [len(r) for r in split_layers(10, 4)] == [3, 3, 2, 2]


def test_config_errors():
    with pytest.raises(ValueError, match=r"hidden \(10\) must be divisible by heads \(4\)"):
        GPTConfig(hidden=10, heads=4)


@pytest.mark.parametrize("local,gpus,requested,expect", [
    (4, 0, None, ("gloo", "cpu", "no CUDA device found")),
    (4, 4, None, ("nccl", "cuda", "one GPU per rank")),
    (4, 8, None, ("nccl", "cuda", "one GPU per rank")),
    (4, 1, None, ("gloo", "cuda", "NCCL refuses two ranks on one device")),
    (2, 2, "gloo", ("gloo", "cpu", "as requested")),
])
def test_backend_choice_says_why(local, gpus, requested, expect):
    backend, device, reason = choose(local, gpus, requested)
    assert (backend, device) == expect[:2]
    assert expect[2] in reason


def test_backend_choice_refuses_impossible_requests():
    with pytest.raises(ValueError, match="needs CUDA devices"):
        choose(2, 0, "nccl")
    with pytest.raises(ValueError, match="NCCL refuses two ranks on one device"):
        choose(4, 1, "nccl")


def test_message_plan_1f1b_has_one_direction_per_channel():
    plan = message_plan(one_f_one_b(3, 2))
    assert plan[(0, 1)] == [Message("forward", 0, 0, 1), Message("forward", 1, 0, 1)]
    assert plan[(1, 0)] == [Message("backward", 0, 1, 0), Message("backward", 1, 1, 0)]
    assert set(plan) == {(0, 1), (1, 2), (2, 1), (1, 0)}


def test_message_plan_interleaved_pp2_mixes_directions_between_the_same_two_ranks():
    plan = message_plan(interleaved(2, 2, 2))
    assert {m.direction for m in plan[(0, 1)]} == {"forward", "backward"}
    assert {m.direction for m in plan[(1, 0)]} == {"forward", "backward"}
    # in the sender's op order: rank 0 sends F0c0, F1c0 (to stage 1), F0c1 ... then gradients of chunk 1
    assert [(m.direction, m.microbatch, m.dst_stage) for m in plan[(0, 1)]] == [
        ("forward", 0, 1), ("forward", 1, 1), ("forward", 0, 3), ("forward", 1, 3), ("backward", 0, 1),
        ("backward", 1, 1)]


def test_fault_parsing():
    assert Fault.parse("skip-send:rank=1,mb=3") == Fault("skip-send", 1, 3)
    with pytest.raises(FaultSpecError, match="expected FAULT as skip-send:rank=R,mb=K"):
        Fault.parse("drop:rank=1")
