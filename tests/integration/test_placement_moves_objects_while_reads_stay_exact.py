"""The daemon's placement engine end to end: a scaled simulator trace replayed
through the client sees objects promoted and demoted while every read stays
byte-exact; Prefetch, Pin/Unpin and the cost report; hot vectors survive a
burst of KV puts."""

import dataclasses
import hashlib
import time
from collections.abc import Callable

import pytest

from tiermem.cli.main import main as cli_main
from tiermem.client import AccessHint, Client, Durability, Kind, NotFoundError, Profile, Tier
from tiermem.placement.sim.trace import DELETE, GET, PREFETCH, PUT, MixParams, generate
from tiermem.server.app import Daemon

KiB, MiB = 1 << 10, 1 << 20


def wait_for(predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def value(obj: int, size: int) -> bytes:
    seed = hashlib.sha256(obj.to_bytes(8, "little")).digest()
    return (seed * (size // len(seed) + 1))[:size]


def migrations(daemon: Daemon, src: str, dst: str) -> float:
    total = 0.0
    for metric in daemon.metrics.migrations.collect():
        for s in metric.samples:
            if (
                s.name.endswith("_total")
                and s.labels["from_tier"] == src
                and s.labels["to_tier"] == dst
            ):
                total += s.value
    return total


SCALED = MixParams(
    name="scaled",
    duration_s=40.0,
    seed=3,
    kv_block_bytes=256 * KiB,
    kv_request_rate_per_s=2.0,
    kv_prefixes=12,
    kv_prefix_blocks=(1, 3),
    kv_session_rate_per_s=0.3,
    kv_think_s=4.0,
    kv_turns=(2, 4),
    vec_shards=5,
    vec_shard_median_bytes=2 * MiB,
    vec_query_rate_per_s=8.0,
    vec_phase_s=10.0,
    blob_count=20,
    blob_median_bytes=1 * MiB,
    blob_max_bytes=4 * MiB,
    blob_read_rate_per_s=1.0,
    blob_upload_rate_per_s=0.1,
    scratch_agent_rate_per_s=0.1,
    scratch_append_rate_per_s=1.0,
    scratch_agent_life_s=20.0,
    scratch_replay_interval_s=8.0,
)


def test_a_scaled_trace_moves_objects_up_and_down_and_every_read_is_exact(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 12 * MiB, "high_watermark": 0.9, "low_watermark": 0.8}},
        placement={"plan_interval_s": 0.1, "rate_half_life_s": 5.0},
    )
    trace = generate(SCALED)
    kinds = {1: Kind.KV_BLOCK, 2: Kind.VECTOR, 3: Kind.BLOB, 4: Kind.SCRATCH}
    hints = {1: AccessHint.HOT, 2: AccessHint.WARM, 3: AccessHint.COLD}
    dram_used: list[int] = []
    reads = cache_misses = 0
    with Client(daemon.address, timeout_s=60) as client:

        def put(o: int) -> None:
            size = int(trace.size[o])
            durable = bool(trace.durable[o])
            profile = Profile(
                hint=hints[int(trace.hint[o])],
                durability=Durability.DURABLE if durable else Durability.CACHE,
            )
            client.put(kinds[int(trace.kind[o])], f"o{o}", value(o, size), profile=profile)

        alive: set[int] = set()
        start = time.monotonic()
        for i, (t, op, o) in enumerate(zip(trace.t, trace.op, trace.obj, strict=True)):
            # replay at 8x speed so rates and the migrator's passes interleave with it
            lag = t / 8 - (time.monotonic() - start)
            if lag > 0:
                time.sleep(lag)
            o = int(o)
            kind = kinds[int(trace.kind[o])]
            if op == PUT:
                put(o)
                alive.add(o)
            elif op == GET and o in alive:
                reads += 1
                try:
                    data = client.get(kind, f"o{o}")
                except NotFoundError:
                    assert not trace.durable[o], f"DURABLE object o{o} was lost"
                    cache_misses += 1  # a dropped CACHE block: recompute and store again
                    put(o)
                    continue
                assert data == value(o, int(trace.size[o])), f"o{o} read back different bytes"
            elif op == DELETE and o in alive:
                client.delete(kind, f"o{o}")
                alive.discard(o)
            elif op == PREFETCH and o in alive:
                client.placement.prefetch([(kind, f"o{o}")], deadline_s=time.time() + 0.25)
            if i % 25 == 0:
                dram = next(x for x in client.stats().tiers if x.tier == Tier.DRAM)
                assert dram.used_bytes <= dram.capacity_bytes
                dram_used.append(dram.used_bytes)
        daemon.maintain(compact=False)
        for o in sorted(alive):  # everything still stored reads back exactly
            if trace.durable[o]:
                kind = kinds[int(trace.kind[o])]
                assert client.get(kind, f"o{o}") == value(o, int(trace.size[o]))
    assert reads > 200
    assert migrations(daemon, "SSD", "DRAM") > 0, "nothing was promoted"
    assert migrations(daemon, "DRAM", "SSD") > 0, "nothing was demoted"
    assert len(set(dram_used)) > 5 and max(dram_used) > 8 * MiB, "DRAM occupancy did not move"
    assert cache_misses < reads / 4


def test_prefetch_promotes_an_object_before_its_read(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(placement={"plan_interval_s": 0.1})
    with Client(daemon.address) as client:
        data = value(1, 3 * MiB)
        info = client.put(Kind.BLOB, "doc", data, profile=Profile(hint=AccessHint.COLD))
        assert info.tier == Tier.SSD
        result = client.placement.prefetch_in([(Kind.BLOB, "doc"), (Kind.BLOB, "nope")], 0.5)
        assert result.queued == 1 and result.missing == 1
        wait_for(lambda: client.stat(Kind.BLOB, "doc").tier == Tier.DRAM)
        assert client.get(Kind.BLOB, "doc") == data


def test_pin_moves_an_object_and_keeps_it_until_unpinned(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.4}},
        placement={"plan_interval_s": 0.1},
    )
    with Client(daemon.address) as client:
        client.put(Kind.BLOB, "keep", value(2, 2 * MiB), profile=Profile(hint=AccessHint.COLD))
        with pytest.raises(NotFoundError):
            client.placement.pin([(Kind.BLOB, "keep"), (Kind.BLOB, "missing")], tier=Tier.DRAM)
        assert client.stat(Kind.BLOB, "keep").tier == Tier.SSD  # nothing pinned or moved
        assert client.placement.pin([(Kind.BLOB, "keep")], tier=Tier.DRAM) == [Tier.DRAM]
        for i in range(8):
            client.put(Kind.KV_BLOCK, f"kv{i}", value(10 + i, 1 * MiB))
            client.get(Kind.KV_BLOCK, f"kv{i}")
        daemon.maintain(compact=False)
        info = client.stat(Kind.BLOB, "keep")
        assert info.tier == Tier.DRAM and info.profile.pin
        assert client.placement.unpin([(Kind.BLOB, "keep")]) == 1
        assert not client.stat(Kind.BLOB, "keep").profile.pin
        assert client.get(Kind.BLOB, "keep") == value(2, 2 * MiB)


