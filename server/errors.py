"""The one error hierarchy of the daemon.

Services raise these; ``api.interceptor`` maps them to gRPC status codes in one
place. Nothing here imports gRPC: the status is named by ``code`` (a
``grpc.StatusCode`` member name) so transport-free code and tests can use them.
Each docstring says what the caller should do about it.
"""

from __future__ import annotations


class TiermemError(Exception):
    """Base class. ``code`` names the gRPC status the error maps to."""

    code = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(TiermemError):
    """The request is malformed; fix the request, retrying will not help."""

    code = "INVALID_ARGUMENT"


class NotFound(TiermemError):
    """The object, namespace or session does not exist (or is not visible to you)."""

    code = "NOT_FOUND"


class AlreadyExists(TiermemError):
    """Something with this name exists and the request asked not to overwrite it."""

    code = "ALREADY_EXISTS"


class OutOfRange(TiermemError):
    """A byte range or offset lies outside the object."""

    code = "OUT_OF_RANGE"


class CapacityExceeded(TiermemError):
    """A tier, quota or limit is full. Free space, lower the request, or retry later."""

    code = "RESOURCE_EXHAUSTED"


class PermissionDenied(TiermemError):
    """The credentials do not grant this namespace or operation."""

    code = "PERMISSION_DENIED"


class Unauthenticated(TiermemError):
    """No valid credentials were presented."""

    code = "UNAUTHENTICATED"


class Corrupted(TiermemError):
    """Stored or received bytes failed their checksum. Nothing damaged is returned;
    re-upload the object (upload) or treat it as lost (stored data)."""

    code = "DATA_LOSS"


class FailedPrecondition(TiermemError):
    """The system is not in a state that allows the operation (e.g. shutting down)."""

    code = "FAILED_PRECONDITION"


class Unavailable(TiermemError):
    """A dependency (e.g. a remote tier) is down; retry later."""

    code = "UNAVAILABLE"


class DeadlineExceeded(TiermemError):
    """The operation ran past its time limit."""

    code = "DEADLINE_EXCEEDED"


class InvariantViolation(TiermemError):
    """A programming error: an internal invariant is broken. Never expected; report it."""

    code = "INTERNAL"


def invariant(condition: bool, message: str) -> None:
    """Raise InvariantViolation unless ``condition`` holds (kept under ``python -O``)."""
    if not condition:
        raise InvariantViolation(message)
