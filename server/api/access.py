"""The access interceptor: who is calling, until when, and what they sent.

It runs inside ``interceptor.ServerInterceptor`` (which maps the errors raised
here to statuses and counts them) and, for every RPC except health checks:

* **authenticates**: with tokens configured, the ``authorization: Bearer
  <token>`` metadata must name one (else UNAUTHENTICATED); the token's
  ``Principal`` is put in ``guard.current_principal`` for the services, which
  authorize per namespace with ``Guard.admit``. Without tokens every caller is
  ``ANONYMOUS`` (may do everything).
* **bounds time**: ``guard.current_deadline`` is the earlier of the client's
  deadline and ``limits.max_request_s``; loops in services check it. An RPC
  whose client deadline is later than that (or none) is registered with a
  watchdog that cancels it (status CANCELLED) a second after the server's
  limit, so a stalled stream cannot hold a thread and its reservations forever.
* **parses requests itself**: grpc's own deserializer answers a malformed
  message with INTERNAL; here it becomes INVALID_ARGUMENT naming the message
  type, so every bad request gets a clear status.

Works for every registered service without per-service code.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import hmac
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from tiermem.server.api.namespaces import authorize_request
from tiermem.server.config import LimitsConfig, SecurityConfig
from tiermem.server.errors import InvalidArgument, Unauthenticated
from tiermem.server.metrics import Metrics
from tiermem.server.services.guard import (
    ANONYMOUS,
    Guard,
    Principal,
    current_deadline,
    current_principal,
    principal_from_grants,
)

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler

log = logging.getLogger(__name__)

#: Methods that need no credentials (load balancers probe them).
OPEN_METHODS = ("/grpc.health.v1.Health/",)
#: The watchdog cancels this long after the server deadline, so RPCs that are
#: still making progress end in their own deadline check with DEADLINE_EXCEEDED.
WATCHDOG_GRACE_S = 1.0


class Authenticator:
    """Bearer tokens from the config, compared by SHA-256 digest in constant time."""

    def __init__(self, security: SecurityConfig) -> None:
        self._by_digest: dict[bytes, Principal] = {}
        for t in security.tokens:
            secret = t.token.get_secret_value()
            if not secret:
                raise ValueError(f"security.tokens: token {t.name!r} is empty")
            digest = hashlib.sha256(secret.encode()).digest()
            self._by_digest[digest] = principal_from_grants(t.name, t.namespaces, list(t.roles))

    @property
    def enabled(self) -> bool:
        return bool(self._by_digest)

    def principal(self, metadata: Any) -> Principal:
        """The caller's principal from the call metadata; raises Unauthenticated."""
        if not self._by_digest:
            return ANONYMOUS
        header = ""
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str):
                header = value
                break
        scheme, _, token = header.partition(" ")
        if not header or scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "this daemon requires a bearer token: send metadata "
                "'authorization: Bearer <token>' (Client(token=...), tiermem --token)"
            )
        digest = hashlib.sha256(token.strip().encode()).digest()
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise Unauthenticated("the bearer token is not valid for this daemon")


@dataclass(order=True)
class _Watch:
    due: float
    seq: int
    context: grpc.ServicerContext = field(compare=False)
    name: str = field(compare=False)
    done: bool = field(default=False, compare=False)


class _Watchdog:
    """One thread that cancels RPCs running past ``limits.max_request_s``."""

    def __init__(self) -> None:
        self._heap: list[_Watch] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, context: grpc.ServicerContext, name: str, due: float) -> _Watch:
        w = _Watch(due, next(self._seq), context, name)
        with self._cond:
            if w.seq % 1024 == 1023:  # drop finished RPCs: the heap stays as big as what runs
                self._heap = [x for x in self._heap if not x.done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, w)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tiermem-deadlines", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return w

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                w = self._heap[0]
                wait_s = w.due - time.monotonic()
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue
                heapq.heappop(self._heap)
            if not w.done:
                log.warning("cancelling %s: it ran past limits.max_request_s", w.name)
                w.context.cancel()


class AccessInterceptor(grpc.ServerInterceptor):
    def __init__(
        self,
        security: SecurityConfig,
        limits: LimitsConfig,
        metrics: Metrics,
        guard: Guard | None = None,
    ) -> None:
        self._auth = Authenticator(security)
        self._guard = guard
        self._max_request_s = limits.max_request_s
        self._metrics = metrics
        self._watchdog = _Watchdog()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(details)
        if handler is None:
            return handler
        open_method = details.method.startswith(OPEN_METHODS)
        name = details.method
        metadata = details.invocation_metadata
        parse = _parser(handler.request_deserializer)
        streaming_in = handler.request_streaming
        behaviour = (
            handler.unary_unary or handler.unary_stream or handler.stream_unary
        ) or handler.stream_stream
        if behaviour is None:
            return handler

        def enter(context: grpc.ServicerContext) -> tuple[Any, Any, _Watch | None]:
            try:
                principal = ANONYMOUS if open_method else self._auth.principal(metadata)
            except Unauthenticated:
                self._metrics.auth_failures.labels("token").inc()
                raise
            remaining = context.time_remaining()
            limit = self._max_request_s
            now = time.monotonic()
            watch = None
            if remaining is None or remaining > limit:
                watch = self._watchdog.watch(context, name, now + limit + WATCHDOG_GRACE_S)
                remaining = limit
            return (
                current_principal.set(principal),
                current_deadline.set(now + remaining),
                watch,
            )

        def leave(tokens: tuple[Any, Any, _Watch | None]) -> None:
            p_token, d_token, watch = tokens
            if watch is not None:
                watch.done = True
            # A response stream abandoned by its client may be closed from another
            # thread (another context): the variables die with that context then.
            with contextlib.suppress(ValueError):
                current_principal.reset(p_token)
                current_deadline.reset(d_token)

        guard = self._guard

        def checked(raw: bytes) -> Any:
            msg = parse(raw)
            if guard is not None and not open_method:
                authorize_request(guard, name, msg)
            return msg

        def request_of(raw: Any) -> Any:
            if streaming_in:
                return (checked(m) for m in raw)
            return checked(raw)

        if handler.response_streaming:

            def streaming(raw: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                tokens = enter(context)
                try:
                    yield from behaviour(request_of(raw), context)
                finally:
                    leave(tokens)

            wrapped: Any = streaming
        else:

            def unary(raw: Any, context: grpc.ServicerContext) -> Any:
                tokens = enter(context)
                try:
                    return behaviour(request_of(raw), context)
                finally:
                    leave(tokens)

            wrapped = unary
        factory = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        return factory(
            wrapped,
            request_deserializer=None,  # raw bytes: parsed above, errors become statuses
            response_serializer=handler.response_serializer,
        )


def _parser(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    if deserializer is None:
        return lambda raw: raw
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    type_name = getattr(descriptor, "full_name", "request")

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:
            raise InvalidArgument(
                f"the request is not a valid {type_name} message ({len(raw)} bytes): "
                f"{type(exc).__name__}: {exc}"
            ) from None

    return parse
