"""A bulk client that keeps reading a reply a few KiB at a time is cut off once
the whole reply has taken ``max(io_timeout_s, bytes / min_send_bytes_per_s)``
(plus up to two send timeouts), and what the reply held is given back; a
client reading at full speed gets every byte.

Before, only each send was bounded (``io_timeout_s``, the kernel's send
timeout): a trickle keeps every send moving, so a get's or a blob stream
out's connection (and its read leases and byte budget) was held for as long
as the client kept reading, here minutes for 16 MiB.

The bounds are generous: with these settings the cut comes after about 8 s;
the test waits up to 40 s for it, and the trickle alone would take over a
minute to read the reply.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from tests.integration.dataplane.helpers import (
    dataplane_stub,
    key,
    recv_exact,
    wait_for,
)
from tests.integration.dataplane.trickle import (
    IO_TIMEOUT_S,
    MIN_RATE,
    SIZE,
    present,
    trickle,
)
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc, dataplane_pb2


@pytest.fixture
def slow_daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon(
        dataplane={
            "bulk": {
                "io_timeout_s": IO_TIMEOUT_S,
                "min_send_bytes_per_s": MIN_RATE,
                # small kernel buffers, so the trickle is what the sends wait on
                "send_buffer_bytes": 64 << 10,
            }
        }
    )


def test_a_get_read_as_a_trickle_is_cut_off_and_releases_its_read(
    slow_daemon: Daemon,
) -> None:
    dp = slow_daemon.dataplane
    assert dp is not None
    with Client(slow_daemon.address, timeout_s=30) as c:
        c.put(Kind.KV_BLOCK, "big", b"\x07" * SIZE)
    with dataplane_stub(slow_daemon) as stub:
        ticket = stub.BeginGet(dataplane_pb2.BeginGetRequest(keys=[key("big")]))
    got, seconds, cut = trickle(present(ticket.address, ticket.ticket_id))
    assert cut, f"still sending after {seconds:.0f} s ({got} of {SIZE} bytes read)"
    assert got < SIZE
    wait_for(lambda: dp.budget.used_bytes == 0, "the cut get to give back its bytes")
    assert slow_daemon.store.leases.active == 0
    broken = slow_daemon.metrics.bulk_transfers.labels("get", "broken")._value.get()
    assert broken == 1


def test_a_blob_stream_out_read_as_a_trickle_is_cut_off(slow_daemon: Daemon) -> None:
    with Client(slow_daemon.address, timeout_s=30) as c:
        c.blobs.put("big", b"\x05" * SIZE)
    channel = grpc.insecure_channel(slow_daemon.address)
    try:
        reply = blobs_pb2_grpc.BlobServiceStub(channel).OpenDownload(
            blobs_pb2.OpenDownloadRequest(
                ref=blobs_pb2.BlobRef(namespace="default", key="big"), paths=["bulk"]
            )
        )
    finally:
        channel.close()
    assert reply.WhichOneof("grant") == "bulk"
    got, seconds, cut = trickle(present(reply.bulk.address, reply.bulk.ticket_id))
    assert cut, f"still streaming after {seconds:.0f} s ({got} of {SIZE} bytes read)"
    assert got < SIZE
    broken = slow_daemon.metrics.bulk_transfers.labels("get", "broken")._value.get()
    assert broken == 1


def test_replies_read_at_full_speed_arrive_whole(slow_daemon: Daemon) -> None:
    value = bytes(range(256)) * (SIZE // 256)
    with Client(slow_daemon.address, timeout_s=30) as c:
        c.put(Kind.KV_BLOCK, "big", value)
        c.blobs.put("blob", value)
    with dataplane_stub(slow_daemon) as stub:
        ticket = stub.BeginGet(dataplane_pb2.BeginGetRequest(keys=[key("big")]))
    sock = present(ticket.address, ticket.ticket_id)
    try:
        assert recv_exact(sock, SIZE) == value
    finally:
        sock.close()
    channel = grpc.insecure_channel(slow_daemon.address)
    try:
        reply = blobs_pb2_grpc.BlobServiceStub(channel).OpenDownload(
            blobs_pb2.OpenDownloadRequest(
                ref=blobs_pb2.BlobRef(namespace="default", key="blob"), paths=["bulk"]
            )
        )
    finally:
        channel.close()
    assert reply.WhichOneof("grant") == "bulk"
    assert reply.header.aligned_length == SIZE
    sock = present(reply.bulk.address, reply.bulk.ticket_id)
    try:
        assert recv_exact(sock, SIZE) == value
    finally:
        sock.close()
    assert slow_daemon.metrics.bulk_transfers.labels("get", "broken")._value.get() == 0
