"""Every Prometheus metric of the daemon, built against an injected registry.

Tests pass a fresh ``CollectorRegistry()``; the daemon makes one per instance,
so two daemons in one process never share series. Names follow Prometheus
conventions: ``tiermem_`` prefix, base units, ``_total`` for counters. Labels
have bounded values only (tiers, kinds, RPC names, status codes): never object
keys or session ids.

Gauges describing state (tier usage, object counts) are not updated on every
operation; a collector reads them from the daemon at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class TierUsage:
    """Snapshot rows fed to the state collector: (tier, kind, objects, bytes)."""

    def __init__(self) -> None:
        self.capacity: dict[str, int] = {}
        self.used: dict[str, int] = {}
        self.objects: list[tuple[str, str, int, int]] = []


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], TierUsage]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        snap = self._snapshot()
        cap = GaugeMetricFamily(
            "tiermem_tier_capacity_bytes", "Byte budget of each tier.", labels=["tier"]
        )
        used = GaugeMetricFamily(
            "tiermem_tier_used_bytes", "Bytes allocated in each tier.", labels=["tier"]
        )
        for tier, value in snap.capacity.items():
            cap.add_metric([tier], value)
        for tier, value in snap.used.items():
            used.add_metric([tier], value)
        objs = GaugeMetricFamily(
            "tiermem_objects", "Object copies per tier and kind.", labels=["tier", "kind"]
        )
        obj_bytes = GaugeMetricFamily(
            "tiermem_object_bytes", "Bytes of object copies per tier and kind.",
            labels=["tier", "kind"],
        )  # fmt: skip
        for tier, kind, count, nbytes in snap.objects:
            objs.add_metric([tier, kind], count)
            obj_bytes.add_metric([tier, kind], nbytes)
        return [cap, used, objs, obj_bytes]


class _CatalogMemoryCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, int]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "tiermem_catalog_memory_bytes",
            "Memory RocksDB holds for the catalog, by part (memtables, block cache).",
            labels=["part"],
        )
        for part, value in self._snapshot().items():
            family.add_metric([part], value)
        return [family]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tiermem_requests", "RPCs served, by method and status code.", ["method", "code"],
            registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "tiermem_request_duration_seconds", "RPC latency by method.", ["method"],
            buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.data_bytes = Counter(
            "tiermem_data_bytes", "Object bytes moved per data path and direction.",
            ["path", "direction"], registry=r,
        )  # fmt: skip
        self.hits = Counter(
            "tiermem_reads", "Object reads by serving tier and kind (hits).", ["tier", "kind"],
            registry=r,
        )  # fmt: skip
        self.misses = Counter(
            "tiermem_read_misses", "Reads of objects that do not exist, by kind.", ["kind"],
            registry=r,
        )  # fmt: skip
        self.migrations = Counter(
            "tiermem_migrations", "Objects moved between tiers.", ["from_tier", "to_tier", "kind"],
            registry=r,
        )  # fmt: skip
        self.migrated_bytes = Counter(
            "tiermem_migrated_bytes", "Bytes moved between tiers.", ["from_tier", "to_tier"],
            registry=r,
        )  # fmt: skip
        self.evictions = Counter(
            "tiermem_evictions", "CACHE objects dropped under pressure.", ["tier", "kind"],
            registry=r,
        )  # fmt: skip
        self.expirations = Counter(
            "tiermem_expirations", "Objects deleted because their TTL passed.", ["kind"],
            registry=r,
        )  # fmt: skip
        self.checksum_failures = Counter(
            "tiermem_checksum_failures", "Stored or uploaded bytes that failed verification.",
            ["where"], registry=r,
        )  # fmt: skip
        self.compactions = Counter(
            "tiermem_segment_compactions", "SSD segments compacted and retired.", registry=r
        )
        self.compacted_bytes = Counter(
            "tiermem_segment_compacted_bytes", "Live bytes rewritten by compaction.", registry=r
        )
        self.leases_active = Gauge(
            "tiermem_leases_active", "Read leases currently held.", registry=r
        )
        self.recovery_seconds = Gauge(
            "tiermem_recovery_seconds", "Time the last start-up recovery took.", registry=r
        )

        # -- reliability and security: damage, limits, auth -------------------------
        self.damaged_objects = Gauge(
            "tiermem_damaged_objects",
            "Objects whose stored bytes are known damaged (served as DATA_LOSS; see fsck).",
            registry=r,
        )
        self.limit_rejections = Counter(
            "tiermem_limit_rejections", "Requests refused by a limit or quota, by limit.",
            ["limit"], registry=r,
        )  # fmt: skip
        self.auth_failures = Counter(
            "tiermem_auth_failures", "Requests refused by authentication or authorization.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.inflight_bytes = Gauge(
            "tiermem_inflight_bytes",
            "Bytes held by requests in progress (against limits.max_inflight_bytes).",
            registry=r,
        )

    def watch_catalog_memory(self, snapshot: Callable[[], dict[str, int]]) -> None:
        """Export the catalog's memory (memtables, block cache) at scrape time."""
        self.registry.register(_CatalogMemoryCollector(snapshot))

    def watch_state(self, snapshot: Callable[[], TierUsage]) -> None:
        """Register the scrape-time collector of tier and object gauges."""
        self.registry.register(_StateCollector(snapshot))
