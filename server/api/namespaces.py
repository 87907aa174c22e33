"""Namespace authorization for every RPC, from the request itself.

Every request field named ``namespace`` (at any depth up to ``MAX_DEPTH``, in
repeated fields too) is authorized for the method's role before the service
runs: read-only methods need READ, everything else WRITE. Services still call
the guard themselves where a namespace is implied rather than named (a session
id, for instance); this check makes sure no service can forget the named ones.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

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
    namespace the request names."""
    if not isinstance(request, Message):
        return
    role = role_of(method)
    if current_principal.get().allows_everywhere(role):
        return  # no namespace it could name is refused: skip the walk
    for namespace in set(namespaces_of(request)):
        guard.authorize(namespace, role)
