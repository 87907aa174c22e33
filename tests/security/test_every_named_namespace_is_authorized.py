"""The access interceptor authorizes every namespace a request names, for every
service: a token granted one namespace cannot reach another through KV, vector,
placement or any other RPC."""

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message

from tiermem.client import Client, Kind, KvScope, PermissionDeniedError
from tiermem.server.api.namespaces import MAX_DEPTH, namespaces_of, role_of
from tiermem.server.app import Daemon
from tiermem.server.services.guard import Role
from tiermem.v1 import kv_pb2, placement_pb2

#: Every module of request and reply messages (the records' are never requests).
PROTO_MODULES = [
    importlib.import_module(f"tiermem.v1.{name}_pb2")
    for name in (
        "admin", "blobs", "common", "dataplane", "kv", "object", "operators",
        "placement", "scratch", "sessions", "vectors",
    )
]  # fmt: skip


def test_role_follows_the_method_name() -> None:
    assert role_of("/tiermem.v1.KvService/LookupPrefix") == Role.READ
    assert role_of("/tiermem.v1.VectorService/Search") == Role.READ
    assert role_of("/tiermem.v1.KvService/PutBlocks") == Role.WRITE
    assert role_of("/tiermem.v1.PlacementService/Pin") == Role.WRITE


def test_namespaces_are_found_at_any_depth_and_in_lists() -> None:
    msg = placement_pb2.PrefetchRequest()
    for ns in ("a", "b", "a"):
        msg.keys.add(namespace=ns, kind=1, key="k")
    assert sorted(set(namespaces_of(msg))) == ["a", "b"]
    scoped = kv_pb2.LookupPrefixRequest()
    scoped.scope.namespace = "deep"
    assert list(namespaces_of(scoped)) == ["deep"]


def test_a_token_cannot_reach_other_namespaces_through_any_service(
    make_daemon: Callable[..., Any],
) -> None:
    tokens = [
        {"name": "admin", "token": "t-admin", "roles": ["admin"]},
        {"name": "a", "token": "t-a", "namespaces": ["a"], "roles": ["read", "write"]},
    ]
    daemon: Daemon = make_daemon(security={"tokens": tokens}, namespaces=["default", "a", "b"])
    with Client(daemon.address, token="t-admin", namespace="b") as admin:
        admin.put(Kind.BLOB, "secret", b"b's data")
        admin.vectors.create("vb", 4)
        admin.vectors.upsert("vb", [1], np.ones((1, 4), dtype=np.float32))
    scope_b = KvScope("m", world_size=1, worker_id=0, dtype="float32", namespace="b")
    with Client(daemon.address, token="t-a", namespace="b", fast_paths=()) as a:
        for call in (
            lambda: a.kv.lookup_prefix(scope_b, [1, 2, 3]),
            lambda: a.vectors.search("vb", np.ones((1, 4), dtype=np.float32), 1),
            lambda: a.vectors.create("vb2", 4),
            lambda: a.placement.prefetch([(Kind.BLOB, "secret")]),
            lambda: a.get(Kind.BLOB, "secret"),
        ):
            with pytest.raises(PermissionDeniedError):
                call()
    with Client(daemon.address, token="t-a", namespace="a") as a:
        a.put(Kind.BLOB, "mine", b"ok")  # its own namespace works
        assert a.get(Kind.BLOB, "mine") == b"ok"


def _every_field_walk(msg: Message, depth: int = 0) -> Iterator[str]:
    """The obvious walk (every set field), which ``namespaces_of`` must agree with."""
    if depth > MAX_DEPTH:
        return
    for field, value in msg.ListFields():
        if field.message_type is None:
            if field.name == "namespace" and isinstance(value, str):
                yield value or "default"
        elif field.is_repeated:
            if not field.message_type.GetOptions().map_entry:
                for item in value:
                    yield from _every_field_walk(item, depth + 1)
        else:
            yield from _every_field_walk(value, depth + 1)


def _filled(descriptor: Any, depth: int, tag: list[int]) -> Message:
    """A message with every field that can hold a namespace set (two items per
    list), each namespace distinct, nested as deep as the walk looks and beyond."""
    msg = message_factory.GetMessageClass(descriptor)()
    if depth > MAX_DEPTH + 1:
        return msg
    for field in descriptor.fields:
        if field.message_type is None:
            if field.name == "namespace" and field.type == field.TYPE_STRING:
                tag[0] += 1
                setattr(msg, field.name, f"ns{tag[0]}")
            continue
        if field.message_type.GetOptions().map_entry:
            continue
        if field.is_repeated:
            for _ in range(2):
                getattr(msg, field.name).add().CopyFrom(_filled(field.message_type, depth + 1, tag))
        elif field.containing_oneof is None or not msg.HasField(field.containing_oneof.name):
            getattr(msg, field.name).CopyFrom(_filled(field.message_type, depth + 1, tag))
    return msg


@pytest.mark.parametrize("module", PROTO_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_planned_walk_finds_what_walking_every_field_finds(module: Any) -> None:
    for descriptor in module.DESCRIPTOR.message_types_by_name.values():
        full = _filled(descriptor, 0, [0])
        assert sorted(namespaces_of(full)) == sorted(_every_field_walk(full)), descriptor.name
        empty = message_factory.GetMessageClass(descriptor)()
        assert list(namespaces_of(empty)) == list(_every_field_walk(empty)) == []
