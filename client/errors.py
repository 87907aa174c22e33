"""Typed exceptions raised by the clients, one per gRPC status family.

Every exception carries the server's message (``str(exc)``), the gRPC
status name (``exc.code``) and the daemon's request id (``exc.request_id``,
the ``x-request-id`` its log lines carry; "" if the daemon was not reached).
"""

from __future__ import annotations

import grpc


class TiermemClientError(Exception):
    """Base class: any failed call."""

    def __init__(self, code: str, message: str, request_id: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id


class InvalidArgumentError(TiermemClientError):
    """The request was malformed (also OUT_OF_RANGE)."""


class NotFoundError(TiermemClientError):
    """No such object, namespace or session."""


class AlreadyExistsError(TiermemClientError):
    """The object exists and the call asked not to overwrite it."""


class CapacityError(TiermemClientError):
    """A tier, quota or limit is full (RESOURCE_EXHAUSTED)."""


class PermissionDeniedError(TiermemClientError):
    """Missing or insufficient credentials (UNAUTHENTICATED, PERMISSION_DENIED)."""


class ChecksumError(TiermemClientError):
    """Bytes failed verification (DATA_LOSS), on upload or in storage."""


class UnavailableError(TiermemClientError):
    """The daemon is unreachable or starting; retried automatically first."""


class DeadlineError(TiermemClientError):
    """The call ran past its deadline."""


class FailedPreconditionError(TiermemClientError):
    """The daemon's state does not allow the call (e.g. a lease or ticket already
    used or expired, a data path switched off)."""


_BY_CODE: dict[grpc.StatusCode, type[TiermemClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: CapacityError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDeniedError,
    grpc.StatusCode.DATA_LOSS: ChecksumError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
}


REQUEST_ID_HEADER = "x-request-id"


def request_id_of(call: object) -> str:
    """The daemon's request id from a call's (or failed call's) metadata: trailing
    metadata (where the daemon sends it), else initial metadata (older daemons)."""
    for name in ("trailing_metadata", "initial_metadata"):
        getter = getattr(call, name, None)
        if getter is None:
            continue
        try:
            metadata = getter()
        except Exception:  # a call that never reached the daemon has no metadata
            continue
        for key, value in metadata or ():
            if key == REQUEST_ID_HEADER:
                return value if isinstance(value, str) else bytes(value).decode(errors="replace")
    return ""


def from_rpc_error(exc: grpc.RpcError) -> TiermemClientError:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    cls = _BY_CODE.get(code, TiermemClientError)
    return cls(code.name if code else "UNKNOWN", details or "", request_id_of(exc))


def error_for(code: str, message: str, request_id: str = "") -> TiermemClientError:
    """The typed error for a status named ``code`` (e.g. from a bulk-channel frame)."""
    status = grpc.StatusCode.__members__.get(code, grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(status, TiermemClientError)(code, message, request_id)
