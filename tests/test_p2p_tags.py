"""What the runtime's P2P layer hands torch on each backend, without a GPU: on gloo every transfer carries its
sequence number as tag (a skipped message is then waited for as itself: test_runtime_torchrun's fault runs), on
NCCL none does -- torch documents that ``tag`` is not supported with NCCL, and Megatron passes none: the order of a
channel pairs its messages there.

A two-rank world lives in this one process through torch's fake backend (groups form, nothing is sent); the
backend the P2P layer asks for is set to the one under test, and ``isend`` / ``irecv`` are recorded, each
returning a finished transfer.  What is checked is the keyword arguments of every call the layer makes: the
payloads, the shape messages of ``--send-shapes`` and the latency probe."""

import pytest
import torch
import torch.distributed as dist

from pipeline_kit.runtime.p2p import P2P, measure_latency, message_plan
from pipeline_kit.schedules import build_schedule

SHAPE = (1, 4, 8)


@pytest.fixture
def two_rank_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield
    dist.destroy_process_group()


class _Finished:
    """A transfer that has completed, as the P2P layer waits on it (polled on NCCL, waited on on gloo)."""

    def is_completed(self) -> bool:
        return True

    def wait(self, timeout=None) -> bool:
        return True


def posts_on(backend: str, monkeypatch, send_shapes: bool) -> list[tuple[str, int, dict]]:
    """Every ``(call, peer, keyword arguments)`` rank 0 of 1F1B (pp 2, M 3) posts in one step and a latency probe."""
    calls = []

    def recorder(name):
        def post(tensor, peer, group=None, **kwargs):
            calls.append((name, peer, kwargs))
            return _Finished()
        return post

    monkeypatch.setattr(dist, "isend", recorder("isend"))
    monkeypatch.setattr(dist, "irecv", recorder("irecv"))
    schedule = build_schedule("1f1b", 2, 3)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    p2p = P2P(schedule, 0, torch.device("cpu"), SHAPE, send_shapes=send_shapes)
    plan = message_plan(schedule)
    for msg in plan[(0, 1)]:
        p2p.send(torch.zeros(SHAPE), msg)
    for msg in plan[(1, 0)]:
        p2p.recv(msg)
    p2p.finish_step()
    measure_latency(p2p, rounds=1)
    return calls


@pytest.mark.parametrize("send_shapes", [False, True])
def test_nccl_transfers_carry_no_tag(two_rank_world, monkeypatch, send_shapes):
    calls = posts_on("nccl", monkeypatch, send_shapes)
    per_message = 2 if send_shapes else 1  # a shape message goes first with --send-shapes
    assert len(calls) == 2 * 3 * per_message + 2 * 3  # 3 sends + 3 receives, then 3 probe rounds of 2
    assert [kwargs for _, _, kwargs in calls if "tag" in kwargs] == []


@pytest.mark.parametrize("send_shapes", [False, True])
def test_gloo_transfers_carry_their_sequence_number(two_rank_world, monkeypatch, send_shapes):
    calls = posts_on("gloo", monkeypatch, send_shapes)
    tags = [(name, kwargs["tag"]) for name, _, kwargs in calls]
    if send_shapes:  # message k: its shape message as tag 2k, its tensor as 2k + 1
        step = [("isend", t) for t in range(6)] + [("irecv", t) for t in range(6)]
    else:
        step = [("isend", t) for t in range(3)] + [("irecv", t) for t in range(3)]
    probe = [(name, 1_000_000 + i) for i in range(3) for name in ("isend", "irecv")]
    assert tags == step + probe
