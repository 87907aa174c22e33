"""A put admitted as an overwrite adds nothing to its namespace's object count
(and only the size difference to its bytes). When the object it would replace
is deleted before the put commits, the put creates an object after all: its
commit now checks the namespace quotas again for what it adds beyond its
admission. It used to commit regardless, and a put admitted in between
(into the room the delete made) took the namespace past ``max_objects`` or
``max_bytes``. The overwrite is held open mid-stream while the delete and the
other put run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import xxhash

from tests.integration.test_limits_answer_resource_exhausted_or_deadline_exceeded import (
    HeldPut,
    refused,
    wait_admitted,
)
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Profile as ServerProfile
from tiermem.server.services.objects import FilledPut, PutSpec


def test_an_overwrite_whose_object_was_deleted_keeps_max_objects(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        namespaces=["default", "small"], limits={"namespaces": {"small": {"max_objects": 1}}}
    )
    with Client(daemon.address, namespace="small", retries=0) as c:
        c.put(Kind.BLOB, "a", b"a" * 10)
        held = HeldPut(daemon.address, "small", "a", 100, first=10)  # admitted: an overwrite
        try:
            wait_admitted(daemon, 100)
            c.delete(Kind.BLOB, "a")
            c.put(Kind.BLOB, "b", b"b" * 10)  # the room the delete made
        finally:
            held.finish()
        assert held.error is not None
        assert held.error.code().name == "RESOURCE_EXHAUSTED"
        assert "max_objects is 1" in (held.error.details() or "")
        assert sorted(o.key for o in c.list()) == ["b"]
        assert "max_objects is 1" in refused(lambda: c.put(Kind.BLOB, "c", b"c"))
    assert daemon.store.guard.inflight_bytes == 0


def test_an_overwrite_whose_object_was_deleted_keeps_max_bytes(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        namespaces=["default", "small"], limits={"namespaces": {"small": {"max_bytes": 1000}}}
    )
    with Client(daemon.address, namespace="small", retries=0) as c:
        c.put(Kind.BLOB, "a", b"a" * 600)
        held = HeldPut(daemon.address, "small", "a", 900, first=10)  # admitted: +300 bytes
        try:
            wait_admitted(daemon, 900)
            c.delete(Kind.BLOB, "a")
            c.put(Kind.BLOB, "b", b"b" * 500)  # 500 + 300 pending: fits
        finally:
            held.finish()
        assert held.error is not None
        assert held.error.code().name == "RESOURCE_EXHAUSTED"
        assert "max_bytes=1000" in (held.error.details() or "")
        assert sorted(o.key for o in c.list()) == ["b"]
        # a put that fits is still admitted after the refusal
        c.put(Kind.BLOB, "a", b"a" * 500)
    assert daemon.store.guard.inflight_bytes == 0


def test_a_batch_whose_overwritten_object_was_deleted_keeps_max_objects(
    make_daemon: Callable[..., Daemon],
) -> None:
    """The batch path (data plane, remote fills) admits a batch, writes its
    bytes, then commits: the delete and the other put run in between."""
    daemon = make_daemon(
        namespaces=["default", "small"], limits={"namespaces": {"small": {"max_objects": 2}}}
    )
    objects = daemon.objects
    with Client(daemon.address, namespace="small", retries=0) as c:
        c.put(Kind.BLOB, "a", b"a" * 10)
        puts = []
        for name in ("a", "x"):  # an overwrite and a new object: +1, fits
            data = name.encode() * 20
            key = ObjectKey("small", ServerKind.BLOB, name)
            spec = PutSpec(key=key, size_bytes=len(data), profile=ServerProfile())
            profile = objects.prepare(spec)
            reservation = objects.reserve(len(data), profile, ServerKind.BLOB)
            reservation.buffer[: len(data)] = data
            puts.append(FilledPut(spec, profile, reservation, xxhash.xxh3_64_intdigest(data)))
        real = objects._commit_admitted
        raced: list[bool] = []

        def racing(*args: Any, **kwargs: Any) -> Any:
            if not raced:  # (the put below commits through here too)
                raced.append(True)
                c.delete(Kind.BLOB, "a")
                c.put(Kind.BLOB, "b", b"b" * 10)  # the room the delete made
            return real(*args, **kwargs)

        objects._commit_admitted = racing  # type: ignore[method-assign]
        try:
            with pytest.raises(CapacityExceeded, match="max_objects is 2"):
                objects.commit_filled_many(puts, path="grpc")
        finally:
            objects._commit_admitted = real  # type: ignore[method-assign]
        assert sorted(o.key for o in c.list()) == ["b"]
    assert daemon.store.guard.inflight_bytes == 0