def test_hot_vectors_stay_in_dram_through_a_burst_of_kv_puts(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 24 * MiB}}, placement={"plan_interval_s": 60}
    )
    with Client(daemon.address) as client:
        for i in range(4):
            client.put(Kind.VECTOR, f"shard{i}", value(100 + i, 3 * MiB))
        for _ in range(20):
            for i in range(4):
                client.get(Kind.VECTOR, f"shard{i}")
        for i in range(40):  # a spike of KV blocks nobody reads back
            client.put(Kind.KV_BLOCK, f"burst{i}", value(200 + i, 1 * MiB))
        daemon.maintain(compact=False)
        tiers = {client.stat(Kind.VECTOR, f"shard{i}").tier for i in range(4)}
        assert tiers == {Tier.DRAM}


def test_stats_and_the_cost_command_report_cost_per_tier_kind_namespace_and_session(
    daemon: Daemon, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    client.put(Kind.KV_BLOCK, "k", value(5, 1 * MiB), session="sess-1")
    client.put(Kind.BLOB, "b", value(6, 2 * MiB), profile=Profile(hint=AccessHint.COLD))
    cost = client.stats().cost
    assert cost is not None and cost.used_usd_per_hour > 0
    assert {line.name for line in cost.kinds} == {"KV_BLOCK", "BLOB"}
    assert [line.name for line in cost.namespaces] == ["default"]
    assert [line.name for line in cost.sessions] == ["sess-1"]
    assert {t.tier for t in cost.tiers} >= {Tier.DRAM, Tier.SSD}
    assert cli_main(["cost", "--addr", daemon.address]) == 0
    out = capsys.readouterr().out
    for word in ("DRAM", "SSD", "KV_BLOCK", "BLOB", "default", "sess-1", "USD/HOUR"):
        assert word in out


def test_scaled_trace_parameters_stay_small() -> None:
    trace = generate(dataclasses.replace(SCALED))
    assert len(trace) < 3000 and int(trace.size.sum()) < 200 * MiB


def test_slow_plans_space_out_so_planning_stays_within_its_cpu_share(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(placement={"plan_interval_s": 1.0, "plan_cpu_fraction": 0.1})
    daemon.placement.plan()  # a plan of the (small) catalog: far below the interval
    migrator = daemon._migrator
    assert migrator is not None
    assert migrator.pause_s() == 1.0
    daemon.placement.last_plan_seconds = 0.5  # as a plan over a huge catalog would take
    assert migrator.pause_s() == pytest.approx(5.0)
