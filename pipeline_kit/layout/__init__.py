"""Layouts and imbalance: Megatron layout strings, per-stage costs, the balancer.  Imports no torch."""

from .balance import Balance, ItemTimes, Plan, balance, best_cuts, even_split, item_times_from_flops, plan_for
from .costs import PRESETS, ModelSpec, StageCost, boundary_bytes, load_model_spec, p2p_volume, stage_costs
from .measure import item_times_from_trace, load_trace, predict_from_trace, service_times
from .megatron import MegatronLayout, megatron_layout
from .spec import Layout, LayoutError, StageSpec, even_layout, parse_layout, uneven_layout
from .speedup import Factor, decompose_speedup

__all__ = [
    "PRESETS", "Balance", "Factor", "ItemTimes", "Layout", "LayoutError", "MegatronLayout", "ModelSpec", "Plan",
    "StageCost",
    "StageSpec", "balance", "best_cuts", "boundary_bytes", "decompose_speedup", "even_layout", "even_split",
    "item_times_from_flops", "item_times_from_trace", "load_model_spec", "load_trace", "megatron_layout",
    "p2p_volume", "parse_layout",
    "plan_for",
    "predict_from_trace", "service_times", "stage_costs", "uneven_layout",
]
