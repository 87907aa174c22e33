"""Placement policy: pure functions and data, no I/O, no gRPC, no torch.

The daemon and the trace simulator run the same code. Tiers and kinds are plain
ints here (the values of ``tiermem.v1`` enums) so this package imports nothing
from the server.
"""

from tiermem.placement.admission import TierState, admission_order
from tiermem.placement.lru import lru_victims

__all__ = ["TierState", "admission_order", "lru_victims"]
