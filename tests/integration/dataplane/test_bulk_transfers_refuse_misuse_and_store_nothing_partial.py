"""The bulk channel: a transfer cut off midway is an error that stores nothing;
tickets are single-use, expire, and only work for the credentials they were
issued to."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from tests.integration.dataplane.helpers import (
    MiB,
    check,
    dataplane_stub,
    header,
    key,
    present,
    read_status,
    recv_exact,
    rpc_error,
    wait_for,
)
from tiermem.client import Client, Kind, NotFoundError
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.server.app import Daemon
from tiermem.server.model import Tier
from tiermem.v1 import common_pb2, dataplane_pb2

TOKEN_A = (("authorization", "Bearer alice"),)


def dram_used(daemon: Daemon) -> int:
    return daemon.store.memory[Tier.DRAM].used_bytes


def test_a_put_cut_off_midway_stores_nothing_and_frees_its_space(
    daemon: Daemon, client: Client
) -> None:
    client.put(Kind.KV_BLOCK, "victim", b"old" * (100 << 10))  # an older version must survive
    used_before = dram_used(daemon)
    dp = daemon.dataplane
    assert dp is not None
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginPut(
            dataplane_pb2.BeginPutRequest(
                objects=[header("fresh", 4 * MiB), header("victim", 4 * MiB)]
            )
        )
        assert ticket.stream_bytes == 8 * MiB and len(ticket.objects) == 2
        sock, code = present(ticket)
        assert code == "OK"
        sock.sendall(b"\x01" * (4 * MiB))  # all of the first object
        sock.sendall(b"\x02" * (1 * MiB))  # a quarter of the second
        sock.close()
    wait_for(lambda: dp.budget.used_bytes == 0, "the broken put to give back its reservations")
    with pytest.raises(NotFoundError):
        client.stat(Kind.KV_BLOCK, "fresh")
    assert client.get(Kind.KV_BLOCK, "victim") == b"old" * (100 << 10)
    assert dram_used(daemon) == used_before
    assert daemon.metrics.bulk_transfers.labels("put", "broken")._value.get() == 1


def test_a_get_cut_off_midway_releases_its_leases(daemon: Daemon, client: Client) -> None:
    client.put(Kind.KV_BLOCK, "big", b"\x07" * (8 * MiB))
    dp = daemon.dataplane
    assert dp is not None
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginGet(dataplane_pb2.BeginGetRequest(keys=[key("big")]))
        assert dp.budget.used_bytes == 8 * MiB
        sock, code = present(ticket)
        assert code == "OK"
        recv_exact(sock, 1 * MiB)
        sock.close()
    wait_for(lambda: dp.budget.used_bytes == 0, "the broken get to release its read")
    assert daemon.store.leases.active == 0
    assert client.get(Kind.KV_BLOCK, "big") == b"\x07" * (8 * MiB)


def test_a_ticket_works_once(daemon: Daemon) -> None:
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginPut(dataplane_pb2.BeginPutRequest(objects=[header("once", 64 << 10)]))
        sock, code = present(ticket)
        assert code == "OK"
        sock.sendall(b"\x03" * (64 << 10))
        done = read_status(sock)
        assert done.code == "OK" and done.metas[0].key.key == "once"
        sock.close()
        again, code = present(ticket)
        again.close()
        assert code == "FAILED_PRECONDITION"


def test_a_ticket_is_refused_to_other_credentials_and_is_then_void(daemon: Daemon) -> None:
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginPut(
            dataplane_pb2.BeginPutRequest(objects=[header("bound", 64 << 10)]), metadata=TOKEN_A
        )
        for credential, refusal in (
            (b"", "PERMISSION_DENIED"),
            (b"Bearer mallory", "FAILED_PRECONDITION"),
        ):
            sock, code = present(ticket, credential)
            sock.close()
            assert code == refusal
        sock, code = present(ticket, b"Bearer alice")  # burnt by the first refusal
        sock.close()
        assert code == "FAILED_PRECONDITION"
    assert daemon.dataplane is not None and daemon.dataplane.budget.used_bytes == 0


def test_the_owner_with_its_credentials_succeeds(daemon: Daemon) -> None:
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginPut(
            dataplane_pb2.BeginPutRequest(objects=[header("mine", 64 << 10)]), metadata=TOKEN_A
        )
        sock, code = present(ticket, b"Bearer alice")
        assert code == "OK"
        sock.sendall(b"\x04" * (64 << 10))
        assert read_status(sock).code == "OK"
        sock.close()


def test_an_expired_ticket_is_refused_and_its_space_reclaimed(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dataplane={"bulk": {"ticket_ttl_s": 0.05}})
    dp = daemon.dataplane
    assert dp is not None
    with dataplane_stub(daemon) as stub:
        first = stub.BeginPut(dataplane_pb2.BeginPutRequest(objects=[header("late", 1 * MiB)]))
        second = stub.BeginPut(dataplane_pb2.BeginPutRequest(objects=[header("later", 1 * MiB)]))
        time.sleep(0.1)
        sock, code = present(first)
        sock.close()
        assert code == "FAILED_PRECONDITION"
        daemon.maintain(compact=False)  # the reaper ends the other one
        assert len(dp.transfers.tickets) == 0 and dp.budget.used_bytes == 0
        sock, code = present(second)
        sock.close()
        assert code == "FAILED_PRECONDITION"


def test_a_put_whose_checksum_does_not_match_stores_nothing(daemon: Daemon, client: Client) -> None:
    bad = common_pb2.Checksum(algorithm=common_pb2.XXH3_64, value=12345)
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginPut(
            dataplane_pb2.BeginPutRequest(objects=[header("damaged", 64 << 10, checksum=bad)])
        )
        sock, _code = present(ticket)
        sock.sendall(b"\x05" * (64 << 10))
        status = read_status(sock)
        sock.close()
    assert status.code == "DATA_LOSS" and "nothing was stored" in status.message
    with pytest.raises(NotFoundError):
        client.stat(Kind.KV_BLOCK, "damaged")


def test_bad_ticket_requests_get_clear_statuses(daemon: Daemon) -> None:
    with dataplane_stub(daemon) as stub:
        check(
            rpc_error(stub.BeginPut, dataplane_pb2.BeginPutRequest()),
            grpc.StatusCode.INVALID_ARGUMENT,
            "names no objects",
        )
        check(
            rpc_error(stub.BeginGet, dataplane_pb2.BeginGetRequest(keys=[key("nope")])),
            grpc.StatusCode.NOT_FOUND,
            "not found",
        )
        check(
            rpc_error(
                stub.BeginPut,
                dataplane_pb2.BeginPutRequest(objects=[header("huge", 1 << 40)]),
            ),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "limits.max_object_bytes",
        )


def test_bulk_session_requests_never_enter_the_ticket_table(
    make_daemon: Callable[..., Daemon],
) -> None:
    """A session's put or get uses its ticket at once on its own connection: it
    takes no slot of the table (bounded by ``max_tickets`` for tickets that
    wait for a connection), so a full table does not stop sessions."""
    daemon = make_daemon(dataplane={"bulk": {"max_tickets": 1}})
    dp = daemon.dataplane
    assert dp is not None
    with dataplane_stub(daemon) as stub, Client(daemon.address, timeout_s=30) as c:
        stub.BeginPut(dataplane_pb2.BeginPutRequest(objects=[header("waiting", 64 << 10)]))
        check(
            rpc_error(
                stub.BeginPut, dataplane_pb2.BeginPutRequest(objects=[header("more", 64 << 10)])
            ),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "max_tickets",
        )
        value = bytes(range(256)) * 1024
        c.dataplane.put_many([PutItem(Kind.KV_BLOCK, "by-session", value)], path="bulk")
        got = c.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "by-session")], path="bulk")
        assert bytes(got[0].data) == value
        assert c.dataplane.path_stats()["bulk"]["puts"] == 1  # no gRPC ticket: a session
        assert len(dp.transfers.tickets) == 1  # only the gRPC-negotiated one
