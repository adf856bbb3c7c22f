"""Plan a pipeline (issue 26): which schedule, pp, v, M and layout for a model on N GPUs, and why.  No torch."""

from .memory import (OPTIMIZERS, RankMemory, bytes_per_param, optimizer_bytes_per_param, rank_memory, stage_activations,
                     w_input_bytes, wgrad_kept_bytes)
from .search import GB, Candidate, Hardware, PlanError, Search, allreduce_seconds, describe_search, plan

__all__ = [
    "GB", "OPTIMIZERS", "Candidate", "Hardware", "PlanError", "RankMemory", "Search", "allreduce_seconds",
    "bytes_per_param", "describe_search", "optimizer_bytes_per_param", "plan", "rank_memory", "stage_activations",
    "w_input_bytes", "wgrad_kept_bytes",
]
