"""The small interface every in-memory tier engine implements.

An engine stores opaque byte values at engine-chosen locations (an ``int``).
A put is two-phase so bytes arrive straight in their final place:
``reserve(n)`` gives a writable buffer, the caller fills it, then ``commit``
makes it readable (or ``abort`` returns the space). Reads return a view that
stays valid until the location is freed; callers hold a read lease (see
``services.leases``) so nothing they read is freed under them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tiermem.server.model import Tier


@dataclass(slots=True)
class Reservation:
    """Space reserved in an engine. ``buffer`` is writable and exactly ``size`` bytes."""

    tier: Tier
    location: int
    size: int
    buffer: memoryview
    #: placement asks admission again, once the object is committed, whether to
    #: keep it: the space was not admission's own first choice (it would DROP
    #: the object, or the caller chose the tier). False only for reservations
    #: ``PlacementService.reserve`` / ``reserve_many`` made where admission put it.
    recheck: bool = True


class TierEngine(Protocol):
    """What every engine reports (HBM, DRAM, SSD)."""

    tier: Tier
    capacity_bytes: int

    @property
    def used_bytes(self) -> int: ...

    @property
    def device(self) -> str: ...

    def close(self) -> None: ...


class MemoryTierEngine(Protocol):
    """HBM and DRAM engines."""

    tier: Tier
    capacity_bytes: int

    @property
    def used_bytes(self) -> int: ...

    @property
    def device(self) -> str: ...

    def cost_of(self, size: int) -> int:
        """Bytes of budget a value of ``size`` bytes takes (allocator rounding included)."""
        ...

    def reserve(self, size: int) -> Reservation | None:
        """Space for ``size`` bytes, or None when the tier cannot fit it now."""
        ...

    def commit(self, reservation: Reservation) -> int:
        """Make the reserved bytes readable; returns their location."""
        ...

    def abort(self, reservation: Reservation) -> None: ...

    def read(self, location: int, size: int) -> memoryview:
        """A read-only view of the value (valid until the location is freed)."""
        ...

    def free(self, location: int, size: int) -> None: ...

    def close(self) -> None: ...
