"""HBM tier: one preallocated uint8 tensor on a torch device, carved into extents.

This is the only module that touches ``torch.cuda``. On a host without CUDA the
tier is emulated on the CPU device with its own byte budget, so every policy runs
in tests; GPU tests are marked ``gpu`` and run where a device exists. When the
device is CUDA, host-side buffers are pinned so copies run at full PCIe speed.
"""

from __future__ import annotations

import threading
from typing import Any

from tiermem.server.model import Tier
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.extents import ExtentAllocator


def resolve_device(spec: str) -> str:
    """Map the config value ("auto", "cpu", "cuda:N") to a concrete torch device."""
    import torch

    if spec == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"tiers.hbm.device={spec!r} but CUDA is not available on this host")
    return spec


class HbmEngine:
    tier = Tier.HBM

    def __init__(self, capacity_bytes: int, device: str = "auto", granule: int = 4096) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(resolve_device(device))
        self.emulated = self._device.type == "cpu"
        self._alloc = ExtentAllocator(capacity_bytes, granule=granule)
        self.capacity_bytes = self._alloc.capacity_bytes
        self._pool = torch.empty(self.capacity_bytes, dtype=torch.uint8, device=self._device)
        self._lock = threading.Lock()
        self._staging: dict[int, Any] = {}

    @property
    def device(self) -> str:
        return f"{self._device} (emulated HBM)" if self.emulated else str(self._device)

    @property
    def used_bytes(self) -> int:
        return self._alloc.allocated_bytes

    def cost_of(self, size: int) -> int:
        return self._alloc.rounded(size)

    def _host_buffer(self, size: int) -> Any:
        return self._torch.empty(size, dtype=self._torch.uint8, pin_memory=not self.emulated)

    def reserve(self, size: int) -> Reservation | None:
        with self._lock:
            offset = self._alloc.allocate(size)
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

    def commit(self, reservation: Reservation) -> int:
        offset, size = reservation.location, reservation.size
        if not self.emulated:
            with self._lock:
                staging = self._staging.pop(offset)
            self._pool[offset : offset + size].copy_(staging, non_blocking=False)
        return offset

    def abort(self, reservation: Reservation) -> None:
        with self._lock:
            self._staging.pop(reservation.location, None)
            self._alloc.free(reservation.location)

    def read(self, location: int, size: int) -> memoryview:
        region = self._pool[location : location + size]
        if not self.emulated:
            host = self._host_buffer(size)
            host.copy_(region, non_blocking=False)
            region = host
        view: memoryview = region.numpy().data
        return view.toreadonly()

    def tensor(self, location: int, size: int) -> Any:
        """The device tensor holding the value (no copy)."""
        return self._pool[location : location + size]

    def free(self, location: int, size: int) -> None:
        with self._lock:
            self._alloc.free(location)

    def close(self) -> None:
        self._pool = self._torch.empty(0, dtype=self._torch.uint8)
        if not self.emulated:
            self._torch.cuda.empty_cache()
