"""A read through the data plane (shared-memory lease or bulk channel) of blocks
daemon B does not hold brings them in from the remote store within that one
request: B fetches them in parts on the wire at once, verifies each copy
against its checksum as it copies it into its DRAM arena, and serves it (a
leased copy is adopted when the client releases its lease, see
test_remote_blocks_are_leased_from_staging_and_adopted_when_the_lease_ends).
A value the store lost is a miss (found=False / NOT_FOUND), never an error; a
damaged value is DATA_LOSS and is neither served nor kept.
Re-puts of a block still waiting to be published ride on that publish instead
of crowding other blocks out of the bounded publish queue."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config
from tests.remote.conftest import Peer, forget, remote_config, sample
from tests.remote.peers import RedisCluster
from tiermem.client import ChecksumError, Client, Kind, KvBlock, KvScope, NotFoundError
from tiermem.client.fastpath import ObjectRef
from tiermem.server.app import Daemon
from tiermem.server.metrics import Metrics
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey, Profile, Tier
from tiermem.server.services.objects import PutSpec
from tiermem.server.tiers.remote import RemoteBackend, RemoteTier, remote_name

KiB, MiB = 1 << 10, 1 << 20
SCOPE = KvScope("dataplane-model", dtype="uint8")
PREFIX = f"{SCOPE.model}@1@0@{SCOPE.dtype}@-@"
BLOCK_BYTES = 256 * KiB  # above the inline limit: leased / streamed, not inline


def blocks(n: int, seed: int) -> list[KvBlock]:
    rng = np.random.default_rng(seed)
    return [
        KvBlock(seed * 1_000 + i, rng.integers(0, 256, BLOCK_BYTES, dtype=np.uint8))
        for i in range(n)
    ]


def key_of(chunk_hash: int) -> str:
    return f"{PREFIX}{chunk_hash:016x}"


def names(daemon: Daemon, hashes: list[int]) -> list[str]:
    deployment = daemon.config.tiers.remote.deployment
    return [
        remote_name(deployment, ObjectKey("default", ServerKind.KV_BLOCK, key_of(h)))
        for h in hashes
    ]


def adopted_soon(daemon: Daemon, n: int, timeout_s: float = 10.0) -> float:
    """The adopted count once it reaches ``n`` (a block leased over a bulk
    session is adopted right after the reply; one leased over gRPC when the
    client releases it, without waiting)."""
    deadline = time.monotonic() + timeout_s
    while (got := sample(daemon, "tiermem_remote_adopted_objects_total")) < n:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return got


def pair(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], **remote: Any
) -> tuple[Daemon, Daemon]:
    config = remote_config(peer, **remote)
    return make_remote_daemon("a", config), make_remote_daemon("b", config)


@pytest.mark.parametrize("path", ["shm", "bulk"])
def test_get_blocks_on_b_reads_blocks_written_through_a_in_one_data_plane_request(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], path: str
) -> None:
    a, b = pair(peer, make_remote_daemon)
    written = blocks(12, seed=1)
    hashes = [blk.chunk_hash for blk in written]
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, written)
        a.maintain()  # waits for the write-behind publish
        got = cb.kv.get_blocks(SCOPE, hashes, path=path)
        assert all(g.found for g in got)
        for blk, g in zip(written, got, strict=True):
            assert g.data is not None and bytes(g.data) == blk.data.tobytes()
        assert cb.dataplane.path_stats()[path]["gets"] == 12
        assert cb.dataplane.path_stats()["grpc"]["gets"] == 0
        # fetched once (Redis: in 4 parts of 3 on the wire at once), all adopted
        assert adopted_soon(b, 12) == 12
        parts = 4 if isinstance(peer, RedisCluster) else 1
        assert sample(b, "tiermem_remote_operations_total", op="get", result="ok") == parts
        # now local: read again without the remote store; a block nobody wrote is
        # reported missing (the batch falls back to the stream, which says so)
        got = cb.kv.get_blocks(SCOPE, [*hashes[:2], 424242], path=path)
        assert [g.found for g in got] == [True, True, False]
        assert bytes(got[1].data or b"") == written[1].data.tobytes()
    assert sample(b, "tiermem_remote_adopted_objects_total") == 12
    assert sample(b, "tiermem_checksum_failures_total", where="remote") == 0


def test_get_many_on_b_brings_in_each_object_it_names_and_misses_the_rest(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    a, b = pair(peer, make_remote_daemon)
    written = blocks(3, seed=2)
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, written)
        a.maintain()
        refs = [ObjectRef(Kind.KV_BLOCK, key_of(blk.chunk_hash)) for blk in written]
        fetched = cb.dataplane.get_many(refs, path="shm")
        assert [bytes(f.data) for f in fetched] == [blk.data.tobytes() for blk in written]
        with pytest.raises(NotFoundError):
            cb.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, key_of(777))], path="shm")


def test_a_block_the_store_lost_is_a_miss_on_the_data_plane(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    a, b = pair(peer, make_remote_daemon)
    written = blocks(4, seed=3)
    hashes = [blk.chunk_hash for blk in written]
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, written)
        a.maintain()
        forget(peer, names(a, hashes[1:2]))
        got = cb.kv.get_blocks(SCOPE, hashes, path="shm")
        assert [g.found for g in got] == [True, False, True, True]
        assert bytes(got[3].data or b"") == written[3].data.tobytes()
        with pytest.raises(NotFoundError):
            cb.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, key_of(hashes[1]))], path="shm")


def test_a_damaged_remote_value_is_data_loss_and_is_not_kept(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    if not isinstance(peer, RedisCluster):
        pytest.skip("the value is damaged in place with redis-py")
    import redis

    a, b = pair(peer, make_remote_daemon)
    (blk,) = blocks(1, seed=4)
    (name,) = names(a, [blk.chunk_hash])
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, [blk])
        a.maintain()
        dram_used = b.store.memory[Tier.DRAM].used_bytes
        cluster = redis.RedisCluster(host="127.0.0.1", port=peer.ports[0])
        try:
            value = bytearray(cluster.get(name))
            value[-1] ^= 0xFF  # last payload byte; the header stays intact
            cluster.set(name, bytes(value))
        finally:
            cluster.close()
        for _ in range(2):  # nothing bad was kept: the second read fails the same way
            with pytest.raises(ChecksumError):
                cb.kv.get_blocks(SCOPE, [blk.chunk_hash], path="shm")
    assert sample(b, "tiermem_remote_adopted_objects_total") == 0
    assert sample(b, "tiermem_checksum_failures_total", where="remote") == 2
    assert b.store.memory[Tier.DRAM].used_bytes == dram_used  # no extent kept


def test_re_puts_of_a_block_waiting_to_be_published_leave_room_for_others(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    # a queue of 3 blocks; the same block put 5 times, then two others
    a = make_remote_daemon("a", remote_config(peer, publish_queue_bytes=3 * BLOCK_BYTES))
    assert a.remote is not None
    service = a.remote
    keys = [ObjectKey("default", ServerKind.KV_BLOCK, f"requeue-{i}") for i in range(3)]
    payload = bytes(BLOCK_BYTES)
    with service._cond:  # the writer waits: every put below is queued meanwhile
        for key in [keys[0]] * 5 + keys[1:]:
            spec = PutSpec(key=key, size_bytes=BLOCK_BYTES, profile=Profile())
            a.objects.put(spec, [payload])
    a.maintain()
    assert service.remote.exists([k.encode() for k in keys]) == [True] * 3
    assert sample(a, "tiermem_remote_published_objects_total", result="skipped") == 0
    assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 3


def unused_backend() -> RemoteBackend:
    raise AssertionError("no remote call expected")


def test_a_read_of_many_objects_is_cut_into_parts_of_at_most_a_batch(tmp_path: Path) -> None:
    def parts(n: int, **cfg: Any) -> list[int]:
        config = daemon_config(
            tmp_path, tiers={"remote": {"enabled": True, "deployment": "unit", **cfg}}
        )
        tier = RemoteTier(config.tiers.remote, unused_backend, Metrics(CollectorRegistry()))
        try:
            return [len(p) for p in tier._read_parts(n)]
        finally:
            tier.close()

    assert parts(1) == [1]
    assert parts(3) == [3]  # at least read_part_min_objects=2 per part
    assert parts(16) == [4, 4, 4, 4]
    assert parts(10, read_parallel=3) == [3, 3, 4]
    assert parts(16, backend="mooncake") == [16]  # its transfer engine splits batches itself
    assert parts(300, batch_max_objects=50) == [50] * 6
