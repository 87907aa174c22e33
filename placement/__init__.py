"""Placement policy: pure functions and data, no I/O, no gRPC, no torch.

The daemon and the trace simulator (``tiermem.placement.sim``) run the same
code. Tiers and kinds are plain ints here (the values of ``tiermem.v1`` enums)
so this package imports nothing from the server.

* :mod:`.access` — decayed access-rate estimates blended with hints and deadlines
* :mod:`.cost` — access, move and money cost per tier and kind
* :mod:`.planner` — admission, promotion, room-making and rebalancing plans
"""

from tiermem.placement.access import AccessModel
from tiermem.placement.cost import CostModel, CostReport, KindCost, TierCost, cost_report
from tiermem.placement.model import TierState
from tiermem.placement.planner import Admission, Objects, Plan, Planner, PlannerConfig, Victims

__all__ = [
    "AccessModel",
    "Admission",
    "CostModel",
    "CostReport",
    "KindCost",
    "Objects",
    "Plan",
    "Planner",
    "PlannerConfig",
    "TierCost",
    "TierState",
    "Victims",
    "cost_report",
]
