"""Cross-check: our 1F1B and interleaved orders equal the ones torch.distributed.pipelining builds.

PyTorch's ScheduleInterleaved1F1B stores its per-rank plan in ``pipeline_order``; we build it for
each rank without a process group (only the order calculation runs) and compare op for op.
(Schedule1F1B's stored ``pipeline_order`` is not compared: in torch 2.13 it is wrong on the last
rank, while the order its runtime executes is Megatron's, which test_generators pins down.)
"""

import pytest

torch = pytest.importorskip("torch")
schedules = pytest.importorskip("torch.distributed.pipelining.schedules")

from pipeline_kit.schedules import interleaved


def torch_interleaved_order(pp, m, v, rank):
    obj = schedules.ScheduleInterleaved1F1B.__new__(schedules.ScheduleInterleaved1F1B)
    obj.pp_group_size = pp
    obj.n_local_stages = v
    obj.rank = rank
    obj._n_microbatches = m
    obj.number_of_rounds = max(1, m // pp)
    obj.microbatches_per_round = m // obj.number_of_rounds
    out = []
    for action in obj._calculate_single_rank_operations(rank):
        if action is None:
            continue
        kind = {"F": "F", "B": "B"}[action.computation_type.value]  # FORWARD / FULL_BACKWARD
        out.append((kind, action.microbatch_index, action.stage_index // pp))
    return out


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 16, 2), (8, 16, 2), (3, 9, 3)])
def test_interleaved_matches_torch(pp, m, v):
    ours = interleaved(pp, m, v)
    for r in range(pp):
        assert [(op.kind, op.microbatch, op.chunk) for op in ours.ranks[r]] == torch_interleaved_order(pp, m, v, r)
