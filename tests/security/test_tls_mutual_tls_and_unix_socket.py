"""TLS on the TCP listener (certificates made by the test), optional mutual TLS,
and a Unix-socket listener whose file permissions decide who may connect."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.security.certs import Ca
from tiermem.client import Client, Kind, TiermemClientError, TlsOptions
from tiermem.server.app import Daemon


def test_tls_serves_tls_clients_and_refuses_plaintext(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    ca = Ca()
    cert, key = ca.issue("localhost", server=True).write(tmp_path, "server")
    daemon = make_daemon(security={"tls": {"cert_file": str(cert), "key_file": str(key)}})
    with Client(daemon.address, tls=TlsOptions(ca=ca.pem.cert)) as client:
        client.put(Kind.BLOB, "over-tls", b"sealed")
        assert client.get(Kind.BLOB, "over-tls") == b"sealed"
        # small values and metadata calls stay on the TLS channel (the bulk
        # channel is plaintext)
        assert client.path_stats()["grpc"]["puts"] == 1
        stats: list[object] = []
        grpc_stat = client._objects.Stat
        client._objects.Stat = lambda *a, **k: stats.append(a) or grpc_stat(*a, **k)  # type: ignore[method-assign]
        assert client.stat(Kind.BLOB, "over-tls").size_bytes == 6
        assert len(stats) == 1
    with Client(daemon.address, retries=0, timeout_s=3) as plain:
        with pytest.raises(TiermemClientError) as info:
            plain.get(Kind.BLOB, "over-tls")
        assert info.value.code == "UNAVAILABLE"
    other = Ca("someone else")
    with Client(daemon.address, tls=TlsOptions(ca=other.pem.cert), retries=0, timeout_s=3) as c:
        with pytest.raises(TiermemClientError) as info:
            c.get(Kind.BLOB, "over-tls")
        assert info.value.code == "UNAVAILABLE"  # the server's certificate is not trusted


def test_mutual_tls_requires_a_client_certificate_from_the_ca(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    ca = Ca()
    tls, ca_file = ca.mutual_tls(tmp_path)
    daemon = make_daemon(security={"tls": tls})
    worker = ca.issue("worker-1", server=False)
    with Client(
        daemon.address, tls=TlsOptions(ca=str(ca_file), cert=worker.cert, key=worker.key)
    ) as client:
        client.put(Kind.KV_BLOCK, "k", b"v" * 100)
        assert client.get(Kind.KV_BLOCK, "k") == b"v" * 100
    stranger = Ca("rogue").issue("worker-2", server=False)
    for tls in (
        TlsOptions(ca=ca.pem.cert),  # no client certificate
        TlsOptions(ca=ca.pem.cert, cert=stranger.cert, key=stranger.key),  # wrong CA
    ):
        with Client(daemon.address, tls=tls, retries=0, timeout_s=3) as c:
            with pytest.raises(TiermemClientError) as info:
                c.get(Kind.KV_BLOCK, "k")
            assert info.value.code == "UNAVAILABLE"


def test_unix_socket_listener_with_file_permissions(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    path = tmp_path / "run" / "tiermem.sock"
    path.parent.mkdir()
    path.write_bytes(b"")  # a regular file in the way is refused, not deleted
    with pytest.raises(OSError, match="not a socket"):
        make_daemon(name="refused", server={"unix_socket": str(path)})
    path.unlink()
    daemon = make_daemon(server={"unix_socket": str(path), "unix_socket_mode": 0o660})
    mode = os.stat(path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660
    assert daemon.unix_address == f"unix:{path}"
    with Client(daemon.unix_address) as local:
        local.put(Kind.SCRATCH, "local", b"via the socket")
    with Client(daemon.address) as remote:
        assert remote.get(Kind.SCRATCH, "local") == b"via the socket"
    daemon.stop()
    again = make_daemon(name="d", server={"unix_socket": str(path)})  # stale socket replaced
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with Client(again.unix_address) as local:
        assert local.get(Kind.SCRATCH, "local") == b"via the socket"
