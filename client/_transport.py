"""Channel, credentials, deadlines and retries shared by a client's sub-clients.

One ``Transport`` (sync) or ``AsyncTransport`` per client; service-specific
clients (objects, KV, vectors, ...) take it instead of opening channels of
their own. Retries: UNAVAILABLE only (daemon starting or unreachable), with
exponential backoff; every other status raises a typed error at once. A call's
timeout bounds all its attempts together (``retry_budget``).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio

from tiermem.client.errors import from_rpc_error

T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 << 20


def channel_options() -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.enable_retries", 0),  # retries are ours: UNAVAILABLE only, with backoff
    ]


@dataclass(frozen=True)
class TlsOptions:
    """TLS for the connection to the daemon. PEM bytes or file paths.

    ``ca``: the CA that signed the daemon's certificate (None: the system roots);
    ``cert``/``key``: this client's certificate and key, for daemons that require
    mutual TLS; ``server_name``: the name to verify the daemon's certificate
    against, when it differs from the host in the address."""

    ca: bytes | str | None = None
    cert: bytes | str | None = None
    key: bytes | str | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca),
            private_key=_pem(self.key),
            certificate_chain=_pem(self.cert),
        )

    def options(self) -> list[tuple[str, Any]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


def _pem(value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


def retry_budget(deadline: float, delay_s: float) -> float:
    """What a retry starting after a backoff of ``delay_s`` would have of a
    call's time (``deadline``, ``time.monotonic``); not above 0: no retry (the
    last UNAVAILABLE is raised rather than a retry that cannot finish)."""
    return deadline - time.monotonic() - delay_s


class _Settings:
    def __init__(self, address: str, token: str | None, timeout_s: float, retries: int) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retries = retries
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )


class Transport(_Settings):
    """``address``: ``HOST:PORT``, or ``unix:PATH`` for the daemon's Unix socket."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        tls: TlsOptions | None = None,
    ) -> None:
        super().__init__(address, token, timeout_s, retries)
        #: the channel is TLS: nothing it would carry should go over plaintext instead
        self.secure = tls is not None
        if tls is None:
            self.channel = grpc.insecure_channel(address, options=channel_options())
        else:
            self.channel = grpc.secure_channel(
                address, tls.credentials(), options=channel_options() + tls.options()
            )
        self._owns_channel = True

    def with_metadata(self, *pairs: tuple[str, str]) -> Transport:
        """A transport on the same channel whose calls also carry ``pairs`` (e.g.
        the session a client acts as). Closing it leaves the channel open."""
        other = copy.copy(self)
        other.metadata = self.metadata + tuple(pairs)
        other._owns_channel = False
        return other

    def call(self, fn: Callable[[float], T], timeout_s: float | None = None) -> T:
        """Run ``fn(timeout_s)``, retrying UNAVAILABLE; map failures to typed
        errors. ``timeout_s`` (None: the client's) bounds all attempts together:
        each retry gets what is left of it after its backoff."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn(timeout)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE and attempt < self.retries:
                    timeout = retry_budget(deadline, delay)
                    if timeout > 0:
                        time.sleep(delay)
                        delay = min(delay * 2, 2.0)
                        continue
                raise from_rpc_error(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self._owns_channel:
            self.channel.close()


class AsyncTransport(_Settings):
    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        tls: TlsOptions | None = None,
    ) -> None:
        super().__init__(address, token, timeout_s, retries)
        if tls is None:
            self.channel = grpc.aio.insecure_channel(address, options=channel_options())
        else:
            self.channel = grpc.aio.secure_channel(
                address, tls.credentials(), options=channel_options() + tls.options()
            )

    async def call(self, fn: Callable[[float], Awaitable[T]], timeout_s: float | None = None) -> T:
        """As ``Transport.call``: the timeout bounds all attempts together."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return await fn(timeout)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE and attempt < self.retries:
                    timeout = retry_budget(deadline, delay)
                    if timeout > 0:
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 2.0)
                        continue
                raise from_rpc_error(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        await self.channel.close()
