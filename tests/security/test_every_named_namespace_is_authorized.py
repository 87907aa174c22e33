"""The access interceptor authorizes every namespace a request names, for every
service: a token granted one namespace cannot reach another through KV, vector,
placement or any other RPC."""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tiermem.client import Client, Kind, KvScope, PermissionDeniedError
from tiermem.server.api.namespaces import namespaces_of, role_of
from tiermem.server.app import Daemon
from tiermem.server.services.guard import Role
from tiermem.v1 import kv_pb2, placement_pb2


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
