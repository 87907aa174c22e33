"""Shared-memory leases: leased bytes are never moved, freed or reused under
their holder (whatever migration, maintenance, overwrites and deletes do
meanwhile); leases expire and are reclaimed; misuse gets a clear status."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import numpy as np
import pytest

from tests.integration.dataplane.helpers import (
    MiB,
    check,
    dataplane_stub,
    header,
    key,
    rpc_error,
    wait_for,
)
from tiermem.client import Client, Kind, NotFoundError
from tiermem.client.fastpath import ObjectRef
from tiermem.client.fastpath.shm import Arena
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey, Tier
from tiermem.v1 import common_pb2, dataplane_pb2, object_pb2


def arena_of(stub: object) -> Arena:
    hello = stub.Hello(dataplane_pb2.HelloRequest())  # type: ignore[attr-defined]
    return Arena(hello.arena)


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def test_leased_bytes_never_move_under_a_reader(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(tiers={"dram": {"capacity_bytes": 48 * MiB}})
    dram = daemon.store.memory[Tier.DRAM]
    value = np.random.default_rng(7).integers(0, 256, 4 * MiB, dtype=np.uint8).tobytes()
    encoded = ObjectKey("default", ServerKind.KV_BLOCK, "hot").encode()
    with Client(daemon.address, fast_paths=("grpc",)) as c, dataplane_stub(daemon) as stub:
        c.put(Kind.KV_BLOCK, "hot", value)
        arena = arena_of(stub)
        reply = stub.Lease(dataplane_pb2.LeaseRequest(keys=[key("hot")], ttl_ms=600_000))
        (lease,) = reply.leases
        region = (lease.offset, lease.length)
        view = arena.region(*region)
        assert bytes(view) == value

        # Meanwhile: move it to SSD, run maintenance, overwrite, delete, and fill the arena.
        errors: list[BaseException] = []
        seen_regions: list[tuple[int, int]] = []

        def churn() -> None:
            try:
                assert daemon.mover.move(encoded, Tier.SSD)
                daemon.maintain()
                c.put(Kind.KV_BLOCK, "hot", b"\x00" * (4 * MiB))
                c.delete(Kind.KV_BLOCK, "hot")
                for i in range(20):  # 80 MiB through a 48 MiB arena: demotions galore
                    c.put(Kind.KV_BLOCK, f"filler-{i}", bytes([i]) * (4 * MiB))
                    entry = daemon.store.catalog.find(
                        ObjectKey("default", ServerKind.KV_BLOCK, f"filler-{i}").encode()
                    )
                    if entry is not None and entry.tier == Tier.DRAM:
                        seen_regions.append((entry.loc, entry.size))
                    daemon.maintain(compact=False)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        workers = [threading.Thread(target=churn)]
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers):
            assert bytes(view) == value  # the reader's bytes never change
        for w in workers:
            w.join()
        assert not errors, errors
        assert bytes(view) == value
        assert seen_regions and not any(overlaps(region, r) for r in seen_regions)
        used_while_leased = dram.used_bytes

        stub.Release(dataplane_pb2.ReleaseRequest(lease_ids=[lease.lease_id]))
        assert dram.used_bytes < used_while_leased  # the deferred free happened at release
        del view
        arena.close()


def test_a_read_lease_expires_and_its_region_is_reclaimed(daemon: Daemon, client: Client) -> None:
    client.put(Kind.KV_BLOCK, "short", b"\x11" * MiB)
    dp = daemon.dataplane
    assert dp is not None
    with dataplane_stub(daemon) as stub:
        reply = stub.Lease(dataplane_pb2.LeaseRequest(keys=[key("short")], ttl_ms=50))
        lease_id = reply.leases[0].lease_id
        client.delete(Kind.KV_BLOCK, "short")  # the free waits for the lease
        dram = daemon.store.memory[Tier.DRAM]
        assert dram.used_bytes >= MiB
        time.sleep(0.06)
        daemon.maintain(compact=False)
        assert len(dp.leases) == 0 and dram.used_bytes == 0
        check(
            rpc_error(stub.Release, dataplane_pb2.ReleaseRequest(lease_ids=[lease_id])),
            grpc.StatusCode.FAILED_PRECONDITION,
            "expired",
        )


def test_a_write_lease_expires_and_nothing_is_stored(daemon: Daemon, client: Client) -> None:
    dram = daemon.store.memory[Tier.DRAM]
    with dataplane_stub(daemon) as stub:
        reply = stub.Reserve(
            dataplane_pb2.ReserveRequest(objects=[header("unfinished", MiB)], ttl_ms=50)
        )
        assert dram.used_bytes == dram.cost_of(MiB)  # the value and its arena rounding
        wait_for(lambda: dram.used_bytes == 0, "the background worker to reap the write lease")
        check(
            rpc_error(
                stub.Commit,
                dataplane_pb2.CommitRequest(
                    items=[dataplane_pb2.CommitItem(lease_id=reply.leases[0].lease_id)]
                ),
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
            "expired",
        )
    with pytest.raises(NotFoundError):
        client.stat(Kind.KV_BLOCK, "unfinished")


def test_reserve_write_in_place_commit_is_a_put(daemon: Daemon, client: Client) -> None:
    with dataplane_stub(daemon) as stub:
        arena = arena_of(stub)
        reply = stub.Reserve(dataplane_pb2.ReserveRequest(objects=[header("direct", MiB)]))
        (lease,) = reply.leases
        arena.region(lease.offset, lease.length)[:] = 0x42
        done = stub.Commit(
            dataplane_pb2.CommitRequest(items=[dataplane_pb2.CommitItem(lease_id=lease.lease_id)])
        )
        assert done.metas[0].key.key == "direct" and done.metas[0].tier == common_pb2.DRAM
        arena.close()
    assert client.get(Kind.KV_BLOCK, "direct") == b"\x42" * MiB
    entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.KV_BLOCK, "direct").encode())
    assert entry is not None and entry.loc == lease.offset  # committed in place, no copy


def test_bad_shm_requests_get_clear_statuses(daemon: Daemon, client: Client) -> None:
    client.put(Kind.KV_BLOCK, "kept", b"\x33" * MiB)
    other = (("authorization", "Bearer someone-else"),)
    with dataplane_stub(daemon) as stub:
        reserve = dataplane_pb2.ReserveRequest
        commit = dataplane_pb2.CommitRequest
        item = dataplane_pb2.CommitItem
        # commit without reserve: an id the daemon never issued
        check(
            rpc_error(stub.Commit, commit(items=[item(lease_id=0xDEADBEEF)])),
            grpc.StatusCode.NOT_FOUND,
            "unknown",
        )
        check(
            rpc_error(stub.Release, dataplane_pb2.ReleaseRequest(lease_ids=[0xDEADBEEF])),
            grpc.StatusCode.NOT_FOUND,
            "unknown",
        )
        # committing a read lease
        read = stub.Lease(dataplane_pb2.LeaseRequest(keys=[key("kept")])).leases[0]
        check(
            rpc_error(stub.Commit, commit(items=[item(lease_id=read.lease_id)])),
            grpc.StatusCode.FAILED_PRECONDITION,
            "read lease",
        )
        # another client's lease
        check(
            rpc_error(
                stub.Release,
                dataplane_pb2.ReleaseRequest(lease_ids=[read.lease_id]),
                metadata=other,
            ),
            grpc.StatusCode.PERMISSION_DENIED,
            "another client",
        )
        stub.Release(dataplane_pb2.ReleaseRequest(lease_ids=[read.lease_id]))
        # double commit
        w = stub.Reserve(reserve(objects=[header("twice", 64 << 10)])).leases[0]
        stub.Commit(commit(items=[item(lease_id=w.lease_id)]))
        check(
            rpc_error(stub.Commit, commit(items=[item(lease_id=w.lease_id)])),
            grpc.StatusCode.FAILED_PRECONDITION,
            "already committed",
        )
        # oversize: larger than the object limit (a size cap: RESOURCE_EXHAUSTED),
        # larger than the arena, too small for it (a BLOB: a KV block of 65 MiB is
        # over kv.max_block_bytes first)
        for size, code, words in (
            (1 << 40, grpc.StatusCode.RESOURCE_EXHAUSTED, "limits.max_object_bytes"),
            (65 * MiB, grpc.StatusCode.INVALID_ARGUMENT, "arena holds at most"),
            (100, grpc.StatusCode.INVALID_ARGUMENT, "below"),
        ):
            blob = object_pb2.PutHeader(key=key("odd", common_pb2.BLOB), size_bytes=size)
            check(rpc_error(stub.Reserve, reserve(objects=[blob])), code, words)
        check(
            rpc_error(stub.Reserve, reserve(objects=[header("odd", 65 * MiB)])),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "kv.max_block_bytes",
        )
        check(
            rpc_error(stub.Reserve, reserve()),
            grpc.StatusCode.INVALID_ARGUMENT,
            "names no objects",
        )
        # a checksum that does not match the bytes written: DATA_LOSS, nothing stored
        w = stub.Reserve(reserve(objects=[header("wrong", 64 << 10)])).leases[0]
        bad = common_pb2.Checksum(algorithm=common_pb2.XXH3_64, value=1)
        check(
            rpc_error(stub.Commit, commit(items=[item(lease_id=w.lease_id, checksum=bad)])),
            grpc.StatusCode.DATA_LOSS,
            "nothing was stored",
        )
        # a batch with one bad key reserves nothing
        used = daemon.store.memory[Tier.DRAM].used_bytes
        bad_key = dataplane_pb2.ReserveRequest(
            objects=[
                header("fine", MiB),
                object_pb2.PutHeader(key=common_pb2.ObjectKey(), size_bytes=MiB),
            ]
        )
        check(rpc_error(stub.Reserve, bad_key), grpc.StatusCode.INVALID_ARGUMENT, "namespace")
        assert daemon.store.memory[Tier.DRAM].used_bytes == used
    with pytest.raises(NotFoundError):
        client.stat(Kind.KV_BLOCK, "wrong")
    assert client.get(Kind.KV_BLOCK, "kept") == b"\x33" * MiB
    # The client releases read leases without waiting for the answer: give the
    # last release a moment to land before checking nothing is left leased.
    assert daemon.dataplane is not None
    deadline = time.monotonic() + 10
    while len(daemon.dataplane.leases) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(daemon.dataplane.leases) == 0


def test_without_sessions_shm_read_leases_are_released_by_one_thread_of_the_client(
    make_daemon: Callable[..., Daemon],
) -> None:
    """(With bulk sessions the releases go on the session instead:
    test_shared_memory_control_rides_the_bulk_session.py.)"""
    daemon = make_daemon(dataplane={"bulk": {"sessions": False}})
    client = Client(daemon.address)
    names = [f"rel-{i}" for i in range(4)]
    for n in names:
        client.put(Kind.KV_BLOCK, n, np.full(MiB, 5, dtype=np.uint8))
    refs = [ObjectRef(Kind.KV_BLOCK, n) for n in names]

    def releasers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "tiermem-release"}

    others = releasers()  # other clients' (tests share the process)
    for _ in range(20):
        got = client.dataplane.get_many(refs, path="shm")
        assert [bytes(f.data[:1]) for f in got] == [b"\x05"] * 4
    # every read's leases end without the caller waiting, sent by one thread
    wait_for(lambda: len(daemon.dataplane.shm._leases) == 0, "the leases to be released")
    assert len(releasers() - others) == 1
    client.close()  # sends what is queued, and the thread stops
    assert not releasers() - others
