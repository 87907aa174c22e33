"""A daemon whose callers prove who they are by a client certificate (mutual
TLS, no tokens) offers no bulk sessions: the bulk channel is plaintext and has
no certificate to check, and a process with no certificate listed, read and
could delete objects through a session there. Certified clients on the
daemon's host still use the bulk channel, by its Unix socket (the only way
it is served under TLS), with tickets they ask for over the gRPC channel
(where the certificate is checked)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.security.certs import Ca
from tiermem.client import Client, Kind, TlsOptions
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.client.fastpath.session import SessionPool, SessionsUnsupported
from tiermem.dataplane_wire import OP_LIST
from tiermem.server.app import Daemon
from tiermem.v1 import object_pb2


def test_no_session_for_a_peer_without_a_certificate(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    ca = Ca()
    tls, ca_file = ca.mutual_tls(tmp_path)
    daemon = make_daemon(security={"tls": tls})
    worker = ca.issue("worker-1", server=False)
    options = TlsOptions(ca=str(ca_file), cert=worker.cert, key=worker.key)
    big = bytes(range(256)) * 4096  # 1 MiB: the bulk channel's size
    with Client(daemon.address, tls=options) as c:
        c.put(Kind.BLOB, "secret", b"certified eyes only")
        c.dataplane.put_many([PutItem(Kind.BLOB, "big", big)], path="bulk")
        got = c.dataplane.get_many([ObjectRef(Kind.BLOB, "big")], path="bulk")
        assert bytes(got[0].data) == big
        assert c.dataplane.path_stats()["bulk"]["gets"] == 1
    pool = SessionPool(b"", "")  # no certificate, no token
    address = daemon.dataplane.transfers.address
    listing = object_pb2.ListRequest(namespace="default")
    try:
        with pytest.raises(SessionsUnsupported), pool.session(address) as s:
            s.unary(OP_LIST, listing, object_pb2.ListResponse())
    finally:
        pool.close()
