"""An overwrite evicted before its publish's turn (an eviction keeps the remote
name) never reads back the old version: the publish used to find no object,
count it skipped and leave the old version in the store, where the next read
of this daemon found no entry and adopted it. The publish now deletes it
(ordered as the other deletes), and reads treat the key as a miss until then.
Runs against an in-memory backend whose uploads of one key wait on a gate (no
peer needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore, sample
from tiermem.client import Client, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

BLOCK = 4096
KEY = ObjectKey("default", ServerKind.KV_BLOCK, "block").encode()


class OtherGatedStore(FlakyStore):
    """Uploads of "other" wait for ``gate`` (the writer is busy meanwhile)."""

    def __init__(self) -> None:
        super().__init__(failing_puts=0)
        self.gate = threading.Event()
        self.gate.set()

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        if any(n.endswith("/other") for n in names):
            assert self.gate.wait(30), "the test never opened the gate"
        return super().put_many(names, values)

    def block(self) -> bytes | None:
        return next((v for n, v in self.values.items() if n.endswith("/block")), None)


def overwritten_then_evicted(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch, store: OtherGatedStore
) -> Daemon:
    """v1 published; v2 put while the writer is busy, and evicted before its
    publish's turn (the gate is left closed)."""
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    remote = {
        "enabled": True,
        "deployment": "unit",
        "retries": 0,
        "breaker_failures": 100,
        "op_timeout_s": 30,
    }
    a = make_daemon(
        tiers={"remote": {**remote, "batch_max_objects": 1}},
        background={"migrate_interval_s": 3600},
    )
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()  # v1 published
        store.gate.clear()
        c.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)  # the writer is stuck uploading it
        time.sleep(0.3)
        c.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # v2's publish queued behind it
        entry = a.store.catalog.find(KEY)
        assert entry is not None and a.mover.evict(KEY, entry.tier) > 0
    return a


def test_the_publish_of_an_evicted_overwrite_deletes_the_old_version(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = OtherGatedStore()
    a = overwritten_then_evicted(make_daemon, monkeypatch, store)
    store.gate.set()
    a.maintain()
    assert sample(a, "tiermem_remote_published_objects_total", result="skipped") == 1
    assert store.block() is None
    with Client(a.address) as c, pytest.raises(NotFoundError):
        c.get(Kind.KV_BLOCK, "block")


def test_a_read_before_that_publish_runs_is_a_miss(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = OtherGatedStore()
    a = overwritten_then_evicted(make_daemon, monkeypatch, store)
    assert a.remote is not None
    try:
        assert a.remote.fetch([KEY]) == 0
        with Client(a.address) as c, pytest.raises(NotFoundError):
            c.get(Kind.KV_BLOCK, "block")
    finally:
        store.gate.set()
    a.maintain()
    assert store.block() is None
