"""Simulator: costs in, timeline and metrics out.  Imports no torch."""

from .costs import CostError, Costs, StageCosts, per_virtual_stage
from .simulator import Event, SimResult, Transfer, Wait, simulate

__all__ = ["CostError", "Costs", "Event", "SimResult", "StageCosts", "Transfer", "Wait", "per_virtual_stage",
           "simulate"]
