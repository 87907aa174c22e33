"""A client on the daemon's host uploads through a ring of slots in the daemon's
arena (ShmUpload): byte-exact, resumable, bad messages refused with nothing
stored past the acknowledged offset, and the daemon hashes what it wrote to its
staging file, never a slot the client may already be refilling."""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from tests.blobs.helpers import MiB, pattern
from tests.blobs.test_upload_writes_and_hashes_overlap_and_roll_back_on_failure import (
    header,
    table,
)
from tiermem.client import Client
from tiermem.client.fastpath.shm import Arena
from tiermem.server.app import Daemon
from tiermem.v1 import blob_records_pb2 as rec_pb
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc, dataplane_pb2, dataplane_pb2_grpc

Start = blobs_pb2.ShmUploadRequest.Start
Unit = blobs_pb2.ShmUploadRequest.Unit


def start(upload_id: str, offset: int = 0) -> blobs_pb2.ShmUploadRequest:
    return blobs_pb2.ShmUploadRequest(start=Start(upload_id=upload_id, offset=offset))


def unit(slot: int, length: int) -> blobs_pb2.ShmUploadRequest:
    return blobs_pb2.ShmUploadRequest(unit=Unit(slot=slot, length=length))


def stub(daemon: Daemon) -> blobs_pb2_grpc.BlobServiceStub:
    return blobs_pb2_grpc.BlobServiceStub(grpc.insecure_channel(daemon.address))


def arena(daemon: Daemon) -> Arena:
    hello = dataplane_pb2_grpc.DataPlaneServiceStub(grpc.insecure_channel(daemon.address)).Hello(
        dataplane_pb2.HelloRequest()
    )
    return Arena(hello.arena)


def test_a_blob_larger_than_the_ring_uploads_byte_exact(client: Client) -> None:
    data = pattern(37 * MiB + 11, seed=70)  # more than the ring's 4 slots of 8 MiB
    info = client.blobs.put("ring.bin", data, path="shm")
    assert info.sha256 == hashlib.sha256(data).digest()
    assert client.path_stats()["shm"] == {
        "puts": 1, "gets": 0, "put_bytes": len(data), "get_bytes": 0,
    }  # fmt: skip
    assert client.blobs.get("ring.bin", path="grpc", verify="sha256") == data
    small = pattern(5 * MiB + 1, seed=71)  # past the inline limit, smaller than one slot
    client.blobs.put("small.bin", small)  # the default picks shared memory first
    assert client.path_stats()["shm"]["puts"] == 2
    assert client.blobs.get("small.bin", path="grpc") == small


def test_a_dropped_ring_stream_resumes_from_the_acknowledged_offset(
    daemon: Daemon, client: Client
) -> None:
    data = pattern(20 * MiB + 3, seed=72)
    upload_id = client.blobs.begin("resumed.bin", len(data)).upload_id
    ring_arena = arena(daemon)
    requests: queue.Queue[blobs_pb2.ShmUploadRequest] = queue.Queue()
    requests.put(start(upload_id))
    replies = stub(daemon).ShmUpload(iter(requests.get, None), timeout=30)
    ring = next(replies).ring
    region = ring_arena.region(ring.lease.offset, ring.lease.length)
    region[: 8 * MiB] = np.frombuffer(data[: 8 * MiB], np.uint8)
    requests.put(unit(0, 8 * MiB))
    assert next(replies).freed_slot == 0
    replies.cancel()  # the client goes away mid-upload
    deadline = time.monotonic() + 10
    while client.blobs.status(upload_id).acknowledged_offset < 8 * MiB:
        assert time.monotonic() < deadline  # the daemon notices and makes it durable
        time.sleep(0.02)
    status = client.blobs.status(upload_id)
    assert status.acknowledged_offset == 8 * MiB  # made durable when the stream ended
    info = client.blobs.resume(upload_id, data, path="shm")
    assert info.sha256 == hashlib.sha256(data).digest()
    assert client.blobs.get("resumed.bin", path="grpc") == data


def send(daemon: Daemon, messages: list[object], upload_id: str, data: bytes) -> None:
    """Send ``messages`` ("start" for the start) on a ShmUpload stream, putting the
    next bytes of ``data`` in each unit's slot first; read the replies to the end."""
    ready = threading.Event()
    held: list[np.ndarray[Any, Any]] = []

    def requests() -> Iterator[blobs_pb2.ShmUploadRequest]:
        pos, started = 0, False
        for m in messages:
            if m == "start":
                started = True
                yield start(upload_id)
                continue
            assert isinstance(m, blobs_pb2.ShmUploadRequest)
            if started and ready.wait(10) and held:
                n = min(m.unit.length, len(data) - pos)
                at = m.unit.slot * 8 * MiB
                if n > 0 and at + n <= len(held[0]):
                    held[0][at : at + n] = np.frombuffer(data[pos : pos + n], np.uint8)
                pos += m.unit.length
            yield m

    ring_arena = arena(daemon)
    replies = stub(daemon).ShmUpload(requests(), timeout=30)
    try:
        for reply in replies:
            if reply.HasField("ring"):
                held.append(ring_arena.region(reply.ring.lease.offset, reply.ring.lease.length))
                ready.set()
    finally:
        ready.set()


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([unit(0, MiB)], "must be `start`"),
        (["start", unit(7, MiB)], "slot 7 is not one of the ring's"),
        (["start", unit(0, 0)], "does not fit a slot"),
        (["start", unit(0, 9 * MiB)], "does not fit a slot"),
        (["start", "start"], "only `unit` messages may follow"),
        (["start", unit(0, 8 * MiB), unit(1, 8 * MiB)], "runs past the announced"),
    ],
)
def test_bad_ring_messages_are_invalid_and_keep_what_was_acknowledged(
    daemon: Daemon, client: Client, messages: list[object], says: str
) -> None:
    data = pattern(12 * MiB, seed=73)
    upload_id = client.blobs.begin("bad.bin", len(data)).upload_id
    with pytest.raises(grpc.RpcError) as err:
        send(daemon, messages, upload_id, data)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in (err.value.details() or "")
    # what arrived before the bad message is kept; the upload still completes
    assert client.blobs.status(upload_id).acknowledged_offset in (0, 8 * MiB)
    info = client.blobs.resume(upload_id, data, path="shm")
    assert info.sha256 == hashlib.sha256(data).digest()
    assert client.blobs.get("bad.bin", path="grpc") == data


def test_the_daemon_hashes_what_it_wrote_not_the_slot(tmp_path: Path) -> None:
    records: list[rec_pb.UploadRecord] = []
    uploads = table(tmp_path, records)
    data = pattern(3 * MiB, seed=74)
    upload = uploads.begin(header(len(data)), "")
    slot = bytearray(MiB)
    with uploads.writing(upload.upload_id, "") as up:
        up.map_file()
        for start_at in range(0, len(data), MiB):
            slot[:] = data[start_at : start_at + MiB]
            freed: list[bool] = []

            def scribble(freed: list[bool] = freed) -> None:  # refilled as soon as it may
                slot[:] = b"\xff" * MiB
                freed.append(True)

            uploads.write_shared(up, memoryview(slot), scribble)
            up.writer.drain()  # type: ignore[union-attr]
            assert freed == [True]
    upload.unmap_file()
    digest, _sums = upload.hashed().finish()
    assert digest == hashlib.sha256(data).digest()
    assert upload.path.read_bytes() == data
