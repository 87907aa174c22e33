"""Trace simulator: mixed workloads of the four kinds, run against tiermem's
planner and baseline policies on the same trace and the same cost model.

* :mod:`.trace` — the workload generator and the standard mixes
* :mod:`.engine` — replays a trace against a policy and accounts costs
* :mod:`.policies` — tiermem (the daemon's planner), siloed static partitions,
  one global LRU, and an offline oracle with future knowledge
"""

from tiermem.placement.sim.engine import Engine, SimConfig, SimResult, run
from tiermem.placement.sim.policies import (
    GlobalLru,
    OracleKnapsack,
    SiloedLru,
    Tiermem,
    silo_shares,
)
from tiermem.placement.sim.trace import MIXES, MixParams, Trace, generate

__all__ = [
    "MIXES",
    "Engine",
    "GlobalLru",
    "MixParams",
    "OracleKnapsack",
    "SiloedLru",
    "SimConfig",
    "SimResult",
    "Tiermem",
    "Trace",
    "generate",
    "run",
    "silo_shares",
]
