"""Every limit answers RESOURCE_EXHAUSTED (or DEADLINE_EXCEEDED) with a message
naming it, and the refused request changes nothing: namespace quotas, the
process-wide in-flight byte budget, per-namespace concurrency and in-flight
bytes, put hooks (session quotas), the server's own request deadline, size caps
(objects, KV blocks and batches, blobs), the largest gRPC message, RPCs in
flight, open sessions, the scratchpad buffer, vector collections, the data
plane's pending bytes and the blob store's stored bytes. Each is exceeded
through the gRPC API against a daemon configured with a small value."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import torch

from tiermem.client import (
    Client,
    InvalidArgumentError,
    Kind,
    KvBlock,
    KvScope,
    RecordKind,
    TiermemClientError,
)
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded
from tiermem.server.scratch import service as scratch_service
from tiermem.v1 import common_pb2, dataplane_pb2, dataplane_pb2_grpc, object_pb2, object_pb2_grpc

MiB = 1 << 20


def refused(fn: Callable[[], object]) -> str:
    with pytest.raises(TiermemClientError) as info:
        fn()
    assert info.value.code == "RESOURCE_EXHAUSTED", info.value
    return info.value.message


class HeldPut:
    """A Put stream that sends its header and ``first`` bytes, then waits."""

    def __init__(
        self, address: str, namespace: str, key: str, size: int, first: int = 0,
        timeout_s: float | None = 30,
    ) -> None:  # fmt: skip
        self.release = threading.Event()
        self.sent_header = threading.Event()
        self.error: grpc.RpcError | None = None
        self.reply: object_pb2.PutResponse | None = None
        self._channel = grpc.insecure_channel(address)
        stub = object_pb2_grpc.ObjectServiceStub(self._channel)
        ok = common_pb2.ObjectKey(namespace=namespace, kind=common_pb2.BLOB, key=key)

        def messages() -> Iterator[object_pb2.PutRequest]:
            yield object_pb2.PutRequest(header=object_pb2.PutHeader(key=ok, size_bytes=size))
            if first:
                yield object_pb2.PutRequest(chunk=b"x" * first)
            self.sent_header.set()
            self.release.wait(60)
            yield object_pb2.PutRequest(chunk=b"x" * (size - first))

        def run() -> None:
            try:
                self.reply = stub.Put(messages(), timeout=timeout_s)
            except grpc.RpcError as exc:
                self.error = exc

        self._thread = threading.Thread(target=run)
        self._thread.start()
        self.sent_header.wait(30)

    def finish(self) -> None:
        self.release.set()
        self._thread.join(60)
        self._channel.close()


def wait_admitted(daemon: Daemon, nbytes: int) -> None:
    """The held put reached the service (its bytes count against the budget)."""
    for _ in range(3000):
        if daemon.store.guard.inflight_bytes >= nbytes:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the held put was never admitted")


def test_namespace_quota_of_bytes_and_objects(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(
        namespaces=["default", "small"],
        limits={"namespaces": {"small": {"max_bytes": 10_000, "max_objects": 3}}},
    )
    with Client(daemon.address, namespace="small", retries=0) as c:
        c.put(Kind.BLOB, "a", b"a" * 6000)
        message = refused(lambda: c.put(Kind.BLOB, "b", b"b" * 6000))
        assert "quota" in message and "max_bytes=10000" in message
        c.put(Kind.BLOB, "a", b"A" * 9000)  # an overwrite adds only the difference
        c.put(Kind.BLOB, "b", b"b" * 1000)
        assert refused(lambda: c.put(Kind.BLOB, "c", b"c" * 1))  # 10 000 bytes held
        c.delete(Kind.BLOB, "a")
        c.put(Kind.BLOB, "c", b"c" * 10)
        c.put(Kind.BLOB, "d", b"d" * 10)
        message = refused(lambda: c.put(Kind.BLOB, "e", b"e"))
        assert "max_objects is 3" in message
        c.put(Kind.BLOB, "d", b"D" * 20)  # overwriting adds no object
        assert sorted(o.key for o in c.list()) == ["b", "c", "d"]
        assert c.get(Kind.BLOB, "d") == b"D" * 20
        # Other namespaces are unlimited.
        c.put(Kind.BLOB, "big", b"x" * 50_000, namespace="default")
    daemon.stop()
    again = make_daemon(
        name="d", namespaces=["default", "small"],
        limits={"namespaces": {"small": {"max_bytes": 10_000, "max_objects": 3}}},
    )  # fmt: skip
    with Client(again.address, namespace="small", retries=0) as c:  # usage is recovered
        assert "max_objects is 3" in refused(lambda: c.put(Kind.BLOB, "e", b"e"))


def test_in_flight_byte_budget_refuses_instead_of_running_out_of_memory(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(limits={"max_inflight_bytes": 4 * MiB, "max_object_bytes": 4 * MiB})
    held = HeldPut(daemon.address, "default", "huge-1", 3 * MiB, first=MiB)
    try:
        wait_admitted(daemon, 3 * MiB)
        with Client(daemon.address, retries=0) as c:
            message = refused(lambda: c.put(Kind.BLOB, "huge-2", b"y" * (2 * MiB)))
            assert "limits.max_inflight_bytes" in message
            c.put(Kind.BLOB, "small", b"s" * 1000)  # what fits still goes through
            held.finish()
            assert held.error is None
            c.put(Kind.BLOB, "huge-2", b"y" * (2 * MiB))
            assert c.get(Kind.BLOB, "huge-1") == b"x" * (3 * MiB)
    finally:
        held.finish()
    assert daemon.store.guard.inflight_bytes == 0


def test_one_namespace_cannot_take_every_request_slot(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(
        namespaces=["default", "greedy"],
        limits={"namespaces": {"greedy": {"max_concurrent_rpcs": 1, "max_inflight_bytes": MiB}}},
    )
    held = HeldPut(daemon.address, "greedy", "slow", 1000)
    try:
        wait_admitted(daemon, 1000)
        with Client(daemon.address, namespace="greedy", retries=0) as c:
            message = refused(lambda: c.stat(Kind.BLOB, "anything"))
            assert "greedy" in message and "max_concurrent_rpcs=1" in message
            c.put(Kind.BLOB, "other-tenant", b"fine", namespace="default")
            assert c.get(Kind.BLOB, "other-tenant", namespace="default") == b"fine"
        held.finish()
        assert held.error is None
        with Client(daemon.address, namespace="greedy", retries=0) as c:
            assert c.get(Kind.BLOB, "slow") == b"x" * 1000
            message = refused(lambda: c.put(Kind.BLOB, "too-big", b"z" * (MiB + 1)))
            assert "max_inflight_bytes" in message
    finally:
        held.finish()


def test_put_hooks_can_refuse_for_example_a_session_quota(daemon: Daemon) -> None:
    def session_quota(namespace: str, session: str, nbytes: int, objects: int) -> None:
        if session == "capped" and nbytes > 100:
            raise CapacityExceeded(f"session {session!r} quota: at most 100 bytes per put")

    daemon.store.guard.add_put_hook(session_quota)
    with Client(daemon.address, retries=0) as c:
        c.put(Kind.SCRATCH, "ok", b"x" * 100, session="capped")
        assert "session 'capped' quota" in refused(
            lambda: c.put(Kind.SCRATCH, "no", b"x" * 101, session="capped")
        )
        c.put(Kind.SCRATCH, "free", b"x" * 101, session="other")
        assert sorted(o.key for o in c.list(kind=Kind.SCRATCH)) == ["free", "ok"]


def test_server_deadline_ends_stalled_and_slow_streams(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(limits={"max_request_s": 1.0})
    # A stream that stalls after its header, with no client deadline: cancelled.
    stalled = HeldPut(daemon.address, "default", "stalled", 100_000, timeout_s=None)
    stalled._thread.join(30)
    assert stalled.error is not None and stalled.error.code() == grpc.StatusCode.CANCELLED
    stalled.finish()

    # A stream that keeps sending, too slowly: DEADLINE_EXCEEDED with a message.
    channel = grpc.insecure_channel(daemon.address)
    stub = object_pb2_grpc.ObjectServiceStub(channel)
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="slow")
    stop = threading.Event()

    def slow() -> Iterator[object_pb2.PutRequest]:
        yield object_pb2.PutRequest(header=object_pb2.PutHeader(key=key, size_bytes=1000))
        for _ in range(999):
            if stop.wait(0.1):
                return
            yield object_pb2.PutRequest(chunk=b"z")

    with pytest.raises(grpc.RpcError) as info:
        stub.Put(slow())
    stop.set()
    channel.close()
    err: grpc.RpcError = info.value  # type: ignore[assignment]
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err
    assert "max_request_s" in (err.details() or "")
    assert daemon.store.guard.inflight_bytes == 0
    with Client(daemon.address, retries=0) as c:
        assert not list(c.list())  # neither put stored anything
        assert c.stats().tiers[0].used_bytes == 0


def test_size_caps_answer_resource_exhausted_and_malformed_sizes_invalid_argument(
    make_daemon: Callable[..., Daemon],
) -> None:
    """Each size cap (object, KV block, PutBlocks batch, blob) answers RESOURCE_EXHAUSTED
    naming its option; a size that does not match its declared shape stays
    INVALID_ARGUMENT; nothing already stored is lost and nothing refused is stored."""
    daemon = make_daemon(
        limits={"max_object_bytes": 64 << 10},
        kv={"max_block_bytes": 16 << 10, "max_batch_bytes": 24 << 10},
        blobs={"max_blob_bytes": 32 << 10},
    )
    scope = KvScope("caps", dtype="float32")
    with Client(daemon.address, retries=0) as c:
        c.put(Kind.BLOB, "kept", b"k" * (64 << 10))  # exactly at the limit
        c.kv.put_blocks(scope, [KvBlock(1, torch.zeros(4096))])  # 16 KiB: at the limit
        c.blobs.put("kept-blob", b"b" * (32 << 10))

        assert "limits.max_object_bytes" in refused(
            lambda: c.put(Kind.BLOB, "big", b"x" * ((64 << 10) + 1))
        )
        assert "kv.max_block_bytes" in refused(
            lambda: c.kv.put_blocks(scope, [KvBlock(2, torch.zeros(4097))], path="grpc")
        )
        two = [KvBlock(3, torch.zeros(4096)), KvBlock(4, torch.zeros(4096))]  # 32 KiB
        assert "kv.max_batch_bytes" in refused(lambda: c.kv.put_blocks(scope, two, path="grpc"))
        assert "blobs.max_blob_bytes" in refused(
            lambda: c.blobs.put("big-blob", b"x" * ((32 << 10) + 1))
        )
        with pytest.raises(InvalidArgumentError, match=r"float32\[3\] is 12 bytes"):
            c.kv.put_blocks(scope, [KvBlock(5, b"\0" * 16, dtype="float32", shape=(3,))])

        assert sorted(o.key for o in c.list(kind=Kind.BLOB)) == ["kept"]
        assert c.get(Kind.BLOB, "kept") == b"k" * (64 << 10)
        assert c.kv.lookup_prefix(scope, [1]).stored_chunks == 1
        assert not any(b.found for b in c.kv.get_blocks(scope, [2, 3, 4, 5]))
        assert [b.key for b in c.blobs.list()] == ["kept-blob"]
        assert c.blobs.get("kept-blob") == b"b" * (32 << 10)


def raw_status(fn: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    err: grpc.RpcError = info.value  # type: ignore[assignment]
    return err.code(), err.details() or ""


def test_a_message_over_server_max_message_bytes_is_refused(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(server={"max_message_bytes": MiB, "chunk_bytes": 256 << 10})
    with Client(daemon.address, retries=0) as c:
        c.put(Kind.BLOB, "kept", b"k" * (3 * MiB))  # streamed in chunks under the limit
    channel = grpc.insecure_channel(daemon.address)
    stub = object_pb2_grpc.ObjectServiceStub(channel)
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="kept")
    one_chunk = [
        object_pb2.PutRequest(header=object_pb2.PutHeader(key=key, size_bytes=2 * MiB)),
        object_pb2.PutRequest(chunk=b"x" * (2 * MiB)),  # one message over the limit
    ]
    code, details = raw_status(lambda: stub.Put(iter(one_chunk), timeout=30))
    channel.close()
    # gRPC refuses it before the daemon sees it; its message names the limit's value
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert str(MiB) in details, details
    with Client(daemon.address, retries=0) as c:
        assert c.get(Kind.BLOB, "kept") == b"k" * (3 * MiB)
    assert daemon.store.guard.inflight_bytes == 0


def test_rpcs_beyond_server_max_concurrent_rpcs_are_refused(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(server={"max_concurrent_rpcs": 2})
    with Client(daemon.address, retries=0) as c:
        c.put(Kind.BLOB, "kept", b"kept")
    held = [HeldPut(daemon.address, "default", f"slow-{i}", 1000) for i in range(2)]
    try:
        wait_admitted(daemon, 2000)
        channel = grpc.insecure_channel(daemon.address)
        stub = object_pb2_grpc.ObjectServiceStub(channel)
        key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="kept")
        code, details = raw_status(lambda: stub.Stat(object_pb2.StatRequest(key=key), timeout=30))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "oncurrent RPC limit" in details, details  # gRPC's words
        for h in held:
            h.finish()
            assert h.error is None
        stub.Stat(object_pb2.StatRequest(key=key), timeout=30)  # room again
        channel.close()
    finally:
        for h in held:
            h.finish()
    with Client(daemon.address, retries=0) as c:
        assert c.get(Kind.BLOB, "kept") == b"kept"
        assert sorted(o.key for o in c.list()) == ["kept", "slow-0", "slow-1"]


def test_sessions_beyond_agent_sessions_max_open_are_refused(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(agent={"scratch": {"embedder": "hash"}, "sessions": {"max_open": 2}})
    with Client(daemon.address, retries=0) as c:
        first = c.sessions.open(label="one")
        c.sessions.open(label="two")
        c.scratch.append(first.id, RecordKind.THOUGHT, "kept")
        message = refused(lambda: c.sessions.open(label="three"))
        assert "agent.sessions.max_open" in message, message
        assert len(c.sessions.list()) == 2
        assert [r.payload for r in c.scratch.replay(first.id)] == [b"kept"]
        c.sessions.close(first.id)
        c.sessions.open(label="three")  # a closed session frees its place


class _BlockedCommits:
    """The scratchpad's RocksDB handle with every batch commit held until ``go``."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.go = threading.Event()
        self.waiting = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def batch(self) -> Any:
        real, outer = self._real.batch(), self

        class _Batch:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def commit(self, *args: Any, **kwargs: Any) -> None:
                outer.waiting.set()
                outer.go.wait(60)
                real.commit(*args, **kwargs)

        return _Batch()


