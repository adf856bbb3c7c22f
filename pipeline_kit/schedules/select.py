"""``select_schedule``: the kit's analogue of Megatron's ``get_forward_backward_func`` (M041).

Megatron hides three very different control flows behind one entry point.  The caller always
passes the same things -- a ``forward_step_func(data_iterator, model)`` that returns
``(output_tensor, loss_func)``, the data iterator(s), the stage-local model chunk(s), the number of
microbatches, the sequence length and microbatch size, and ``forward_only`` -- and gets back a list
of per-microbatch loss dicts.  What differs is *who* computes what:

* ``pp == 1`` -> **no pipelining**: one rank runs ``F m`` then ``B m`` for every microbatch with no
  P2P at all; the loss of every microbatch comes back on that rank.
* ``pp > 1`` and no virtual size -> **1F1B** (non-interleaved): each rank runs warmup / steady /
  cooldown phases of its own length; only the *last* stage holds the output layer, so only it
  returns loss dicts -- every other rank returns an empty list and only moves activations forward
  and gradients backward.
* ``pp > 1`` with ``vpp`` -> **interleaved**: the model is a list of ``vpp`` chunks per rank and the
  data iterator a list too; the loss comes back on the last rank (which holds the last virtual
  stage) and nowhere else.

Here the selection returns a :class:`ScheduleFunction`; calling it with the microbatch count gives
the :class:`~pipeline_kit.schedules.ops.Schedule` (the per-rank op order) that the runtime executes
with the same callback contract.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arguments import Arguments
from .generators import ScheduleConfigError, interleaved, no_pipelining, one_f_one_b
from .ops import Schedule

#: The function ``get_forward_backward_func`` returns for each family (``megatron/core/pipeline_parallel/schedules.py``,
#: Megatron-Core 0.19: ``pp > 1`` with a virtual size -> with interleaving, ``pp > 1`` -> without, else none).
MEGATRON_FUNCTIONS = {
    "no-pipelining": "forward_backward_no_pipelining",
    "1f1b": "forward_backward_pipelining_without_interleaving",
    "interleaved": "forward_backward_pipelining_with_interleaving",
}


@dataclass(frozen=True)
class ScheduleFunction:
    """What :func:`select_schedule` returns: a named, callable schedule family.

    ``loss_ranks`` says where the loss comes back (rank 0 for no pipelining, else the last rank);
    ``uses_p2p`` is False only without pipelining.
    """

    name: str
    pp: int
    chunks: int
    forward_only: bool

    def __post_init__(self) -> None:
        arg = Arguments("ScheduleFunction", ScheduleConfigError)
        arg.text("name", self.name, ("no-pipelining", "1f1b", "interleaved"))
        arg.integer("pp", self.pp, limit="MAX_RANKS")
        arg.integer("chunks", self.chunks, limit="MAX_CHUNKS")
        arg.boolean("forward_only", self.forward_only)

    @property
    def uses_p2p(self) -> bool:
        return self.pp > 1

    @property
    def megatron_function(self) -> str:
        """The name of the function Megatron's ``get_forward_backward_func`` returns for this family."""
        return MEGATRON_FUNCTIONS[self.name]

    @property
    def loss_rank(self) -> int:
        """The one rank whose call returns the per-microbatch losses (the others return ``[]``)."""
        return self.pp - 1

    def __call__(self, microbatches: int, group: int | None = None) -> Schedule:
        Arguments("ScheduleFunction", ScheduleConfigError).integer("group", group, none=True)
        if self.name == "no-pipelining":
            return no_pipelining(microbatches, self.forward_only)
        if self.name == "1f1b":
            return one_f_one_b(self.pp, microbatches, self.forward_only)
        return interleaved(self.pp, microbatches, self.chunks, self.forward_only, group)


def select_schedule(pp: int, vpp: int | None = None, forward_only: bool = False) -> ScheduleFunction:
    """Choose the schedule family from the pipeline size, the virtual size and ``forward_only``.

    Mirrors ``get_forward_backward_func``: ``pp == 1`` -> no pipelining (``vpp`` is ignored, as in
    Megatron), ``pp > 1`` -> interleaved when ``vpp`` is given (and > 1), else 1F1B.
    ``forward_only`` keeps the same family and drops every backward (inference / evaluation).
    """
    arg = Arguments(None, ScheduleConfigError)  # the generators' short words: "pp must be a positive integer"
    arg.integer("pp", pp, limit="MAX_RANKS")
    arg.integer("vpp", vpp, none=True, limit="MAX_CHUNKS")
    arg.boolean("forward_only", forward_only)
    if pp == 1:
        return ScheduleFunction("no-pipelining", 1, 1, forward_only)
    if vpp is not None and vpp > 1:
        return ScheduleFunction("interleaved", pp, vpp, forward_only)
    return ScheduleFunction("1f1b", pp, 1, forward_only)
