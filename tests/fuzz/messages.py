"""Random and malformed protobuf messages for any method, found by reflection.

``methods(channel)`` lists every method the daemon registered (through its
reflection service), so services added later are fuzzed without changes here;
``declared_methods()`` lists every RPC declared in proto/ (the compiled
descriptors), to check that none goes unregistered or unfuzzed.
``random_message`` builds a structurally valid message of a type with hostile
field values: boundary integers, unknown enum values, over-long and traversal-
looking strings, NULs, names that exist ("default") and ones that do not.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor, descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

FD = descriptor.FieldDescriptor

INTS = [0, 1, 2, 3, 4, 5, 7, 9, 100, 1000, 4096, 65535, 1 << 20, 2**31 - 1, 2**32 - 1]
INTS_64 = [*INTS, 2**40, 2**53, 2**63 - 1]
STRINGS = [
    "", "default", "fuzz", "k", "key-1", "../../etc/passwd", "..", "/", "a\x00b",
    "x" * 1025, "ä" * 700, "*", "seg-0000000001.dat", "Bearer", "\n", " ", "ns.with.dots",
]  # fmt: skip


@dataclass(frozen=True)
class Method:
    path: str  # "/package.Service/Method"
    input: descriptor.Descriptor
    client_streaming: bool
    server_streaming: bool

    def message_class(self) -> Any:
        return message_factory.GetMessageClass(self.input)


def methods(channel: grpc.Channel) -> list[Method]:
    """Every method of every service the server registered (reflection)."""
    db = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(db)
    out = []
    for service_name in db.get_services():
        service = pool.FindServiceByName(service_name)
        for m in service.methods:
            out.append(
                Method(
                    f"/{service.full_name}/{m.name}",
                    m.input_type,
                    m.client_streaming,
                    m.server_streaming,
                )
            )
    return out


def declared_methods() -> list[Method]:
    """Every RPC declared in proto/, from the compiled descriptors (``*_pb2``)."""
    import tiermem.v1

    out = []
    for info in sorted(pkgutil.iter_modules(tiermem.v1.__path__), key=lambda i: i.name):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"tiermem.v1.{info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                out.append(
                    Method(
                        f"/{service.full_name}/{m.name}",
                        m.input_type,
                        m.client_streaming,
                        m.server_streaming,
                    )
                )
    return out


def random_bytes(rng: random.Random) -> bytes:
    n = rng.choice([0, 1, 2, 5, 17, 100, 1000, rng.randrange(1, 70_000)])
    return rng.randbytes(n)


def _scalar(field: descriptor.FieldDescriptor, rng: random.Random) -> Any:
    t = field.type
    if t in (FD.TYPE_STRING,):
        return rng.choice(STRINGS) if rng.random() < 0.8 else rng.randbytes(8).hex()
    if t == FD.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 1, 4, 100, 5000]))
    if t == FD.TYPE_BOOL:
        return rng.random() < 0.5
    if t == FD.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return rng.choice([*values, 99, -1, 2**31 - 1])
    if t in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return rng.choice([0.0, -1.0, 1e-9, 1e30, float("inf"), float("nan")])
    if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return rng.choice([0, 1, -1, 2**31 - 1, -(2**31)])
    if t in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
        return rng.choice([0, 1, -1, 2**63 - 1, -(2**63)])
    if t in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return rng.choice(INTS)
    return rng.choice(INTS_64)  # uint64, fixed64


def _repeated(field: descriptor.FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(field.label == FD.LABEL_REPEATED)


#: Field name -> values a targeted message gives it (see ``random_message``).
Favour = Mapping[str, Sequence[Any]]


def _value(field: descriptor.FieldDescriptor, rng: random.Random, favour: Favour | None) -> Any:
    choices = favour.get(field.name) if favour else None
    if choices and rng.random() < 0.8:
        value = rng.choice(choices)
        string = field.type == FD.TYPE_STRING
        if (string and isinstance(value, str)) or (not string and isinstance(value, int)):
            return value
    return _scalar(field, rng)


def fill(msg: Any, rng: random.Random, depth: int = 0, favour: Favour | None = None) -> Any:
    """Set a random subset of ``msg``'s fields to hostile values (most of them
    with ``favour``, so that a message names what it favours more often)."""
    skip = 0.1 if favour else 0.35
    for field in msg.DESCRIPTOR.fields:
        if rng.random() < skip:
            continue
        is_repeated = _repeated(field)
        if field.type == FD.TYPE_MESSAGE:
            if depth >= 3 or field.message_type.GetOptions().map_entry:
                continue
            if is_repeated:
                for _ in range(rng.randrange(0, 3)):
                    fill(getattr(msg, field.name).add(), rng, depth + 1, favour)
            else:
                fill(getattr(msg, field.name), rng, depth + 1, favour)
                getattr(msg, field.name).SetInParent()
        elif is_repeated:
            values = [_value(field, rng, favour) for _ in range(rng.randrange(4))]
            getattr(msg, field.name).extend(values)
        else:
            setattr(msg, field.name, _value(field, rng, favour))
    return msg


def random_message(method: Method, rng: random.Random, favour: Favour | None = None) -> bytes:
    """A message for ``method``; ``favour`` (field name -> values) makes most
    fields of those names take one of those values, e.g. names of stored data."""
    return fill(method.message_class()(), rng, favour=favour).SerializeToString()  # type: ignore[no-any-return]
