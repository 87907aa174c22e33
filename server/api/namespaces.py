"""Namespace authorization for every RPC, from the request itself.

Every request field named ``namespace`` (at any depth up to ``MAX_DEPTH``, in
repeated fields too) is authorized for the method's role before the service
runs: read-only methods need READ, everything else WRITE. Services still call
the guard themselves where a namespace is implied rather than named (a session
id, for instance); this check makes sure no service can forget the named ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.message import Message

from tiermem.server.services.guard import Guard, Role

MAX_DEPTH = 4
#: Most repeated sub-messages looked at per field (requests are size-bounded anyway).
MAX_ITEMS = 100_000
#: Method-name prefixes of read-only RPCs.
READ_PREFIXES = (
    "Get", "Stat", "List", "Lookup", "Describe", "Search", "Count", "Replay", "Query",
    "Lease", "BeginGet", "Hello", "Prefetch", "Release",
)  # fmt: skip


def role_of(method: str) -> Role:
    """Role a method needs on the namespaces its request names ("/pkg.Svc/Name")."""
    name = method.rsplit("/", 1)[-1]
    return Role.READ if name.startswith(READ_PREFIXES) else Role.WRITE


def namespaces_of(msg: Message, depth: int = 0) -> Iterator[str]:
    if depth > MAX_DEPTH:
        return
    for field, value in msg.ListFields():
        if field.message_type is None:
            if field.name == "namespace" and isinstance(value, str):
                yield value or "default"
            continue
        if field.is_repeated:
            if field.message_type.GetOptions().map_entry:
                continue
            for i, item in enumerate(value):
                if i >= MAX_ITEMS:
                    break
                yield from namespaces_of(item, depth + 1)
        else:
            yield from namespaces_of(value, depth + 1)


def authorize_request(guard: Guard, method: str, request: Any) -> None:
    """Raise PermissionDenied unless the caller holds the method's role on every
    namespace the request names."""
    if not isinstance(request, Message):
        return
    role = role_of(method)
    for namespace in set(namespaces_of(request)):
        guard.authorize(namespace, role)
