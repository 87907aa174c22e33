"""A daemon serving TLS with bearer tokens, and clients of it (the setup of
``test_tls_mutual_tls_and_unix_socket``, plus tokens), for the tests of what
such a daemon and its clients put on the plaintext bulk channel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.security.certs import Ca
from tiermem.client import Client, Kind, KvBlock, KvScope, TlsOptions
from tiermem.server.app import Daemon

TOKEN = "t-tls-worker"
#: large enough for a fast path (the client's threshold is 64 KiB)
BIG = bytes(range(256)) * 4096  # 1 MiB
#: past the blob client's inline upload size (4 MiB): its bytes go by a fast path
BLOB = b"\x07" * (5 << 20)
SCOPE = KvScope("tls", dtype="float32")
BLOCK = np.full(1 << 16, 2.0, dtype=np.float32)  # 256 KiB


def tls_daemon(
    make_daemon: Callable[..., Daemon], tmp_path: Path, **overrides: Any
) -> tuple[Daemon, TlsOptions]:
    """A started daemon with TLS on its TCP listener and one read-write token;
    and the TLS options of a client that trusts it."""
    ca = Ca()
    cert, key = ca.issue("localhost", server=True).write(tmp_path, "server")
    security = {
        "tls": {"cert_file": str(cert), "key_file": str(key)},
        "tokens": [{"name": "worker", "token": TOKEN}],
    }
    return make_daemon(security=security, **overrides), TlsOptions(ca=ca.pem.cert)


def tls_client(daemon: Daemon, tls: TlsOptions, *, bulk_unix: bool) -> Client:
    """A token-bearing TLS client that may use the bulk channel, not shared
    memory (so a large value goes by bulk or by gRPC). ``bulk_unix=False``: as
    a client on another host, which cannot reach the daemon's Unix socket."""
    return Client(
        daemon.address,
        token=TOKEN,
        tls=tls,
        fast_paths=("bulk", "grpc"),
        bulk_unix=bulk_unix,
        timeout_s=10,
    )


def move_large_values(client: Client) -> None:
    """Every kind of call that moves a value's bytes by a fast path when one
    is offered: an object put and get (a batch of one), a KV block put and
    get, a blob's upload and download; each must come back whole."""
    client.put(Kind.BLOB, "big", BIG)
    assert client.get(Kind.BLOB, "big") == BIG
    client.kv.put_blocks(SCOPE, [KvBlock(1, BLOCK)])
    (block,) = client.kv.get_blocks(SCOPE, [1])
    assert block.found and bytes(block.data) == BLOCK.tobytes()
    client.blobs.put("blob", BLOB)
    assert client.blobs.get("blob") == BLOB
