"""Every metric family follows Prometheus naming conventions and carries only
labels whose values are bounded (``metrics.LABEL_BOUNDS``)."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tiermem.server.metrics import (
    FIXED_LABEL_VALUES,
    LABEL_BOUNDS,
    Metrics,
    TierUsage,
    UsageRow,
)

#: Families of the standard process/platform collectors (not ours to name).
STANDARD_PREFIXES = ("process_", "python_")
#: Labels that would grow with traffic; none may ever appear.
UNBOUNDED = {"key", "object", "object_key", "session", "session_id", "request_id", "id", "user"}
#: Units must be base units; these suffixes or words mean they are not.
NON_BASE_UNITS = re.compile(
    r"_(ms|msec|milliseconds|us|microseconds|ns|nanoseconds|minutes|hours|kb|mb|gb|kib|mib|gib|"
    r"kilobytes|megabytes|gigabytes|percent)(_|$)"
)
#: Cost is conventionally quoted per hour; the one exception to base units.
ALLOWED_NON_BASE = {"tiermem_cost_usd_per_hour"}


def _snapshot() -> TierUsage:
    snap = TierUsage()
    snap.capacity["DRAM"] = 1 << 30
    snap.used["DRAM"] = 1 << 20
    snap.watermarks["DRAM"] = (0.9, 0.75)
    snap.rows.append(UsageRow("DRAM", "BLOB", "default", 1, 1 << 20, 0.001))
    snap.namespaces = 1
    return snap


def _metrics() -> Metrics:
    metrics = Metrics(CollectorRegistry(), version="test")
    metrics.watch_state(_snapshot)
    return metrics


def test_every_family_name_has_the_prefix_a_unit_suffix_and_help() -> None:
    families = list(_metrics().registry.collect())
    ours = [f for f in families if not f.name.startswith(STANDARD_PREFIXES)]
    assert len(ours) > 40
    for family in ours:
        name = family.name
        assert re.fullmatch(r"tiermem_[a-z][a-z0-9_]*[a-z0-9]", name), name
        assert family.documentation and family.documentation.endswith("."), name
        assert not name.endswith("_total"), f"{name}: the client library appends _total"
        if name not in ALLOWED_NON_BASE:
            assert not NON_BASE_UNITS.search(name), f"{name}: use base units"
        if "bytes" in name:
            assert name.endswith("_bytes"), f"{name}: the unit comes last"
        if "seconds" in name:
            assert name.endswith("_seconds"), f"{name}: the unit comes last"
        if family.type == "histogram":
            assert name.endswith(("_seconds", "_bytes")), f"{name}: histograms need a unit"
        if family.type == "counter":
            for sample in family.samples:
                assert sample.name.endswith(("_total", "_created")), sample.name


def test_every_label_is_bounded() -> None:
    for family in _metrics().registry.collect():
        if family.name.startswith(STANDARD_PREFIXES):
            continue
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label in ("le", "quantile"):
                    continue
                assert label not in UNBOUNDED, f"{family.name} has unbounded label {label}"
                assert label in LABEL_BOUNDS, f"{family.name}: label {label} has no declared bound"
                if label in FIXED_LABEL_VALUES:
                    assert value in FIXED_LABEL_VALUES[label], f"{family.name}{{{label}={value}}}"


def test_every_metric_attribute_declares_bounded_label_names() -> None:
    """Also catches metrics that have not produced a sample yet (labelled
    counters of features that saw no traffic)."""
    metrics = _metrics()
    seen = 0
    for attr, value in vars(metrics).items():
        if isinstance(value, Counter | Gauge | Histogram):
            seen += 1
            for label in value._labelnames:
                assert label in LABEL_BOUNDS, f"Metrics.{attr}: label {label} is not bounded"
    assert seen > 30


def test_reads_count_a_hit_where_served_and_a_miss_on_each_faster_tier() -> None:
    metrics = Metrics(CollectorRegistry())
    get = metrics.registry.get_sample_value
    metrics.count_read("BLOB", "SSD", ["HBM", "DRAM", "SSD"])
    metrics.count_read("KV_BLOCK", "DRAM", ["DRAM", "SSD"])
    metrics.count_read("BLOB", None, ["DRAM", "SSD"])
    assert get("tiermem_hits_total", {"tier": "SSD", "kind": "BLOB"}) == 1
    assert get("tiermem_misses_total", {"tier": "HBM", "kind": "BLOB"}) == 1
    assert get("tiermem_misses_total", {"tier": "DRAM", "kind": "BLOB"}) == 2
    assert get("tiermem_misses_total", {"tier": "SSD", "kind": "BLOB"}) == 1
    assert get("tiermem_hits_total", {"tier": "DRAM", "kind": "KV_BLOCK"}) == 1
    assert get("tiermem_misses_total", {"tier": "SSD", "kind": "KV_BLOCK"}) is None
