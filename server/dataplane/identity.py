"""Who is calling: the principal leases and tickets are bound to.

A caller that sends an ``authorization`` metadata value is identified by it
(hashed: the table never keeps the secret); one without is identified by its
host address, the only identity a TCP connection can show as well. Every way
in by a loopback address or a Unix socket (gRPC's or the bulk channel's) is one
host, ``local``: a process here can use the loopback ones and the bulk socket
whatever the gRPC socket's file mode, and telling them apart would stop a
client that asked for a lease over gRPC from releasing it on its bulk
session's Unix socket. (Lease and ticket ids are random secrets either way.)
A process here that dials the host's external address is named by it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import urllib.parse
from collections.abc import Iterable

#: The host name of every peer on this host (loopback addresses, Unix sockets).
LOCAL_HOST = "local"


def principal_of(credential: str | bytes, peer_host: str) -> str:
    """The principal of a caller presenting ``credential`` (may be empty) from ``peer_host``."""
    raw = credential.encode() if isinstance(credential, str) else credential
    if raw:
        return "token:" + hashlib.sha256(raw).hexdigest()[:32]
    return "host:" + peer_host


def grpc_principal(metadata: Iterable[tuple[str, str | bytes]] | None, peer: str) -> str:
    """Principal of a gRPC caller from its invocation metadata and ``context.peer()``."""
    for key, value in metadata or ():
        if key == "authorization":
            return principal_of(value, grpc_peer_host(peer))
    return principal_of(b"", grpc_peer_host(peer))


def grpc_peer_host(peer: str) -> str:
    """Host part of a gRPC peer string: ``ipv4:1.2.3.4:5`` → ``1.2.3.4``,
    ``ipv6:[2001:db8::1]:5`` → ``2001:db8::1``; loopback addresses and
    ``unix:/path`` → ``local``."""
    scheme, _, rest = urllib.parse.unquote(peer).partition(":")
    if scheme in ("ipv4", "ipv6"):
        return normal_host(rest.rpartition(":")[0].strip("[]"))
    if scheme in ("unix", "unix-abstract"):
        return LOCAL_HOST
    return scheme or "unknown"


def normal_host(host: str) -> str:
    """A socket peer address as gRPC would name it (IPv4-mapped IPv6 unwrapped),
    ``local`` for a loopback address."""
    host = host.removeprefix("::ffff:") if "." in host else host
    try:
        if ipaddress.ip_address(host).is_loopback:
            return LOCAL_HOST
    except ValueError:
        pass  # not an address (a test's made-up name): kept as it is
    return host
