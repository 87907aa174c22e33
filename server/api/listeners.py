"""Listener set-up: TLS credentials for the TCP port, the Unix-socket listener."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc

from tiermem.server.config import TlsConfig


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from PEM files (None: plain TCP). With ``client_ca_file``
    clients must present a certificate signed by that CA (mutual TLS)."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    key = Path(tls.key_file).read_bytes()
    chain = Path(tls.cert_file).read_bytes()
    ca = Path(tls.client_ca_file).read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=ca, require_client_auth=ca is not None
    )


def bind_unix_socket(server: grpc.Server, path: str) -> str:
    """Listen on a Unix socket at ``path`` (replacing a stale socket file; any
    other kind of file there is an error). Returns the ``unix:`` address."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not stat.S_ISSOCK(p.lstat().st_mode):
            raise OSError(f"server.unix_socket {path} exists and is not a socket")
        p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    address = f"unix:{os.path.abspath(path)}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address}")
    return address
