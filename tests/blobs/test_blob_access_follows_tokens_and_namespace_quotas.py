"""Blobs obey the daemon's access rules: tokens' namespaces and roles (reads
need READ, puts, deletes and uploads WRITE, upload ids included) and the
namespace quotas, which count blobs together with objects."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client, Kind
from tiermem.client.errors import CapacityError, PermissionDeniedError
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "admin", "token": "t-admin", "roles": ["admin"]},
    {"name": "writer", "token": "t-w", "namespaces": ["a"], "roles": ["read", "write"]},
    {"name": "reader", "token": "t-r", "namespaces": ["a"], "roles": ["read"]},
]


def test_roles_and_namespaces_of_tokens_apply_to_every_blob_call(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(namespaces=["default", "a", "b"], security={"tokens": TOKENS})
    v = np.ones(4, dtype=np.float32)
    data = pattern(5 * MiB, seed=20)
    with Client(daemon.address, token="t-admin", namespace="b") as admin:
        admin.blobs.put("secret.bin", data, embeddings={"e": v})
    with Client(daemon.address, token="t-w", namespace="a") as w:
        w.blobs.put("mine.bin", data, embeddings={"e": v})
        pending = w.blobs.begin("later.bin", 2 * MiB).upload_id
        for call in (
            lambda: w.blobs.stat("secret.bin", namespace="b"),
            lambda: w.blobs.get("secret.bin", namespace="b"),
            lambda: w.blobs.get("secret.bin", namespace="b", path="grpc"),
            lambda: list(w.blobs.list(namespace="b")),
            lambda: w.blobs.search(vector=v, space="e", namespace="b"),
            lambda: w.blobs.put("x.bin", b"x", namespace="b"),
            lambda: w.blobs.delete("secret.bin", namespace="b"),
        ):
            with pytest.raises(PermissionDeniedError):
                call()
    with Client(daemon.address, token="t-r", namespace="a") as r:
        assert r.blobs.get("mine.bin") == data
        assert [i.key for i in r.blobs.list()] == ["mine.bin"]
        assert r.blobs.search(vector=v, space="e")[0].info.key == "mine.bin"
        for call in (
            lambda: r.blobs.put("new.bin", b"x"),
            lambda: r.blobs.put("big.bin", data),
            lambda: r.blobs.delete("mine.bin"),
            lambda: r.blobs.status(pending),
            lambda: r.blobs.resume(pending, pattern(2 * MiB)),
            lambda: r.blobs.abort(pending),
        ):
            with pytest.raises(PermissionDeniedError):
                call()
        assert r.blobs.stat("mine.bin").version == 1


def test_namespace_quotas_count_blobs_with_objects(make_daemon: Callable[..., Daemon]) -> None:
    limits = {"namespaces": {"q": {"max_bytes": "8MiB", "max_objects": 3}}}
    daemon = make_daemon(namespaces=["default", "q"], limits=limits)
    with Client(daemon.address, namespace="q") as c:
        c.put(Kind.BLOB, "object", b"o" * MiB)
        c.blobs.put("one.bin", pattern(3 * MiB, seed=21))
        with pytest.raises(CapacityError) as err:
            c.blobs.put("two.bin", pattern(5 * MiB, seed=22))  # 1 + 3 + 5 > 8 MiB
        assert "max_bytes" in err.value.message
        with pytest.raises(CapacityError):
            c.put(Kind.BLOB, "object2", b"o" * (5 * MiB))  # objects see the blobs too
        c.blobs.put("two.bin", pattern(2 * MiB, seed=23))
        with pytest.raises(CapacityError) as err:
            c.blobs.put("three.bin", b"small")
        assert "max_objects" in err.value.message
        c.blobs.put("two.bin", pattern(3 * MiB, seed=24))  # replacing stays within quota
        c.blobs.delete("one.bin")
        c.blobs.put("three.bin", b"small")
        assert sorted(i.key for i in c.blobs.list()) == ["three.bin", "two.bin"]
