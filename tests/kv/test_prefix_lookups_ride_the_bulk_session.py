"""LookupPrefix rides the bulk session (a framed request, no gRPC call) when the
daemon offers sessions: the same answer as over gRPC, the same authorization,
counted with the gRPC method's requests; a malformed lookup closes the
session with INVALID_ARGUMENT; without sessions the client asks over gRPC."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tests.integration.dataplane.helpers import read_status, wait_for
from tests.integration.dataplane.test_bulk_sessions_authenticate_once_and_stay_exact import (
    TOKENS,
    closed,
    open_session,
    sessions_opened,
)
from tiermem.client import Client, KvBlock, KvScope, PermissionDeniedError
from tiermem.client.fastpath.bulk import read_frame
from tiermem.dataplane_wire import OP_LOOKUP, request
from tiermem.server.app import Daemon
from tiermem.v1 import kv_pb2

SCOPE = KvScope("m", dtype="bfloat16", salt="s")


def stored_chain(c: Client, n: int, gap: int) -> list[int]:
    """A chain of ``n`` chunk hashes whose first ``gap`` are stored."""
    chain = [(i * 0x9E3779B97F4A7C15 + 7) % (1 << 64) for i in range(n)]
    block = torch.ones(2, 8, dtype=torch.bfloat16)
    c.kv.put_blocks(SCOPE, [KvBlock(h, block) for h in chain[:gap]])
    return chain


def lookups_counted(daemon: Daemon) -> float:
    return float(daemon.metrics.requests.labels("KvService/LookupPrefix", "OK")._value.get())


def test_lookups_on_the_session_answer_as_grpc_does(daemon: Daemon) -> None:
    with Client(daemon.address) as c, Client(daemon.address, fast_paths=("grpc",)) as g:
        chain = stored_chain(c, 40, gap=25)
        opened = sessions_opened(daemon)
        counted = lookups_counted(daemon)
        for prefix in (chain, chain[:1], chain[25:]):
            over_session = c.kv.lookup_prefix(SCOPE, prefix)
            over_grpc = g.kv.lookup_prefix(SCOPE, prefix)
            assert over_session == over_grpc
        assert c.kv.lookup_prefix(SCOPE, chain).stored_chunks == 25
        assert sessions_opened(daemon) == opened + 1  # one session for every lookup
        # 3 + 3 + 1, both transports (gRPC's counter moves just after its reply)
        wait_for(lambda: lookups_counted(daemon) == counted + 7, "7 lookups counted")


def test_a_session_lookup_is_authorized_like_grpc(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(namespaces=["default", "a"], security={"tokens": TOKENS})
    with Client(daemon.address, token="t-alice", namespace="a") as c:
        stored_chain(c, 4, gap=4)
        assert c.kv.lookup_prefix(KvScope("m", dtype="bfloat16", salt="s"), [1]).stored_chunks == 0
        other = KvScope("m", dtype="bfloat16", salt="s", namespace="default")
        with pytest.raises(PermissionDeniedError):
            c.kv.lookup_prefix(other, [1, 2])
        assert sessions_opened(daemon) == 1  # the refusal left the session open


def test_a_malformed_lookup_closes_the_session(daemon: Daemon) -> None:
    sock, opened = open_session(daemon)
    assert opened.code == "OK"
    with sock:
        scope = kv_pb2.KvScope(namespace="default", model="m", world_size=1, dtype="bfloat16")
        good = kv_pb2.LookupPrefixRequest(scope=scope, packed_hashes=b"\x01" * 8, hash_width=8)
        sock.sendall(request(OP_LOOKUP, good.SerializeToString()))
        assert read_status(sock).code == "OK"
        reply = kv_pb2.LookupPrefixResponse()
        reply.ParseFromString(read_frame(sock, 1 << 16))
        assert reply.stored_chunks == 0
        sock.sendall(request(OP_LOOKUP, b"\xff\xff\xff"))
        refused = read_status(sock)
        assert refused.code == "INVALID_ARGUMENT" and "LookupPrefixRequest" in refused.message
        assert closed(sock)


def test_without_sessions_lookups_go_over_grpc(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(dataplane={"bulk": {"sessions": False}})
    with Client(daemon.address) as c:
        chain = stored_chain(c, 10, gap=6)
        assert c.kv.lookup_prefix(SCOPE, chain).stored_chunks == 6
        assert sessions_opened(daemon) == 0
