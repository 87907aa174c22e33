"""Metric values follow a scripted workload exactly: request counts by RPC and
status, bytes per data path, hits and misses per tier (hit ratios), objects,
bytes and cost per tier/kind/namespace, migrations, evictions, expirations,
leases and recovery; every label value stays within its declared bound."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from tiermem.client import Client, Durability, Kind, Profile, Tier
from tiermem.client.errors import NotFoundError
from tiermem.server.app import SERVICE_NAMES, Daemon
from tiermem.server.metrics import FIXED_LABEL_VALUES, OTHER_NAMESPACES
from tiermem.server.services.cost import GiB
from tiermem.v1 import common_pb2, object_pb2, object_pb2_grpc

KiB = 1 << 10
MiB = 1 << 20
BLOB = 100_000
KV = 64 * KiB
BIG_KV = 256 * KiB


def _value(daemon: Daemon) -> Callable[..., float]:
    def get(name: str, **labels: str) -> float:
        return daemon.metrics.registry.get_sample_value(name, labels) or 0.0

    return get


def test_counts_bytes_hit_ratios_usage_and_cost_follow_the_workload(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        namespaces=["default", "a", "b", "c"],
        metrics={"namespace_label_limit": 2},
        tiers={"dram": {"capacity_bytes": 1 * MiB}},
    )
    m = _value(daemon)
    with Client(daemon.address, fast_paths=()) as c:  # counts gRPC RPCs
        for i in range(5):
            c.put(Kind.BLOB, f"blob-{i}", bytes([i]) * BLOB)  # COLD: served from SSD
        for i in range(3):
            c.put(Kind.KV_BLOCK, f"kv-{i}", bytes([i]) * KV)  # HOT: served from DRAM
        for _ in range(2):
            for i in range(5):
                assert len(c.get(Kind.BLOB, f"blob-{i}")) == BLOB
        for i in range(3):
            assert len(c.get(Kind.KV_BLOCK, f"kv-{i}")) == KV
        for key in ("missing-1", "missing-2"):
            with pytest.raises(NotFoundError):
                c.get(Kind.BLOB, key)
        for ns in ("a", "b", "c"):
            c.put(Kind.SCRATCH, "note", b"x" * 100, namespace=ns)

    assert m("tiermem_ready") == 1
    assert m("tiermem_requests_total", method="ObjectService/Put", code="OK") == 11
    assert m("tiermem_requests_total", method="ObjectService/Get", code="OK") == 13
    assert m("tiermem_requests_total", method="ObjectService/Get", code="NOT_FOUND") == 2
    assert m("tiermem_request_duration_seconds_count", method="ObjectService/Put", code="OK") == 11
    assert m("tiermem_data_bytes_total", path="grpc", direction="in") == 5 * BLOB + 3 * KV + 300
    assert m("tiermem_data_bytes_total", path="grpc", direction="out") == 10 * BLOB + 3 * KV

    # Blob reads look in DRAM first (miss), then SSD (hit); missing keys miss on both.
    assert m("tiermem_hits_total", tier="SSD", kind="BLOB") == 10
    assert m("tiermem_misses_total", tier="DRAM", kind="BLOB") == 12
    assert m("tiermem_misses_total", tier="SSD", kind="BLOB") == 2
    assert m("tiermem_hits_total", tier="DRAM", kind="KV_BLOCK") == 3
    dram_hits = sum(m("tiermem_hits_total", tier="DRAM", kind=k) for k in ("BLOB", "KV_BLOCK"))
    dram_misses = sum(m("tiermem_misses_total", tier="DRAM", kind=k) for k in ("BLOB", "KV_BLOCK"))
    assert dram_hits / (dram_hits + dram_misses) == 3 / 15

    # State at scrape time, per tier, kind and (bounded) namespace.
    assert m("tiermem_objects", tier="SSD", kind="BLOB", namespace="default") == 5
    assert m("tiermem_object_bytes", tier="SSD", kind="BLOB", namespace="default") == 5 * BLOB
    assert m("tiermem_objects", tier="DRAM", kind="KV_BLOCK", namespace="default") == 3
    assert m("tiermem_objects", tier="SSD", kind="SCRATCH", namespace="a") == 1
    assert m("tiermem_objects", tier="SSD", kind="SCRATCH", namespace=OTHER_NAMESPACES) == 2
    assert m("tiermem_namespaces") == 4
    assert m("tiermem_tier_capacity_bytes", tier="DRAM") == 1 * MiB
    assert m("tiermem_tier_used_bytes", tier="DRAM") >= 3 * KV
    assert m("tiermem_tier_watermark_ratio", tier="DRAM", level="high") == 0.9
    price = daemon.config.placement.costs.ssd.price_per_gib_hour
    cost = m("tiermem_cost_usd_per_hour", tier="SSD", kind="BLOB", namespace="default")
    assert cost == pytest.approx(5 * BLOB / GiB * price)

    # Filling the 1 MiB DRAM tier sends KV blocks to SSD: residents demoted to
    # make room (counted as migrations) or, once the residents are worth more
    # than a newcomer, newcomers admitted to SSD directly (the put names the tier).
    with Client(daemon.address, fast_paths=()) as c:  # counts gRPC RPCs
        direct = sum(
            c.put(Kind.KV_BLOCK, f"big-{i}", b"k" * BIG_KV).tier == Tier.SSD for i in range(6)
        )
    daemon.maintain()
    moved = m("tiermem_migrations_total", from_tier="DRAM", to_tier="SSD", kind="KV_BLOCK")
    on_ssd = m("tiermem_objects", tier="SSD", kind="KV_BLOCK", namespace="default")
    assert moved >= 1 and moved + direct == on_ssd  # each block moved once, nothing promoted
    assert m("tiermem_migrated_bytes_total", from_tier="DRAM", to_tier="SSD", kind="KV_BLOCK") == (
        m("tiermem_object_bytes", tier="SSD", kind="KV_BLOCK", namespace="default")
        - direct * BIG_KV
    )
    assert m("tiermem_planner_run_duration_seconds_count") >= 1

    # Every label value is within its declared bound, whatever the keys were.
    allowed_ns = {"default", "a", OTHER_NAMESPACES}
    for family in daemon.metrics.registry.collect():
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label in FIXED_LABEL_VALUES:
                    assert value in FIXED_LABEL_VALUES[label], (family.name, label, value)
                elif label == "namespace":
                    assert value in allowed_ns, (family.name, value)
                elif label == "method":
                    services = {name.rsplit(".", 1)[-1] for name in SERVICE_NAMES}
                    assert value.split("/")[0] in services | {"Health"}


def test_evictions_expirations_and_recovery_are_counted(
    make_daemon: Callable[..., Daemon],
) -> None:
    cache_only = make_daemon(
        "cache", tiers={"dram": {"capacity_bytes": 1 * MiB}, "ssd": {"enabled": False}}
    )
    with Client(cache_only.address, fast_paths=()) as c:  # counts gRPC RPCs
        for i in range(6):
            c.put(Kind.KV_BLOCK, f"kv-{i}", b"k" * BIG_KV)
    m = _value(cache_only)
    evicted = m("tiermem_evictions_total", tier="DRAM", kind="KV_BLOCK")
    assert evicted >= 2
    assert m("tiermem_evicted_bytes_total", tier="DRAM", kind="KV_BLOCK") == evicted * BIG_KV
    assert m("tiermem_objects", tier="DRAM", kind="KV_BLOCK", namespace="default") == 6 - evicted

    daemon = make_daemon("d")
    with Client(daemon.address, fast_paths=()) as c:  # counts gRPC RPCs
        c.put(Kind.SCRATCH, "short-lived", b"x", profile=Profile(ttl_s=60))
        c.put(Kind.BLOB, "kept", b"y" * 1000)
        c.put(Kind.KV_BLOCK, "volatile", b"z" * KV, profile=Profile(durability=Durability.CACHE))
    daemon.expirer.expire_due(now_ms=int(time.time() * 1000) + 120_000)
    assert _value(daemon)("tiermem_expirations_total", kind="SCRATCH") == 1
    daemon.stop()

    again = make_daemon("d")
    m = _value(again)
    assert m("tiermem_recovery_objects", outcome="loaded") == 1
    assert m("tiermem_recovery_objects", outcome="purged_volatile") == 1
    assert m("tiermem_recovery_duration_seconds") > 0
    assert m("tiermem_ready") == 1


def test_a_streaming_read_holds_a_lease_until_it_ends(daemon: Daemon) -> None:
    size = 24 * MiB  # far beyond gRPC's flow-control window: the stream stays open
    with Client(daemon.address, fast_paths=()) as c:  # counts gRPC RPCs
        c.put(Kind.KV_BLOCK, "big", b"v" * size)
    m = _value(daemon)
    assert m("tiermem_leases_active") == 0
    with grpc.insecure_channel(daemon.address) as channel:
        stub = object_pb2_grpc.ObjectServiceStub(channel)
        key = common_pb2.ObjectKey(namespace="default", kind=Kind.KV_BLOCK, key="big")  # type: ignore[arg-type]
        call = stub.Get(object_pb2.GetRequest(key=key), timeout=30)
        assert next(call).HasField("meta")
        assert m("tiermem_leases_active") == 1
        call.cancel()
    deadline = time.monotonic() + 10
    while m("tiermem_leases_active") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m("tiermem_leases_active") == 0
