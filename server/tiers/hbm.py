"""HBM tier: one preallocated uint8 tensor on a torch device, carved into extents
and (for KV blocks) a pool of fixed-size slots.

This is the only module (with its helpers under ``server/tiers/``) that touches
``torch.cuda``. On a host without CUDA the tier is emulated on the CPU device
with its own byte budget, so every policy runs in tests; GPU tests are marked
``gpu`` and run where a device exists.

KV block pool: with ``kv_block_bytes`` > 0, ``kv_pool_fraction`` of the capacity
is a ``BlockPool`` of slots of that size. A value larger than half a slot and
at most a slot takes one slot (KV chunks of the configured model, and most
final partial chunks); anything else, or anything once the slots run out, uses
the extent allocator.

Staging: when the device is CUDA, uploads land in pinned host buffers first
(so the host-to-device copy runs at full PCIe speed), then one copy moves them
into the pool on commit. ``staging_buffers`` slot-sized pinned buffers are kept
and reused; larger or surplus uploads get a fresh pinned buffer (torch's
caching host allocator recycles those).
"""

from __future__ import annotations

import threading
from typing import Any

from tiermem.server.model import Tier
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.blockpool import BlockPool
from tiermem.server.tiers.extents import ExtentAllocator


def resolve_device(spec: str) -> str:
    """Map the config value ("auto", "cpu", "cuda:N") to a concrete torch device."""
    import torch

    if spec == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"tiers.hbm.device={spec!r} but CUDA is not available on this host")
    return spec


class PinnedStaging:
    """Reusable pinned host buffers of one size (CUDA hosts only)."""

    def __init__(self, torch: Any, buffer_bytes: int, count: int) -> None:
        self._torch = torch
        self.buffer_bytes = buffer_bytes
        self._lock = threading.Lock()
        self._idle: list[Any] = [
            torch.empty(buffer_bytes, dtype=torch.uint8, pin_memory=True) for _ in range(count)
        ]

    def take(self, size: int) -> Any:
        """A pinned uint8 tensor of exactly ``size`` bytes (a pooled one if it fits)."""
        if size <= self.buffer_bytes:
            with self._lock:
                if self._idle:
                    return self._idle.pop()[:size]
        return self._torch.empty(size, dtype=self._torch.uint8, pin_memory=True)

    def give_back(self, buffer: Any) -> None:
        base = buffer._base if buffer._base is not None else buffer
        if base.numel() == self.buffer_bytes and self.buffer_bytes:
            with self._lock:
                self._idle.append(base)

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


class HbmEngine:
    tier = Tier.HBM

    def __init__(
        self,
        capacity_bytes: int,
        device: str = "auto",
        granule: int = 4096,
        *,
        kv_block_bytes: int = 0,
        kv_pool_fraction: float = 0.75,
        staging_buffers: int = 4,
    ) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(resolve_device(device))
        self.emulated = self._device.type == "cpu"
        self.kv_block_bytes = kv_block_bytes
        slot = -(-kv_block_bytes // granule) * granule if kv_block_bytes > 0 else 0
        slots = int(capacity_bytes * kv_pool_fraction) // slot if slot else 0
        extent_bytes = (capacity_bytes - slots * slot) // granule * granule
        self._alloc = ExtentAllocator(extent_bytes, granule=granule)
        self.pool = BlockPool(self._alloc.capacity_bytes, slot or granule, slots)
        self.capacity_bytes = self._alloc.capacity_bytes + self.pool.capacity_bytes
        self._pool = torch.empty(self.capacity_bytes, dtype=torch.uint8, device=self._device)
        self._lock = threading.Lock()
        self._staging: dict[int, Any] = {}
        self.pinned: PinnedStaging | None = None
        if not self.emulated:
            self.pinned = PinnedStaging(torch, slot, staging_buffers if slot else 0)

    @property
    def device(self) -> str:
        return f"{self._device} (emulated HBM)" if self.emulated else str(self._device)

    @property
    def used_bytes(self) -> int:
        return self._alloc.allocated_bytes + self.pool.allocated_bytes

    def _slot_sized(self, size: int) -> bool:
        return self.pool.slots > 0 and self.kv_block_bytes // 2 < size <= self.kv_block_bytes

    def cost_of(self, size: int) -> int:
        if self._slot_sized(size):
            return self.pool.slot_bytes
        return self._alloc.rounded(size)

    def _allocate(self, size: int) -> int | None:
        with self._lock:
            if self._slot_sized(size):
                offset = self.pool.allocate()
                if offset is not None:
                    return offset
            return self._alloc.allocate(size)

    def reserve(self, size: int) -> Reservation | None:
        offset = self._allocate(size)
        if offset is None:
            return None
        if self.emulated:
            # The pool lives in host memory: write straight into it.
            view = self._pool[offset : offset + size].numpy().data
            return Reservation(self.tier, offset, size, view)
        staging = self._host_buffer(size)
        with self._lock:
            self._staging[offset] = staging
        return Reservation(self.tier, offset, size, staging.numpy().data)

    def _host_buffer(self, size: int) -> Any:
        if self.pinned is not None:
            return self.pinned.take(size)
        return self._torch.empty(size, dtype=self._torch.uint8, pin_memory=not self.emulated)

    def commit(self, reservation: Reservation) -> int:
        offset, size = reservation.location, reservation.size
        if not self.emulated:
            with self._lock:
                staging = self._staging.pop(offset)
            self._pool[offset : offset + size].copy_(staging, non_blocking=False)
            if self.pinned is not None:
                self.pinned.give_back(staging)
        return offset

    def abort(self, reservation: Reservation) -> None:
        with self._lock:
            staging = self._staging.pop(reservation.location, None)
            self._release(reservation.location)
        if staging is not None and self.pinned is not None:
            self.pinned.give_back(staging)

    def _release(self, location: int) -> None:
        if self.pool.owns(location):
            self.pool.free(location)
        else:
            self._alloc.free(location)

    def read(self, location: int, size: int) -> memoryview:
        region = self._pool[location : location + size]
        if not self.emulated:
            host = self._torch.empty(size, dtype=self._torch.uint8, pin_memory=True)
            host.copy_(region, non_blocking=False)
            region = host
        view: memoryview = region.numpy().data
        return view.toreadonly()

    def tensor(self, location: int, size: int) -> Any:
        """The device tensor holding the value (no copy)."""
        return self._pool[location : location + size]

    def free(self, location: int, size: int) -> None:
        with self._lock:
            self._release(location)

    def close(self) -> None:
        self._pool = self._torch.empty(0, dtype=self._torch.uint8)
        self.pinned = None
        if not self.emulated:
            self._torch.cuda.empty_cache()