def test_appends_past_agent_scratch_max_buffer_bytes_are_refused_when_flushing_is_stuck(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon waits (30 s) for a flush to make room before it refuses; 1 s here.
    monkeypatch.setattr(scratch_service, "_BACKPRESSURE_WAIT_S", 1.0)
    daemon = make_daemon(
        agent={"scratch": {"embedder": "hash", "flush_interval_s": 60.0,
                           "max_buffer_bytes": 64 << 10}},
    )  # fmt: skip
    big = "x" * (100 << 10)
    with Client(daemon.address, retries=0) as c:
        session = c.sessions.open(label="writer")
        kept = c.scratch.append(session.id, RecordKind.THOUGHT, "flushed")
        c.scratch.flush()
        blocked = _BlockedCommits(daemon.scratch.rocks)
        daemon.scratch.rocks = blocked  # type: ignore[assignment]
        try:
            first = c.scratch.append(session.id, RecordKind.THOUGHT, big)  # fills the buffer
            # the next one wakes a flush (which takes the buffer and then hangs) and fits
            second = c.scratch.append(session.id, RecordKind.THOUGHT, big + "2")
            assert blocked.waiting.wait(30)
            message = refused(lambda: c.scratch.append(session.id, RecordKind.THOUGHT, "no"))
            assert "agent.scratch.max_buffer_bytes" in message, message
        finally:
            blocked.go.set()
            daemon.scratch.rocks = blocked._real  # type: ignore[assignment]
        c.scratch.flush()
        replayed = c.scratch.replay(session.id)
        assert [r.id for r in replayed] == [kept, first, second]
        assert [r.payload for r in replayed] == [b"flushed", big.encode(), (big + "2").encode()]


def test_collections_beyond_vectors_max_collections_are_refused(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(vectors={"max_collections": 1})
    with Client(daemon.address, retries=0) as c:
        c.vectors.create("first", 4)
        c.vectors.upsert("first", [1, 2], np.eye(2, 4, dtype=np.float32))
        message = refused(lambda: c.vectors.create("second", 4))
        assert "vectors.max_collections" in message, message
        found = c.vectors.search("first", np.eye(1, 4, dtype=np.float32), k=2)
        assert found.ids[0].tolist() == [1, 2]
        assert [info.name for info in c.vectors.list()] == ["first"]


def test_reservations_beyond_dataplane_max_pending_bytes_are_refused(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dataplane={"max_pending_bytes": MiB})
    with Client(daemon.address, retries=0, fast_paths=("grpc",)) as c:
        c.put(Kind.BLOB, "kept", b"k" * 1000)
    channel = grpc.insecure_channel(daemon.address)
    stub = dataplane_pb2_grpc.DataPlaneServiceStub(channel)

    def reserve(name: str) -> dataplane_pb2.ReserveResponse:
        key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key=name)
        head = object_pb2.PutHeader(key=key, size_bytes=600 << 10)
        return stub.Reserve(dataplane_pb2.ReserveRequest(objects=[head]), timeout=30)

    try:
        held = reserve("pending")
        code, details = raw_status(lambda: reserve("one-too-many"))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "dataplane.max_pending_bytes" in details, details
        with Client(daemon.address, retries=0) as c:  # the client takes the next path
            c.put(Kind.BLOB, "meanwhile", b"m" * (600 << 10))
        stub.Release(dataplane_pb2.ReleaseRequest(lease_ids=[held.leases[0].lease_id]))
        reserve("after")  # room again
    finally:
        channel.close()
    with Client(daemon.address, retries=0) as c:
        assert c.get(Kind.BLOB, "kept") == b"k" * 1000
        assert c.get(Kind.BLOB, "meanwhile") == b"m" * (600 << 10)
        assert sorted(o.key for o in c.list()) == ["kept", "meanwhile"]


def test_blobs_beyond_blobs_max_stored_bytes_are_refused(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(blobs={"max_stored_bytes": 100_000})
    with Client(daemon.address, retries=0) as c:
        c.blobs.put("kept", b"k" * 60_000)
        message = refused(lambda: c.blobs.put("over", b"o" * 60_000))
        assert "blobs.max_stored_bytes" in message, message
        assert [b.key for b in c.blobs.list()] == ["kept"]
        assert c.blobs.get("kept") == b"k" * 60_000
        c.blobs.put("fits", b"f" * 40_000)
        assert sorted(b.key for b in c.blobs.list()) == ["fits", "kept"]
