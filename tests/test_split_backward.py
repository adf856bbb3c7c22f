"""The split backward (I then W) against one full backward, in one process: same gradients, no work redone."""

import pytest

torch = pytest.importorskip("torch")

from pipeline_kit.runtime.compute import ModelCompute  # noqa: E402
from pipeline_kit.runtime.model import GPTConfig, build_stage, make_batch  # noqa: E402
from pipeline_kit.runtime.split_backward import SplitBackward, frontier, run_backward  # noqa: E402

CFG = GPTConfig(layers=4, hidden=32, heads=2, seq_len=16, vocab=64)


def stage_grads(stage, inputs, grads, split: bool):
    """Run each microbatch through ``stage``; backward as B, or as all the I's then all the W's in order."""
    stage.zero_grad(set_to_none=True)
    compute = ModelCompute({0: stage}, len(inputs))
    compute.new_step(make_batch(CFG, len(inputs), 2, step=1)[1])
    dxs = []
    for mb, (x, dy) in enumerate(zip(inputs, grads)):
        compute.forward(0, mb, x.clone())
        if split:
            dxs.append(compute.backward(0, mb, dy, weights=False))
    for mb, dy in enumerate(grads):
        if split:
            compute.weight_grad(0, mb)
        else:
            dxs.append(compute.backward(0, mb, dy, weights=True))
    return dxs, {name: p.grad.clone() for name, p in stage.named_parameters()}


@pytest.mark.parametrize("stage_index", [0, 1, 3])
def test_split_backward_is_bitwise_a_full_backward(stage_index):
    stage = build_stage(CFG, stage_index, 4)
    gen = torch.Generator().manual_seed(stage_index)
    if stage_index == 0:
        inputs = make_batch(CFG, 3, 2, step=0)[0]
    else:
        inputs = [torch.randn(2, CFG.seq_len, CFG.hidden, generator=gen) for _ in range(3)]
    grads = [None if stage.post_process else torch.randn(2, CFG.seq_len, CFG.hidden, generator=gen) for _ in range(3)]
    dx_full, full = stage_grads(stage, inputs, grads, split=False)
    dx_split, split = stage_grads(stage, inputs, grads, split=True)
    assert full.keys() == split.keys()
    for name in full:
        assert torch.equal(full[name], split[name]), name
    for a, b in zip(dx_full, dx_split):
        assert (a is None and b is None) or torch.equal(a, b)


def test_w_runs_no_node_of_the_input_path_but_the_frontier():
    stage = build_stage(CFG, 1, 4)
    x = torch.randn(2, CFG.seq_len, CFG.hidden).requires_grad_()
    y = stage(x)
    split = SplitBackward(y, x, list(stage.parameters()))
    assert split.nodes is not None and len(split.nodes) == 6  # per block: ln1, qkv, proj, ln2, fc, out
    assert {n.name() for n, _ in split.nodes} == {"AddmmBackward0", "NativeLayerNormBackward0"}
    assert sorted(id(p) for _, ws in split.nodes for p in ws) == sorted(id(p) for p in stage.parameters())
    split.input_grad(torch.randn_like(y))
    frontier_nodes = {n for n, _ in split.nodes}
    ran = []
    stack, seen = [y.grad_fn], set()
    while stack:  # hook every node of the graph that is not a frontier node nor a weight's side node
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in frontier_nodes and node.name() not in ("TBackward0", "torch::autograd::AccumulateGrad"):
            node.register_prehook(lambda grads, node=node: ran.append(node.name()))
        stack.extend(c for c, _ in node.next_functions if c is not None)
    split.weight_grad()
    assert ran == []
    assert all(p.grad is not None for p in stage.parameters())


def test_a_weight_shared_by_two_frontier_nodes_falls_back_to_the_whole_walk():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(3, 4).requires_grad_()
    y = lin(torch.tanh(lin(x)))
    assert frontier(y, x, list(lin.parameters())) is None
    run_backward((y,), (torch.ones_like(y),), keep_graph=False)
    want = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad(set_to_none=True)
    x2 = x.detach().clone().requires_grad_()
    y2 = lin(torch.tanh(lin(x2)))
    split = SplitBackward(y2, x2, list(lin.parameters()))
    assert split.nodes is None
    dx = split.input_grad(torch.ones_like(y2))
    split.weight_grad()
    assert torch.equal(dx, x.grad)
    assert all(torch.equal(p.grad, w) for p, w in zip(lin.parameters(), want))
