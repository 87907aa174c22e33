"""A daemon serving TLS with tokens still moves a local client's large values
over its bulk channel's Unix socket, by bulk sessions and by tickets alike:
the socket never leaves the host (only processes in the daemon's network
namespace reach it), so neither the token nor the bytes cross a network,
while the TCP bulk channel (plaintext) is withheld from TLS clients."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.security.tls_with_tokens import move_large_values, tls_client, tls_daemon
from tiermem.server.app import Daemon


@pytest.mark.parametrize("sessions", [True, False], ids=["sessions", "tickets"])
def test_a_tls_daemons_local_clients_keep_the_unix_socket_bulk_channel(
    make_daemon: Callable[..., Daemon], tmp_path: Path, sessions: bool
) -> None:
    daemon, tls = tls_daemon(make_daemon, tmp_path, dataplane={"bulk": {"sessions": sessions}})
    with tls_client(daemon, tls, bulk_unix=True) as client:
        assert client.dataplane.paths() == ["bulk", "grpc"]
        assert client.dataplane.offer().bulk_address.startswith("unix:")
        move_large_values(client)
        stats = client.path_stats()
    # an object, a KV block and a blob each way
    assert stats["bulk"]["puts"] == 3 and stats["bulk"]["gets"] == 3
