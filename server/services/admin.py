"""Admin operations: usage statistics and namespaces."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tiermem import __version__
from tiermem.server.metrics import TierUsage
from tiermem.server.model import Kind, Tier
from tiermem.server.services.guard import Role
from tiermem.server.services.store import Store


@dataclass(slots=True)
class TierReport:
    tier: Tier
    enabled: bool
    capacity_bytes: int
    used_bytes: int
    high_watermark: float
    low_watermark: float
    device: str
    by_kind: dict[Kind, tuple[int, int]] = field(default_factory=dict)  # objects, bytes


@dataclass(slots=True)
class StatsReport:
    version: str
    tiers: list[TierReport]
    objects: int
    uptime_s: int


class AdminService:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._started = time.monotonic()

    def stats(self) -> StatsReport:
        store = self.store
        with store.lock:
            usage = store.catalog.usage()
            objects = len(store.catalog.index)
            reports = []
            for tier, engine in store.engines():
                enabled, high, low = store.tier_config(tier)
                by_kind = {
                    kind: (int(usage[tier, kind, 0]), int(usage[tier, kind, 1]))
                    for kind in Kind
                    if usage[tier, kind, 0]
                }
                reports.append(
                    TierReport(
                        tier,
                        enabled,
                        engine.capacity_bytes,
                        engine.used_bytes,
                        high,
                        low,
                        engine.device,
                        by_kind,
                    )
                )
        reports.sort(key=lambda r: r.tier)
        return StatsReport(__version__, reports, objects, int(time.monotonic() - self._started))

    def usage_snapshot(self) -> TierUsage:
        """What the Prometheus state collector exports at scrape time."""
        snap = TierUsage()
        for report in self.stats().tiers:
            name = report.tier.name
            snap.capacity[name] = report.capacity_bytes
            snap.used[name] = report.used_bytes
            for kind in Kind:
                count, nbytes = report.by_kind.get(kind, (0, 0))
                snap.objects.append((name, kind.name, count, nbytes))
        return snap

    def create_namespace(self, name: str) -> bool:
        self.store.guard.require(Role.ADMIN)
        with self.store.lock:
            return self.store.catalog.ensure_namespace(name)

    def list_namespaces(self) -> list[str]:
        """The namespaces the caller is granted (others are not revealed)."""
        guard = self.store.guard
        with self.store.lock:
            return sorted(n for n in self.store.catalog.namespaces if guard.visible(n))
