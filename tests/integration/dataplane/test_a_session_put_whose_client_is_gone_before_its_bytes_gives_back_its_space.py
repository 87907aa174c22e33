"""A bulk session put that cannot even send its acceptance (the client is
gone) stores nothing and gives back everything it reserved: the arena space
and the data plane's byte budget. The connection is played by a stand-in
whose sends fail, driven through the session's own request handler."""

from __future__ import annotations

from typing import Any

import pytest

from tiermem.dataplane_wire import OP_PUT
from tiermem.server.app import Daemon
from tiermem.server.errors import NotFound
from tiermem.server.model import Kind, ObjectKey, Tier
from tiermem.server.services.guard import ANONYMOUS
from tiermem.v1 import common_pb2, dataplane_pb2, object_pb2


class GoneClient:
    """A connection whose peer has gone: every send fails."""

    def __init__(self) -> None:
        self.sends = 0

    def sendall(self, data: Any) -> None:
        self.sends += 1
        raise BrokenPipeError("the client closed the connection")

    def sendmsg(self, parts: Any) -> int:
        self.sendall(b"")
        return 0

    def recv_into(self, buf: Any, n: int = 0) -> int:
        raise AssertionError("nothing may be read: the put never got going")


def test_a_put_that_cannot_send_its_acceptance_gives_back_its_space(daemon: Daemon) -> None:
    dp, dram = daemon.dataplane, daemon.store.memory[Tier.DRAM]
    assert dp is not None and daemon.bulk_sessions is not None
    used_before, budget_before = dram.used_bytes, dp.budget.used_bytes
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.KV_BLOCK, key="gone")
    request = dataplane_pb2.BeginPutRequest(
        objects=[object_pb2.PutHeader(key=key, size_bytes=1 << 20)]
    )
    conn = GoneClient()
    # no FLAG_ACCEPT_WITH_RESULT: the acceptance goes out before the bytes
    keep = daemon.bulk_sessions._request(conn, ANONYMOUS, "me", "", OP_PUT, 0, request, 30.0)  # type: ignore[arg-type]
    assert keep is False and conn.sends == 1  # the session ends
    assert dram.used_bytes == used_before
    assert dp.budget.used_bytes == budget_before
    with pytest.raises(NotFound):
        daemon.objects.stat(ObjectKey("default", Kind.KV_BLOCK, "gone"))
