"""Namespace authorization for every RPC, from the request itself.

Every request field named ``namespace`` (at any depth up to ``MAX_DEPTH``, in
repeated fields too) is authorized for the method's role before the service
runs: read-only methods need READ, everything else WRITE. Services still call
the guard themselves where a namespace is implied rather than named (a session
id, for instance); this check makes sure no service can forget the named ones.

A method whose request names no namespace is decided in ``NO_NAMESPACE``: it
needs its role on at least one namespace, or it is authorized by the service
from what the request names instead, or it is discovery open to every
authenticated caller.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from tiermem.server.errors import PermissionDenied
from tiermem.server.services.guard import Guard, Role, current_principal

MAX_DEPTH = 4
#: Most repeated sub-messages looked at per field (requests are size-bounded anyway).
MAX_ITEMS = 100_000
#: Method-name prefixes of read-only RPCs.
READ_PREFIXES = (
    "Get", "Stat", "List", "Lookup", "Describe", "Search", "Count", "Replay", "Query",
    "Lease", "BeginGet", "Hello", "Prefetch", "Release", "OpenDownload", "Download",
    "BlobStats",
)  # fmt: skip


_V1 = "/tiermem.v1."

#: Every method whose request names no namespace: the role the caller must hold
#: on at least one namespace (so a token granted nothing, or only READ for a
#: call that changes something, is refused), or None where that is not needed.
NO_NAMESPACE: dict[str, Role | None] = {
    # nothing else authorizes these
    f"{_V1}AdminService/Stats": Role.READ,  # its cost report: the caller's namespaces only
    f"{_V1}BlobService/BlobStats": Role.READ,
    f"{_V1}ScratchService/Stats": Role.READ,
    f"{_V1}ScratchService/Flush": Role.WRITE,  # writes back every session's buffered records
    # runs on the daemon's CPUs; with a session the service also needs READ on its namespace
    f"{_V1}OperatorService/Invoke": Role.READ,
    # authorized by the service: ADMIN, or the role on the namespace of the
    # session, upload or leases the request names (listings: filtered by it)
    f"{_V1}AdminService/CreateNamespace": None,
    f"{_V1}BlobService/Upload": None,
    f"{_V1}BlobService/GetUpload": None,
    f"{_V1}BlobService/BeginBulkUpload": None,
    f"{_V1}BlobService/ShmUpload": None,
    f"{_V1}BlobService/FinishUpload": None,
    f"{_V1}BlobService/AbortUpload": None,
    f"{_V1}DataPlaneService/Commit": None,
    f"{_V1}DataPlaneService/Release": None,
    f"{_V1}ScratchService/Append": None,
    f"{_V1}ScratchService/AppendStream": None,
    f"{_V1}ScratchService/Replay": None,
    f"{_V1}ScratchService/Query": None,
    f"{_V1}SessionService/Describe": None,
    f"{_V1}SessionService/List": None,
    f"{_V1}SessionService/Close": None,
    f"{_V1}SessionService/Heartbeat": None,
    # discovery, showing nothing of a namespace the caller is not granted
    # (a write-only token negotiates Hello before its puts)
    f"{_V1}AdminService/ListNamespaces": None,
    f"{_V1}DataPlaneService/Hello": None,
    f"{_V1}OperatorService/ListOperators": None,
}


def role_of(method: str) -> Role:
    """Role a method needs on the namespaces its request names ("/pkg.Svc/Name")."""
    name = method.rsplit("/", 1)[-1]
    return Role.READ if name.startswith(READ_PREFIXES) else Role.WRITE


#: How a field takes part in the walk (see ``_plan``).
_NAME, _ONE, _MANY = 0, 1, 2


@functools.cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, int, bool], ...]:
    """The fields of ``descriptor`` worth looking at: ``namespace`` strings
    (with whether the field tracks presence) and the message fields whose
    types can reach one. Computed once per message type, so a request's walk
    touches only those fields instead of listing every field it has set."""
    return tuple(_fields(descriptor, set()))


def _fields(descriptor: Descriptor, seen: set[str]) -> Iterator[tuple[str, int, bool]]:
    seen.add(descriptor.full_name)
    for field in descriptor.fields:
        sub = field.message_type
        if sub is None:
            string = field.type == FieldDescriptor.TYPE_STRING
            if field.name == "namespace" and string and not field.is_repeated:
                yield field.name, _NAME, field.has_presence
            continue
        if sub.GetOptions().map_entry:
            continue
        # a type being planned may reach itself: assume it leads to a namespace
        if sub.full_name in seen or any(True for _ in _fields(sub, set(seen))):
            yield field.name, _MANY if field.is_repeated else _ONE, True


def namespaces_of(msg: Message, depth: int = 0) -> Iterator[str]:
    """Every ``namespace`` a request names (set fields only; a present but
    empty one reads "default"), looking ``MAX_DEPTH`` messages deep and at
    ``MAX_ITEMS`` items of each repeated field."""
    if depth > MAX_DEPTH:
        return
    for name, how, presence in _plan(msg.DESCRIPTOR):
        if how == _NAME:
            value = getattr(msg, name)
            if value:
                yield value
            elif presence and msg.HasField(name):
                yield "default"
        elif how == _ONE:
            if msg.HasField(name):
                yield from namespaces_of(getattr(msg, name), depth + 1)
        else:
            for i, item in enumerate(getattr(msg, name)):
                if i >= MAX_ITEMS:
                    break
                yield from namespaces_of(item, depth + 1)


def authorize_request(guard: Guard, method: str, request: Any) -> None:
    """Raise PermissionDenied unless the caller holds the method's role on every
    namespace the request names (one naming none: as ``NO_NAMESPACE`` says)."""
    if not isinstance(request, Message):
        return
    role = role_of(method)
    who = current_principal.get()
    if who.allows_everywhere(role):
        return  # no namespace it could name is refused: skip the walk
    needed = NO_NAMESPACE.get(method)
    if needed is not None:
        guard.require(needed)
        if not who.namespaces:
            raise PermissionDenied(f"{who.name!r} is granted no namespace; {method} needs one")
        return
    for namespace in set(namespaces_of(request)):
        guard.authorize(namespace, role)
