"""A daemon serving TLS does not listen on the bulk channel's TCP port at all.
The channel is plaintext and its clients never learn that address under TLS
(test_a_tls_daemon_offers_no_tcp_bulk_address); a listener nobody is told of
would still take tickets and session preambles, bearer tokens included, from
anyone who finds the port. Its Unix socket is served as before."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.prometheus import free_port
from tests.security.tls_with_tokens import move_large_values, tls_client, tls_daemon
from tiermem.server.app import Daemon


def test_a_tls_daemon_does_not_listen_on_the_bulk_tcp_port(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    port = free_port()
    daemon, tls = tls_daemon(
        make_daemon, tmp_path, dataplane={"bulk": {"host": "127.0.0.1", "port": port}}
    )
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with tls_client(daemon, tls, bulk_unix=True) as client:  # the Unix socket still serves
        move_large_values(client)
        assert client.path_stats()["bulk"]["gets"] > 0
