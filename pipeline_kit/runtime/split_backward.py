"""A split backward: ``I`` computes only the input gradient, ``W`` only the weight gradients.

Zero-bubble schedules (ZB-H1, interleaved zero bubble, ZB-V, DualPipe-V) cut a stage's backward in
two so the input gradient -- the one the previous stage is waiting for -- leaves first, and the
weight gradients fill a bubble later.  That only pays if ``W`` does the weight work *alone*.
Asking autograd for the parameters' gradients from the stage output again would not: to reach the
first block's weights the engine must push the gradient back through every later block, which is
``I``'s work done a second time.

The graph tells where the two halves part.  Call the *input path* the autograd nodes from which the
stage input's gradient node can be reached (every gradient on the way to the input flows through
them).  A weight hangs off that path at a *frontier node*: a node of the path with an edge leaving it
(``AddmmBackward`` of a linear layer has edges to its input, its bias and ``TBackward`` of its weight;
``NativeLayerNormBackward`` to its input, gamma and beta).  So:

* ``I``: hook each frontier node, run autograd from the output to the input only (the graph is kept),
  and let the hooks keep the gradient each frontier node receives;
* ``W``: for each frontier node, run autograd from that node, with the kept gradient, to its own
  weights only.  The engine skips the node's input-side output, so nothing of ``I`` is redone.

Every weight gradient is computed by the same node from the same incoming gradient as in a single
full backward, so it is bitwise the one a full ``B`` gives.  This is the idea of PyTorch's
``stage_backward_input`` / ``stage_backward_weight`` (``torch/distributed/pipelining/_backward.py``)
and of Megatron's zero-bubble weight-gradient store.  The kept gradients cost memory from ``I`` to
``W`` -- one gradient per linear and norm layer -- on top of the activations the graph keeps anyway.

One case needs care: a weight used at two frontier nodes (a parameter shared inside the stage) is
correct only if both nodes' contributions are added in one call, and then autograd would also flow
from one node into the other.  :func:`frontier` returns None then, and the caller falls back to the
plain walk from the output (exact, but redoing ``I``'s work).  The kit's GPT never shares a weight
on a stage with an input gradient (tied embeddings sit on the first and last stage, as copies).
"""

from __future__ import annotations

import torch
from torch.autograd import Variable
from torch.autograd.graph import GradientEdge, Node, get_gradient_edge


def run_backward(outputs, grads, keep_graph: bool, inputs=(), accumulate: bool = True):
    """Call autograd's engine directly, as Megatron's ``custom_backward`` does.

    ``torch.autograd.backward`` checks that each gradient has its output's shape; after
    :meth:`~pipeline_kit.runtime.compute.ModelCompute.deallocate_output_tensor` the output's data is a
    1-element placeholder while its ``grad_fn`` -- all backward needs -- is intact, so that check must be
    skipped.  ``outputs`` may hold tensors or :class:`GradientEdge` s (a node's input, for ``W``).
    """
    return Variable._execution_engine.run_backward(outputs, grads, keep_graph=keep_graph, create_graph=False,
                                                   inputs=inputs, allow_unreachable=True, accumulate_grad=accumulate)


def frontier(output: torch.Tensor, inp: torch.Tensor, params) -> list[tuple[Node, tuple]] | None:
    """The frontier nodes of ``output``'s graph, each with the weights that hang off it.

    Returns ``[(node, weights), ...]``, or None when the split cannot be exact: ``output`` does not
    depend on ``inp``, or a weight hangs off two frontier nodes.
    """
    root = output.grad_fn
    parents: dict[Node, list[Node]] = {}  # autograd edges, reversed
    stack, seen = [root], {root}
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is None:
                continue
            parents.setdefault(child, []).append(node)
            if child not in seen:
                seen.add(child)
                stack.append(child)

    input_node = get_gradient_edge(inp).node
    on_path, stack = {input_node}, [input_node]  # the input path: every node the input can be reached from
    while stack:
        for parent in parents.get(stack.pop(), ()):
            if parent not in on_path:
                on_path.add(parent)
                stack.append(parent)
    if root not in on_path:
        return None

    weight_of = {get_gradient_edge(p).node: p for p in params}
    found, owner = [], {}
    for node in on_path:
        side = [child for child, _ in node.next_functions if child is not None and child not in on_path]
        weights = []
        while side:  # everything off the path leads to weights only (TBackward -> AccumulateGrad, ...)
            child = side.pop()
            if child in weight_of:
                weights.append(weight_of[child])
            side.extend(c for c, _ in child.next_functions if c is not None)
        for w in weights:
            if owner.setdefault(w, node) is not node:
                return None  # a shared weight: see the module docstring
        if weights:
            found.append((node, tuple(weights)))
    return found


class SplitBackward:
    """One microbatch's split backward on one stage: :meth:`input_grad` is ``I``, :meth:`weight_grad` is ``W``.

    ``inp`` is None on the first stage (token ids have no gradient): there ``I`` has nothing to do
    and ``W`` is the whole backward.
    """

    def __init__(self, output: torch.Tensor, inp: torch.Tensor | None, params):
        self.output, self.inp, self.params = output, inp, tuple(params)
        self.nodes = None if inp is None else frontier(output, inp, self.params)
        self.kept: dict[Node, tuple] = {}  # frontier node -> the gradients it received during I
        self.grad = None  # the output gradient, kept only when W must start from the output

    def input_grad(self, grad: torch.Tensor) -> torch.Tensor | None:
        """``I``: the gradient of the input (None on the first stage); keeps the graph and what ``W`` needs."""
        if self.nodes is None:
            self.grad = grad
            if self.inp is None:
                return None

        def keep(node):
            def hook(grads):
                self.kept[node] = grads
            return hook

        handles = [node.register_prehook(keep(node)) for node, _ in self.nodes or ()]
        try:
            return run_backward((self.output,), (grad,), keep_graph=True, inputs=(self.inp,), accumulate=False)[0]
        finally:
            for h in handles:
                h.remove()

    def weight_grad(self) -> None:
        """``W``: accumulate the weight gradients into ``.grad``; the graph is freed as it goes."""
        if self.nodes is None:  # the whole walk from the output: exact, and on the first stage nothing is redone
            run_backward((self.output,), (self.grad,), keep_graph=False, inputs=self.params)
            return
        for node, weights in self.nodes:
            grads = self.kept.pop(node)
            edges = tuple(GradientEdge(node, i) for i, g in enumerate(grads) if g is not None)
            run_backward(edges, tuple(g for g in grads if g is not None), keep_graph=False, inputs=weights)
