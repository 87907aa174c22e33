"""Admin operations: usage statistics and namespaces."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tiermem import __version__
from tiermem.server.metrics import TierUsage
from tiermem.server.model import Kind, Tier
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


#: Usage held outside the object catalog: (tier, kind, objects, bytes) rows.
UsageSource = Callable[[], list[tuple[Tier, Kind, int, int]]]


class AdminService:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._started = time.monotonic()
        #: e.g. vector collections report their memory as VECTOR bytes on DRAM.
        self.usage_sources: list[UsageSource] = []

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
        for source in self.usage_sources:
            for tier, kind, count, nbytes in source():
                for report in reports:
                    if report.tier == tier:
                        old = report.by_kind.get(kind, (0, 0))
                        report.by_kind[kind] = (old[0] + count, old[1] + nbytes)
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
        with self.store.lock:
            return self.store.catalog.ensure_namespace(name)

    def list_namespaces(self) -> list[str]:
        with self.store.lock:
            return sorted(self.store.catalog.namespaces)
