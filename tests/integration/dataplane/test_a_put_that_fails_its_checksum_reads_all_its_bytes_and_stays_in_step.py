"""A put of several objects whose first object fails its checksum is refused
DATA_LOSS and stores nothing, and the daemon still reads every byte the put
announced: the connection carries the next request right after them, so a
value left unread would be parsed as a request (here: one whose bytes form a
Delete, which ran before the fix and deleted an object the caller never named).
On a bulk session and on a ticket's connection alike, the next request gets
its own answer."""

from __future__ import annotations

import socket

import pytest

from tests.integration.dataplane.helpers import dataplane_stub, header, key, read_status
from tiermem.client import Client, Kind, NotFoundError
from tiermem.client.fastpath.bulk import BulkPool
from tiermem.dataplane_wire import (
    FLAG_ACCEPT_WITH_RESULT,
    OP_DELETE,
    OP_PUT,
    OP_STAT,
    SESSION_TICKET,
    frame,
    preamble,
    request,
)
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2, dataplane_pb2, object_pb2

WRONG = common_pb2.Checksum(algorithm=common_pb2.XXH3_64, value=12345)  # type: ignore[arg-type]


def _session(daemon: Daemon) -> socket.socket:
    host, _, port = daemon.dataplane.transfers.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(preamble(SESSION_TICKET, b"") + frame(b""))
    assert read_status(sock).code == "OK"
    return sock


def test_a_session_put_failing_its_checksum_never_runs_its_values_as_requests(
    daemon: Daemon, client: Client
) -> None:
    client.put(Kind.KV_BLOCK, "victim", b"v" * 1000)
    # the put's second value happens to be the bytes of a session request
    delete = request(OP_DELETE, object_pb2.DeleteRequest(key=key("victim")).SerializeToString())
    put = dataplane_pb2.BeginPutRequest(
        objects=[header("first", 1000, checksum=WRONG), header("second", len(delete))]
    )
    with _session(daemon) as sock:
        sock.sendall(
            request(OP_PUT, put.SerializeToString(), FLAG_ACCEPT_WITH_RESULT)
            + b"\x01" * 1000
            + delete
        )
        assert read_status(sock).code == "OK"  # accepted ...
        final = read_status(sock)  # ... and refused once its bytes arrived
        assert final.code == "DATA_LOSS", final
        assert "checksum mismatch" in final.message
        # the same session answers the next request with that request's answer
        stat = object_pb2.StatRequest(key=key("victim"))
        sock.sendall(request(OP_STAT, stat.SerializeToString()))
        assert read_status(sock).code == "OK"
    assert client.get(Kind.KV_BLOCK, "victim") == b"v" * 1000
    for name in ("first", "second"):  # nothing of the refused put was stored
        with pytest.raises(NotFoundError):
            client.stat(Kind.KV_BLOCK, name)


def test_a_ticketed_put_failing_its_checksum_leaves_its_connection_usable(
    daemon: Daemon, client: Client
) -> None:
    value = bytes(range(256)) * 1200  # streamed, not inline
    client.put(Kind.KV_BLOCK, "present", value)
    pool = BulkPool(b"", io_timeout_s=5)
    try:
        with dataplane_stub(daemon) as stub:
            ticket = stub.BeginPut(
                dataplane_pb2.BeginPutRequest(
                    objects=[header("a", 1000, checksum=WRONG), header("b", 5000)]
                )
            )
            with pytest.raises(Exception, match="checksum mismatch"):
                pool.put(
                    ticket.address,
                    ticket.ticket_id,
                    [memoryview(b"\x01" * 1000), memoryview(b"\x02" * 5000)],
                )
            # the pooled connection carries the next ticket
            got = stub.BeginGet(
                dataplane_pb2.BeginGetRequest(keys=[key("present")], inline_max_bytes=1)
            )
            out = bytearray(len(value))
            pool.get(got.address, got.ticket_id, [memoryview(out)])
            assert bytes(out) == value
    finally:
        pool.close()
    for name in ("a", "b"):
        with pytest.raises(NotFoundError):
            client.stat(Kind.KV_BLOCK, name)
