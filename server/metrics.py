"""Every Prometheus metric of the daemon, built against an injected registry.

Tests pass a fresh ``CollectorRegistry()``; the daemon makes one per instance,
so two daemons in one process never share series. Names follow Prometheus
conventions: ``tiermem_`` prefix, base units (bytes, seconds), ``_total`` on
counters (the client library appends it), ``_bytes`` / ``_seconds`` last.

Cardinality is bounded: every label name used here is listed in
``LABEL_BOUNDS`` with what bounds its values (a fixed set, the proto, the
config); never object keys, session ids or request ids. A unit test walks the
registry and fails on any other label.

Gauges describing state (tier usage, object counts, cost) are not updated on
every operation; a collector reads them from the daemon at scrape time.

Layout: the core block (objects, tiers, moves, requests: wired on the
foundation), then one block per area that is built elsewhere. Those metrics are
defined (name, HELP, labels) so each area only calls them; the README lists
which are wired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
#: Background passes (planner, write-back flush) take longer than one RPC.
PASS_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

TIERS = ("HBM", "DRAM", "SSD", "REMOTE")
KINDS = ("KV_BLOCK", "VECTOR", "BLOB", "SCRATCH")
#: Label value summing the namespaces beyond ``metrics.namespace_label_limit``
#: (``~`` is not allowed in namespace names, so it never collides with one).
OTHER_NAMESPACES = "~other"

#: Labels whose values come from a fixed set.
FIXED_LABEL_VALUES: dict[str, frozenset[str]] = {
    "tier": frozenset(TIERS),
    "from_tier": frozenset(TIERS),
    "to_tier": frozenset(TIERS),
    "kind": frozenset(KINDS),
    "code": frozenset(c.name for c in grpc.StatusCode),
    "path": frozenset({"shm", "bulk", "grpc", "remote", "file"}),
    "direction": frozenset({"in", "out"}),
    "where": frozenset({"upload", "ssd", "remote", "catalog"}),
    # guard limits and auth failures
    "limit": frozenset(
        {
            "namespace_rpcs",
            "inflight_bytes",
            "namespace_inflight_bytes",
            "namespace_bytes",
            "namespace_objects",
        }
    ),
    "pass": frozenset({"watermarks", "expiry", "compaction"}),
    "level": frozenset({"high", "low"}),
    "outcome": frozenset({"loaded", "purged_volatile", "missing_segment", "truncated_segment"}),
    "reason": frozenset(
        {
            "records",
            "bytes",
            "key_node",
            "explicit",
            "session_close",
            "timer",
            "shutdown",
            "recovery",
            "client",
            "permission",
            "token",
            "CLIENT",
            "EXPIRED",
            "ABANDONED",
            "PARENT_CLOSED",
        }
    ),
    # blobs
    "store": frozenset({"files", "lance", "inline", "cache"}),
    # data plane
    "mode": frozenset({"read", "write"}),
    "how": frozenset({"released", "committed", "aborted", "expired"}),
    "op": frozenset(
        {"put", "get", "-", "lookup", "delete", "create", "drop", "upsert", "search"}
        | {"exists", "ping"}  # remote tier
    ),
    # vector index types
    "index": frozenset({"FLAT", "HNSW", "IVF_PQ", "AUTO"}),
    "result": frozenset(
        {
            "ok",
            "refused",
            "failed",
            "broken",
            "stored",
            "found",
            "missing",
            "deleted",
            "done",
            "skipped",
            "deduplicated",
            "timeout",
        }
    ),
    # placement
    "action": frozenset({"promote", "demote", "evict"}),
    # KV codecs
    "codec": frozenset({"fp8_e4m3", "int8"}),
    "form": frozenset({"raw", "encoded"}),
}

#: Every label name a tiermem metric may carry, and what bounds its values.
LABEL_BOUNDS: dict[str, str] = {
    **{name: "fixed set: " + ", ".join(sorted(v)) for name, v in FIXED_LABEL_VALUES.items()},
    "method": "the RPCs of the registered gRPC services (Service/Method)",
    "namespace": "namespaces up to metrics.namespace_label_limit, the rest as '~other'",
    "operator": "names in the operator registry (fixed when the daemon starts)",
    "version": "one value: the running version",
}


@dataclass(slots=True)
class UsageRow:
    """Object copies of one (tier, kind, namespace) and what they cost."""

    tier: str
    kind: str
    namespace: str
    objects: int
    bytes: int
    cost_usd_per_hour: float


@dataclass(slots=True)
class TierUsage:
    """A scrape-time snapshot of the daemon's state (see ``Metrics.watch_state``)."""

    capacity: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    watermarks: dict[str, tuple[float, float]] = field(default_factory=dict)  # high, low
    rows: list[UsageRow] = field(default_factory=list)
    namespaces: int = 0


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
        marks = GaugeMetricFamily(
            "tiermem_tier_watermark_ratio",
            "Fraction of capacity where demotion starts (high) and stops (low).",
            labels=["tier", "level"],
        )
        for tier, value in snap.capacity.items():
            cap.add_metric([tier], value)
        for tier, value in snap.used.items():
            used.add_metric([tier], value)
        for tier, (high, low) in snap.watermarks.items():
            marks.add_metric([tier, "high"], high)
            marks.add_metric([tier, "low"], low)
        labels = ["tier", "kind", "namespace"]
        objs = GaugeMetricFamily(
            "tiermem_objects",
            "Object copies per tier, kind and namespace (an object in DRAM with an SSD copy "
            "counts on both tiers).",
            labels=labels,
        )
        obj_bytes = GaugeMetricFamily(
            "tiermem_object_bytes", "Bytes of object copies per tier, kind and namespace.",
            labels=labels,
        )  # fmt: skip
        cost = GaugeMetricFamily(
            "tiermem_cost_usd_per_hour",
            "What the stored copies cost per hour at the configured prices "
            "(placement.costs.*.price_per_gib_hour).",
            labels=labels,
        )
        for row in snap.rows:
            key = [row.tier, row.kind, row.namespace]
            objs.add_metric(key, row.objects)
            obj_bytes.add_metric(key, row.bytes)
            cost.add_metric(key, row.cost_usd_per_hour)
        namespaces = GaugeMetricFamily("tiermem_namespaces", "Namespaces that exist.")
        namespaces.add_metric([], snap.namespaces)
        return [cap, used, marks, objs, obj_bytes, cost, namespaces]


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
    def __init__(self, registry: CollectorRegistry | None = None, version: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # Process CPU, memory and file descriptors, and the Python version, as
        # every Prometheus client exports them (process_*, python_info).
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)

        # -- core: daemon, requests and data paths (wired) ---------------------------
        self.build_info = Gauge(
            "tiermem_build_info", "Always 1; the label carries the running version.",
            ["version"], registry=r,
        )  # fmt: skip
        self.build_info.labels(version or "unknown").set(1)
        self.ready = Gauge(
            "tiermem_ready",
            "1 while the daemon serves; 0 while it recovers its catalog or shuts down.",
            registry=r,
        )
        self.requests = Counter(
            "tiermem_requests", "RPCs served, by method and status code.", ["method", "code"],
            registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "tiermem_request_duration_seconds", "RPC latency by method and status code.",
            ["method", "code"], buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.data_bytes = Counter(
            "tiermem_data_bytes",
            "Object bytes moved per data path (shm: shared memory, bulk: TCP channel, "
            "remote: found in the remote tier and stored here, "
            "grpc: streamed messages) and direction (in: written by clients, out: read).",
            ["path", "direction"], registry=r,
        )  # fmt: skip

        # -- core: reads (wired; other kinds' services call count_read) ----------------
        self.hits = Counter(
            "tiermem_hits", "Reads served from a tier, by tier and kind.", ["tier", "kind"],
            registry=r,
        )  # fmt: skip
        self.misses = Counter(
            "tiermem_misses",
            "Reads that looked in a tier and did not find the object there (served by a "
            "slower tier, or not found at all), by tier and kind.",
            ["tier", "kind"], registry=r,
        )  # fmt: skip

        # -- core: moves, eviction, expiry, compaction (wired) -------------------------
        self.migrations = Counter(
            "tiermem_migrations", "Objects moved between tiers.", ["from_tier", "to_tier", "kind"],
            registry=r,
        )  # fmt: skip
        self.migrated_bytes = Counter(
            "tiermem_migrated_bytes", "Bytes moved between tiers.",
            ["from_tier", "to_tier", "kind"], registry=r,
        )  # fmt: skip
        self.planner_seconds = Histogram(
            "tiermem_planner_run_duration_seconds",
            "Time of one placement pass (today: the watermark demotion pass).",
            buckets=PASS_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.evictions = Counter(
            "tiermem_evictions", "CACHE objects dropped under pressure (no lower tier had room).",
            ["tier", "kind"], registry=r,
        )  # fmt: skip
        self.evicted_bytes = Counter(
            "tiermem_evicted_bytes", "Bytes of CACHE objects dropped under pressure.",
            ["tier", "kind"], registry=r,
        )  # fmt: skip
        self.expirations = Counter(
            "tiermem_expirations", "Objects deleted because their TTL passed.", ["kind"],
            registry=r,
        )  # fmt: skip
        self.compactions = Counter(
            "tiermem_segment_compactions", "SSD segments compacted and retired.", registry=r
        )
        self.compacted_bytes = Counter(
            "tiermem_segment_compacted_bytes", "Live bytes rewritten by compaction.", registry=r
        )
        self.compaction_paced_seconds = Counter(
            "tiermem_segment_compaction_paced_seconds",
            "Seconds background compaction waited to keep to "
            "tiers.ssd.compaction_rate_bytes_per_s.",
            registry=r,
        )
        self.background_errors = Counter(
            "tiermem_background_errors",
            "Background passes that failed (logged with a traceback), by pass.",
            ["pass"], registry=r,
        )  # fmt: skip

        # -- core: integrity, leases, recovery (wired) ---------------------------------
        self.checksum_failures = Counter(
            "tiermem_checksum_failures", "Stored or uploaded bytes that failed verification.",
            ["where"], registry=r,
        )  # fmt: skip
        self.leases_active = Gauge(
            "tiermem_leases_active", "Leases on in-memory copies currently held.", registry=r
        )
        self.recovery_seconds = Gauge(
            "tiermem_recovery_duration_seconds", "Time the last start-up recovery took.",
            registry=r,
        )  # fmt: skip
        self.recovery_objects = Gauge(
            "tiermem_recovery_objects",
            "Catalog records seen by the last start-up recovery, by outcome.",
            ["outcome"], registry=r,
        )  # fmt: skip

        # == Defined for areas built on other branches: they only call these. ==========
        # -- KV data planes and leases (issue 4) -----------------------------------------
        self.lease_expiries = Counter(
            "tiermem_lease_expiries",
            "Leases that ran past their deadline and were reclaimed by the daemon.",
            ["tier"], registry=r,
        )  # fmt: skip
        # -- placement planner (issue 3) -------------------------------------------------
        self.drops_to_recompute = Counter(
            "tiermem_drops_to_recompute",
            "CACHE objects the planner dropped because recomputing them is cheaper than "
            "keeping them (the client recomputes on a miss).",
            ["tier", "kind"], registry=r,
        )  # fmt: skip
        # -- scratchpad write-back buffer (issue 7) --------------------------------------
        self.writeback_records = Gauge(
            "tiermem_writeback_buffer_records", "Records waiting in the write-back buffer.",
            registry=r,
        )  # fmt: skip
        self.writeback_bytes = Gauge(
            "tiermem_writeback_buffer_bytes", "Bytes waiting in the write-back buffer.",
            registry=r,
        )  # fmt: skip
        self.writeback_flushes = Counter(
            "tiermem_writeback_flushes", "Write-back buffer flushes, by what triggered them.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.writeback_flush_seconds = Histogram(
            "tiermem_writeback_flush_duration_seconds", "Time of one write-back flush.",
            buckets=PASS_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.writeback_flushed_records = Counter(
            "tiermem_writeback_flushed_records", "Records written by write-back flushes.",
            registry=r,
        )  # fmt: skip
        self.writeback_deduplicated = Counter(
            "tiermem_writeback_deduplicated_records",
            "Buffered records dropped at flush as duplicates of another record.", registry=r,
        )  # fmt: skip
        self.writeback_merged = Counter(
            "tiermem_writeback_merged_records",
            "Buffered records merged into another record at flush.", registry=r,
        )  # fmt: skip
        # -- sessions (issue 7) ----------------------------------------------------------
        self.sessions_open = Gauge("tiermem_sessions_open", "Sessions currently open.", registry=r)
        self.sessions_opened = Counter(
            "tiermem_sessions_opened", "Sessions opened (root and child).", registry=r
        )
        self.sessions_closed = Counter(
            "tiermem_sessions_closed", "Sessions closed, by reason (CLIENT, EXPIRED, ABANDONED, "
            "PARENT_CLOSED).", ["reason"], registry=r,
        )  # fmt: skip
        self.session_reclaimed_bytes = Counter(
            "tiermem_session_reclaimed_bytes", "Bytes freed by closing sessions, by tier.",
            ["tier"], registry=r,
        )  # fmt: skip
        # -- operators (issue 7) ---------------------------------------------------------
        self.operator_invocations = Counter(
            "tiermem_operator_invocations", "Native operator runs, by operator and status code.",
            ["operator", "code"], registry=r,
        )  # fmt: skip
        self.operator_seconds = Histogram(
            "tiermem_operator_duration_seconds", "Time of one native operator run.",
            ["operator"], buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip

        # -- data plane: shared-memory leases and the bulk TCP channel ----------------
        # (bytes they move are counted in tiermem_data_bytes with path="shm" / "bulk")
        self.dataplane_leases = Counter(
            "tiermem_dataplane_leases", "Shared-memory leases granted, by mode (read, write).",
            ["mode"], registry=r,
        )  # fmt: skip
        self.dataplane_lease_ends = Counter(
            "tiermem_dataplane_lease_ends",
            "Shared-memory leases ended, by mode and how (released, committed, aborted, expired).",
            ["mode", "how"], registry=r,
        )  # fmt: skip
        self.dataplane_leases_active = Gauge(
            "tiermem_dataplane_leases_active", "Shared-memory leases outstanding.", registry=r
        )
        self.bulk_transfers = Counter(
            "tiermem_bulk_transfers",
            "Bulk-channel transfers by op (put, get, - = not started) and result "
            "(ok, refused, failed, broken).",
            ["op", "result"], registry=r,
        )  # fmt: skip
        self.bulk_tickets_active = Gauge(
            "tiermem_bulk_tickets_active", "Bulk-channel tickets issued and not yet used.",
            registry=r,
        )  # fmt: skip
        self.bulk_connections = Gauge(
            "tiermem_bulk_connections", "Bulk-channel connections open.", registry=r
        )
        # -- bulk sessions (server/api/bulk_session.py) -----------------------------
        self.bulk_sessions = Counter(
            "tiermem_bulk_sessions",
            "Bulk-channel sessions opened (requests without a gRPC call each).",
            registry=r,
        )
        # -- vectors (server/services/vectors.py) ----------------------------------
        self.vector_ops = Counter(
            "tiermem_vector_operations", "Vector service calls by operation.", ["op"],
            registry=r,
        )  # fmt: skip
        self.vector_items = Counter(
            "tiermem_vector_items", "Vectors upserted or deleted, and queries searched.", ["op"],
            registry=r,
        )  # fmt: skip
        self.vector_loads = Counter(
            "tiermem_vector_collection_loads", "Collections loaded from SSD.", registry=r
        )
        self.vector_load_seconds = Histogram(
            "tiermem_vector_collection_load_seconds", "Time to load a collection from SSD.",
            buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.vector_unloads = Counter(
            "tiermem_vector_collection_unloads", "Collections unloaded to SSD.", registry=r
        )
        self.vector_snapshots = Counter(
            "tiermem_vector_snapshots", "Collection snapshots written.", registry=r
        )
        self.vector_rebuilds = Counter(
            "tiermem_vector_index_rebuilds", "Index rebuilds (compaction, upgrade) by kind built.",
            ["index"], registry=r,
        )  # fmt: skip
        self.vector_memory_bytes = Gauge(
            "tiermem_vector_memory_bytes", "Memory held by loaded collections.", registry=r
        )

        # -- agent memory: what the sessions and scratchpad add (issue 7) ----------------
        self.session_ledger_bytes = Counter(
            "tiermem_session_ledger_bytes", "Result bytes children appended to their parents.",
            registry=r,
        )  # fmt: skip
        self.session_quota_refusals = Counter(
            "tiermem_session_quota_refusals", "Puts refused by a session quota, per tier.",
            ["tier"], registry=r,
        )  # fmt: skip
        self.scratch_appended = Counter(
            "tiermem_scratch_appended_records", "Scratchpad records appended.", registry=r
        )
        self.scratch_write_batches = Counter(
            "tiermem_scratch_write_batches", "RocksDB write batches of the scratchpad.", registry=r
        )
        self.scratch_index_updates = Counter(
            "tiermem_scratch_index_updates", "Memory-index updates of the scratchpad.", registry=r
        )

        # -- KV service (server/services/kv.py) ------------------------------------
        self.kv_blocks = Counter(
            "tiermem_kv_blocks", "KV blocks by operation (put, get, lookup, delete) and result.",
            ["op", "result"], registry=r,
        )  # fmt: skip
        self.kv_codec_bytes = Counter(
            "tiermem_kv_codec_bytes", "Bytes through the lossy KV codecs, before and after.",
            ["codec", "form"], registry=r,
        )  # fmt: skip

        # -- placement (issue 3) ------------------------------------------------------
        self.placement_plans = Counter(
            "tiermem_placement_plans", "Rebalancing plans made by the planner.", registry=r
        )
        self.placement_moves = Counter(
            "tiermem_placement_moves", "Planned moves by action (promote, demote, evict) "
            "and result (done, skipped: gone, pinned, changed or no room).",
            ["action", "result"], registry=r,
        )  # fmt: skip
        self.placement_prefetches = Counter(
            "tiermem_placement_prefetched_keys", "Keys named in Prefetch calls.", registry=r
        )
        self.placement_dropped_promotions = Counter(
            "tiermem_placement_dropped_promotions",
            "Promotions dropped because the queue was full.", registry=r,
        )  # fmt: skip
        self.placement_admission_drops = Counter(
            "tiermem_placement_admission_drops",
            "CACHE puts admission did not keep (not worth an SSD copy nor a place in "
            "memory, e.g. KV chunks marked COLD), by kind; a later read misses.",
            ["kind"], registry=r,
        )  # fmt: skip

        # -- blobs (server/services/blobs.py) -----------------------------------------
        # (corrupted stored blocks count in tiermem_checksum_failures{where="ssd"},
        #  hash mismatches on upload in where="upload")
        self.blob_bytes = Counter(
            "tiermem_blob_bytes", "Blob bytes moved per data path and direction "
            "(in: uploaded, out: downloaded).", ["path", "direction"], registry=r,
        )  # fmt: skip
        self.blob_reads = Counter(
            "tiermem_blob_reads", "Blob downloads by where the bytes came from "
            "(files/lance/inline payload, or the DRAM hot cache).", ["store"], registry=r,
        )  # fmt: skip
        self.blob_ops = Counter(
            "tiermem_blob_operations", "Blob operations (put, delete, search) by result "
            "(stored, deduplicated, deleted, failed, found, missing).",
            ["op", "result"], registry=r,
        )  # fmt: skip
        self.blob_cache_fills = Counter(
            "tiermem_blob_cache_fills", "Blob contents copied into the DRAM hot cache.",
            registry=r,
        )  # fmt: skip
        self.blobs = Gauge("tiermem_blobs", "Blobs stored.", registry=r)
        self.blob_logical_bytes = Gauge(
            "tiermem_blob_logical_bytes", "Sum of the sizes of stored blobs.", registry=r
        )
        self.blob_stored_bytes = Gauge(
            "tiermem_blob_stored_bytes",
            "Bytes of distinct blob contents stored (each once: logical/stored = dedup ratio).",
            registry=r,
        )  # fmt: skip
        self.blob_uploads_active = Gauge(
            "tiermem_blob_uploads_active", "Blob uploads in progress.", registry=r
        )
        self.blob_index_pending = Gauge(
            "tiermem_blob_index_pending",
            "Blob changes not yet written to the LanceDB search tables.", registry=r,
        )  # fmt: skip
        # -- remote tier (issue 10: server/tiers/remote, services/remote.py) ---------
        self.remote_ops = Counter(
            "tiermem_remote_operations",
            "Remote-store operations (one per batch) by op (put, get, exists, delete, ping) "
            "and result (ok, missing: not in the store, failed, timeout, refused: breaker "
            "open or too many in flight).",
            ["op", "result"], registry=r,
        )  # fmt: skip
        self.remote_seconds = Histogram(
            "tiermem_remote_operation_duration_seconds",
            "Time of one remote-store operation (a batch), by op.",
            ["op"], buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.remote_objects = Counter(
            "tiermem_remote_objects",
            "Objects in remote operations by op and result (ok, missing, failed).",
            ["op", "result"], registry=r,
        )  # fmt: skip
        self.remote_bytes = Counter(
            "tiermem_remote_bytes",
            "Value bytes sent to the remote store (out) and received from it (in).",
            ["direction"], registry=r,
        )  # fmt: skip
        self.remote_available = Gauge(
            "tiermem_remote_available",
            "1 while the remote tier is usable; 0 while its circuit breaker is open.",
            registry=r,
        )  # fmt: skip
        self.remote_breaker_trips = Counter(
            "tiermem_remote_breaker_trips",
            "Times the remote tier's circuit breaker opened after consecutive failures.",
            registry=r,
        )  # fmt: skip
        self.remote_published = Counter(
            "tiermem_remote_published_objects",
            "Objects published to the remote store after a put, by result (stored, failed, "
            "skipped: queue full, object gone or too large).",
            ["result"], registry=r,
        )  # fmt: skip
        self.remote_publish_queue_bytes = Gauge(
            "tiermem_remote_publish_queue_bytes", "Bytes of objects waiting to be published.",
            registry=r,
        )  # fmt: skip
        self.remote_stale_entries = Counter(
            "tiermem_remote_stale_entries",
            "Catalog entries removed because the remote store no longer had their value "
            "(evicted or lost by the store itself).",
            registry=r,
        )  # fmt: skip
        self.remote_adopted = Counter(
            "tiermem_remote_adopted_objects",
            "Objects another daemon wrote that this daemon found in the remote store and "
            "added to its catalog.",
            registry=r,
        )  # fmt: skip

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

    def child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, remembered: ``labels()`` takes a lock and
        builds tuples, microseconds that count next to a small request on a hot
        path. Every metric's label values are bounded, so is what is kept."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def count_read(
        self, kind: str, served_by: str | None, tiers: Sequence[str], n: int = 1
    ) -> None:
        """Count ``n`` reads: a hit on ``served_by`` and a miss on every tier in
        ``tiers`` (enabled tiers, fastest first) looked at before it; a miss on
        all of them when nothing was found (``served_by`` None)."""
        for tier in tiers:
            if tier == served_by:
                self.child(self.hits, tier, kind).inc(n)
                return
            self.child(self.misses, tier, kind).inc(n)

    def watch_catalog_memory(self, snapshot: Callable[[], dict[str, int]]) -> None:
        """Export the catalog's memory (memtables, block cache) at scrape time."""
        self.registry.register(_CatalogMemoryCollector(snapshot))

    def watch_state(self, snapshot: Callable[[], TierUsage]) -> None:
        """Register the scrape-time collector of tier, object and cost gauges."""
        self.registry.register(_StateCollector(snapshot))
