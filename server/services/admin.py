"""Admin operations: usage statistics and namespaces."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tiermem import __version__
from tiermem.placement.cost import CostReport
from tiermem.server.catalog.catalog import USAGE_COLUMNS, usage_by_namespace
from tiermem.server.metrics import OTHER_NAMESPACES, TierUsage, UsageRow
from tiermem.server.model import Kind, Tier
from tiermem.server.services.cost import cost_usd_per_hour
from tiermem.server.services.guard import Role
from tiermem.server.services.placement import PlacementService
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
    cost: CostReport | None = None


#: Usage held outside the object catalog: (tier, kind, objects, bytes) rows.
UsageSource = Callable[[], list[tuple[Tier, Kind, int, int]]]


class AdminService:
    def __init__(self, store: Store, placement: PlacementService) -> None:
        self.store = store
        self.placement = placement
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
        return StatsReport(
            __version__,
            reports,
            objects,
            int(time.monotonic() - self._started),
            self.placement.cost_report(),
        )

    def usage_snapshot(self) -> TierUsage:
        """What the Prometheus state collector exports at scrape time: tier
        capacity, usage and watermarks, and object copies, bytes and cost per
        tier, kind and namespace (bounded by ``metrics.namespace_label_limit``)."""
        store = self.store
        limit = store.config.metrics.namespace_label_limit
        snap = TierUsage()
        with store.lock:
            cols = store.catalog.copy_columns(*USAGE_COLUMNS)
            names = {ns_id: name for name, ns_id in store.catalog.namespaces.items()}
            tiers = [
                (tier, engine.capacity_bytes, engine.used_bytes) for tier, engine in store.engines()
            ]
        usage = usage_by_namespace(cols, limit)
        slots = {ns_id: name for ns_id, name in names.items() if ns_id <= limit}
        if len(names) > limit:
            slots[limit + 1] = OTHER_NAMESPACES
        snap.namespaces = len(names)
        for tier, capacity, used in sorted(tiers):
            enabled, high, low = store.tier_config(tier)
            if not enabled:
                continue
            snap.capacity[tier.name] = capacity
            snap.used[tier.name] = used
            snap.watermarks[tier.name] = (high, low)
            for kind in Kind:
                for slot, namespace in sorted(slots.items()):
                    count, nbytes = (int(v) for v in usage[tier, kind, slot])
                    cost = cost_usd_per_hour(tier, nbytes, store.config.placement.costs)
                    snap.rows.append(UsageRow(tier.name, kind.name, namespace, count, nbytes, cost))
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
