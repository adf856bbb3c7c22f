"""Cross-check: our orders are what torch.distributed.pipelining's runtime executes; we refuse what it refuses.

For the multi-stage schedules the order a rank executes is the compute actions of ``pipeline_order_with_comms``,
the list ``_PipelineScheduleRuntime._step_microbatches`` walks (DualPipe-V's overlapped F+B pairs run their
sub-actions in order).  We build each PyTorch schedule with stand-in stages -- no process group, no model: its
constructor only needs each stage's index, the group size and rank -- so its own checks and lowering run for
real.  (Schedule1F1B is not compared here: its stored ``pipeline_order`` is wrong on the last rank in torch 2.13,
while the order its runtime executes is Megatron's, which test_generators pins down.)
"""

import logging
import types

import pytest

torch = pytest.importorskip("torch")
schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
from torch.distributed.pipelining._utils import generate_rank_to_stage_mapping  # noqa: E402

from pipeline_kit.schedules import ScheduleConfigError, build_schedule  # noqa: E402

TORCH_CLASS = {
    "interleaved": schedules.ScheduleInterleaved1F1B,
    "looped-bfs": schedules.ScheduleLoopedBFS,
    "interleaved-zb": schedules.ScheduleInterleavedZeroBubble,
    "zbv": schedules.ScheduleZBVZeroBubble,
    "dualpipev": schedules.ScheduleDualPipeV,
}
V_STYLE = (schedules.ScheduleZBVZeroBubble, schedules.ScheduleDualPipeV)


def torch_executed_orders(cls, pp, m, v):
    """``{rank: [(kind, microbatch, stage), ...]}`` as torch's runtime executes them; raises what torch raises."""
    style = "v" if cls in V_STYLE else "loop"
    stages = [types.SimpleNamespace(group_size=pp, group_rank=0, num_stages=pp * v, stage_index=s, submod=None)
              for s in generate_rank_to_stage_mapping(pp, pp * v, style=style)[0]]
    logging.disable(logging.WARNING)  # torch logs the whole schedule when it refuses one
    try:
        obj = cls(stages, m, loss_fn=lambda out, target: out)
    finally:
        logging.disable(logging.NOTSET)
    orders = {}
    for rank, actions in obj.pipeline_order_with_comms.items():
        ops = []
        for action in actions:
            for a in action.sub_actions or (action,):
                if a.computation_type.value in ("F", "B", "I", "W"):
                    ops.append((a.computation_type.value, a.microbatch_index, a.stage_index))
        orders[rank] = ops
    return orders


def ours_as_torch(sched):
    return {r: [(op.kind, op.microbatch, sched.stage_of(r, op.chunk)) for op in ops]
            for r, ops in enumerate(sched.ranks)}


CASES = [(pp, m, v) for pp in (1, 2, 3, 4) for m in range(1, 11) for v in (1, 2, 3)] + [
    (pp, m, 2) for pp, m in ((5, 10), (5, 12), (6, 12), (6, 13), (8, 16), (8, 24))]


@pytest.mark.parametrize("name", ["looped-bfs", "interleaved-zb", "zbv", "dualpipev"])
def test_orders_and_refusals_match_torch(name):
    """Every (pp, M, v) in CASES: torch accepts iff we do, with its reason in ours, and the orders are equal."""
    compared = refused = 0
    for pp, m, v in CASES:
        try:
            theirs = torch_executed_orders(TORCH_CLASS[name], pp, m, v)
        except ValueError as exc:
            with pytest.raises(ScheduleConfigError) as ours:
                build_schedule(name, pp, m, v)
            assert str(exc) in str(ours.value), (pp, m, v)
            assert "\n" not in str(ours.value)
            refused += 1
            continue
        assert ours_as_torch(build_schedule(name, pp, m, v)) == theirs, (name, pp, m, v)
        compared += 1
    assert compared >= 20 and (refused > 0) == (name != "looped-bfs")


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 16, 2), (8, 16, 2), (3, 9, 3)])
def test_interleaved_matches_torch(pp, m, v):
    """Megatron's interleaved order is what ScheduleInterleaved1F1B executes when M is a multiple of pp."""
    assert ours_as_torch(build_schedule("interleaved", pp, m, v)) == torch_executed_orders(
        schedules.ScheduleInterleaved1F1B, pp, m, v)


def test_v_schedules_put_stage_r_and_2pp_minus_1_minus_r_on_rank_r():
    for name in ("zbv", "dualpipev"):
        sched = build_schedule(name, 4, 8)
        assert [sched.stages_of(r) for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]
        assert sched.to_dict()["placement"] == "v"
        assert generate_rank_to_stage_mapping(4, 8, style="v") == {r: sched.stages_of(r) for r in range(4)}
