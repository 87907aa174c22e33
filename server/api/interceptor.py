"""The one place where domain errors become gRPC statuses, and RPCs are measured.

Every RPC runs inside ``_guard``: a ``TiermemError`` aborts with its mapped
status and message; any other exception is logged with its traceback and
reported as INTERNAL (its message included, so the caller learns something);
errors raised while a response stream is being produced are handled the same
way. Each call is counted by method and status code and timed, and carries a
request id: the client's ``x-request-id`` metadata or a generated one, sent
back as trailing metadata (with the status, on success and on error: no
extra message on the wire, which initial metadata sent ahead of a unary
reply would cost every call) and attached to every log line the RPC's
thread writes.
"""

from __future__ import annotations

import contextvars
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from tiermem.server.errors import TiermemError
from tiermem.server.metrics import Metrics

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler

#: Metadata key of request ids: read from the client's metadata if present (else
#: one is generated) and sent back as trailing metadata on every RPC.
REQUEST_ID_HEADER = "x-request-id"
#: The current request's id; log lines of the RPC's thread carry it (``server.logs``).
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_ids = random.Random()


class _Aborted(Exception):
    """Marks an abort already issued on the context (do not map again)."""


def _status_name(exc: BaseException, context: grpc.ServicerContext) -> str:
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(exc, TiermemError):
        return exc.code
    return "UNKNOWN"


class ServerInterceptor(grpc.ServerInterceptor):
    """Error mapping, metrics and the readiness gate.

    Until ``ready`` is set (start-up recovery done) every RPC except health
    checks and reflection is answered UNAVAILABLE, so clients retry instead of
    seeing a half-loaded catalog."""

    OPEN_WHILE_RECOVERING = ("/grpc.health.v1.Health/", "/grpc.reflection.")

    def __init__(self, metrics: Metrics, ready: threading.Event) -> None:
        self._metrics = metrics
        self._ready = ready

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(details)
        if handler is None:
            return None
        rid = _request_id(details)
        if not self._ready.is_set() and not details.method.startswith(self.OPEN_WHILE_RECOVERING):
            return _unavailable(
                handler, "the daemon is starting (recovering its catalog); retry", rid
            )
        service, _, method = details.method.lstrip("/").partition("/")
        name = f"{service.rsplit('.', 1)[-1]}/{method}"  # e.g. "ObjectService/Get"
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, name, rid),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, name, rid),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, name, rid),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is None:
            return handler
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(handler.stream_stream, name, rid),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _record(self, name: str, code: str, started: float) -> None:
        metrics = self._metrics
        metrics.child(metrics.requests, name, code).inc()
        metrics.child(metrics.request_seconds, name, code).observe(time.perf_counter() - started)

    def _fail(self, exc: BaseException, context: grpc.ServicerContext, name: str) -> None:
        """Abort the RPC for ``exc`` (raises)."""
        if isinstance(exc, TiermemError):
            context.abort(grpc.StatusCode[exc.code], exc.message)
        log.error("internal error in %s", name, exc_info=exc)
        context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    def _unary(self, fn: Callable[[Any, grpc.ServicerContext], Any], name: str, rid: str) -> Any:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            token = request_id.set(rid)
            started = time.perf_counter()
            code = "OK"
            try:
                context.set_trailing_metadata(((REQUEST_ID_HEADER, rid),))
                return fn(request, context)
            except grpc.RpcError:
                code = "CANCELLED"  # the call ended under us (client gone): nothing to map
                raise
            except Exception as exc:
                if _client_left(exc, context):
                    code = "CANCELLED"
                    raise
                code = _status_name(exc, context)
                if code == "UNKNOWN" or isinstance(exc, TiermemError):
                    code = exc.code if isinstance(exc, TiermemError) else "INTERNAL"
                    self._fail(exc, context, name)
                raise
            finally:
                self._record(name, code, started)
                request_id.reset(token)

        return wrapped

    def _streaming(
        self, fn: Callable[[Any, grpc.ServicerContext], Iterator[Any]], name: str, rid: str
    ) -> Any:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            token = request_id.set(rid)
            started = time.perf_counter()
            code = "OK"
            try:
                context.set_trailing_metadata(((REQUEST_ID_HEADER, rid),))
                yield from fn(request, context)
            except (GeneratorExit, grpc.RpcError):
                code = "CANCELLED"  # the client went away mid-stream
                raise
            except Exception as exc:
                if _client_left(exc, context):
                    code = "CANCELLED"
                    raise
                code = _status_name(exc, context)
                if code == "UNKNOWN" or isinstance(exc, TiermemError):
                    code = exc.code if isinstance(exc, TiermemError) else "INTERNAL"
                    self._fail(exc, context, name)
                raise
            finally:
                self._record(name, code, started)
                _reset(token)

        return wrapped


def _client_left(exc: BaseException, context: grpc.ServicerContext) -> bool:
    """A request stream that fails because the client cancelled or went away
    (not a server error: nothing to log)."""
    return isinstance(exc, grpc.RpcError) and not context.is_active()


def _reset(token: contextvars.Token[str]) -> None:
    try:
        request_id.reset(token)
    except ValueError:  # a stream closed from another thread's context
        request_id.set("-")


def _unavailable(handler: Handler, message: str, rid: str) -> Handler:
    def reject(request: Any, context: grpc.ServicerContext) -> Any:
        context.set_trailing_metadata(((REQUEST_ID_HEADER, rid),))
        context.abort(grpc.StatusCode.UNAVAILABLE, message)

    factory = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return factory(
        reject,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _request_id(details: grpc.HandlerCallDetails) -> str:
    for key, value in details.invocation_metadata or ():
        if key == REQUEST_ID_HEADER and isinstance(value, str):
            clean = "".join(ch for ch in value[:64] if ch.isascii() and ch.isprintable())
            if clean:
                return clean
    return new_request_id()


def new_request_id() -> str:
    """A fresh request id (bulk sessions give their requests one too)."""
    return f"{_ids.getrandbits(64):016x}"  # unique enough to find log lines; no syscall
