"""A remote delete queued for an older version of a key (an overwrite with
sharing off, a skipped publish) never removes the newer version a demotion
uploads before the delete's turn comes: demotions upload directly, not through
the writer's queue, and the delete used to remove whatever the store held, so
the object, served from the remote tier (its SSD copy released by the move),
was lost. A delete now spares a key whose current version has a remote copy,
and a demotion's upload and catalog switch never interleave with the writer's
ops on that key. Runs against an in-memory backend (no peer needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore, sample
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier

BLOCK = 4096
KEY = ObjectKey("default", ServerKind.KV_BLOCK, "block").encode()
OTHER = ObjectKey("default", ServerKind.KV_BLOCK, "other").encode()


class GatedStore(FlakyStore):
    """Uploads (``gated_puts``) and deletes (``gated_deletes``) of names ending in
    one of those suffixes wait for ``gate``; ``waiting`` is set once one does."""

    def __init__(self) -> None:
        super().__init__(failing_puts=0)
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()
        self.gated_puts: tuple[str, ...] = ()
        self.gated_deletes: tuple[str, ...] = ()

    def _wait(self, names: Sequence[str], gated: tuple[str, ...]) -> None:
        if any(n.endswith(gated) for n in names):
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        self._wait(names, self.gated_puts)
        return super().put_many(names, values)

    def delete_many(self, names: Sequence[str]) -> None:
        self._wait(names, self.gated_deletes)
        super().delete_many(names)

    def hold(self, *, puts: tuple[str, ...] = (), deletes: tuple[str, ...] = ()) -> None:
        self.gated_puts, self.gated_deletes = puts, deletes
        self.gate.clear()

    def block(self) -> bytes | None:
        return next((v for n, v in self.values.items() if n.endswith("/block")), None)


def daemon_on(
    store: GatedStore,
    make_daemon: Callable[..., Daemon],
    monkeypatch: pytest.MonkeyPatch,
    **settings: Any,
) -> Daemon:
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    remote = {
        "enabled": True,
        "deployment": "unit",
        "retries": 0,
        "breaker_failures": 100,
        "op_timeout_s": 30,
    }
    return make_daemon(
        tiers={"remote": {**remote, **settings}}, background={"migrate_interval_s": 3600}
    )


def demote(daemon: Daemon) -> None:
    """Demote the block to the remote tier by way of the SSD (a persisted copy,
    released by the move)."""
    daemon.mover.move(KEY, ServerTier.SSD)
    assert daemon.mover.move(KEY, ServerTier.REMOTE)


def still_served(daemon: Daemon, store: GatedStore, data: bytes) -> None:
    daemon.maintain()
    assert store.block() is not None and store.block().endswith(data)  # type: ignore[union-attr]
    entry = daemon.store.catalog.find(KEY)
    assert entry is not None and entry.tier == ServerTier.REMOTE
    with Client(daemon.address) as c:
        assert c.get(Kind.KV_BLOCK, "block") == data


def test_an_overwrites_delete_spares_the_new_version_demoted_before_its_turn(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    a = daemon_on(store, make_daemon, monkeypatch, share=False)
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)
        assert a.mover.move(OTHER, ServerTier.REMOTE)
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        assert a.mover.move(KEY, ServerTier.REMOTE)  # v1 in the store
        store.hold(deletes=("/other",))
        c.delete(Kind.KV_BLOCK, "other")  # the writer is stuck deleting it
        # (alone: a delete of v1 queued before the writer takes this one would
        # join its batch, and the demotion would wait for that batch)
        assert store.waiting.wait(10)
        c.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # a delete of v1 queued behind
        demote(a)  # v2 uploaded directly, before that delete's turn
        store.gate.set()
    still_served(a, store, b"2" * BLOCK)


def test_a_skipped_publishs_delete_spares_the_version_demoted_before_its_turn(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tiermem.server.services.remote.MAX_DEFERRED_PUBLISHES", 0)
    store = GatedStore()
    a = daemon_on(store, make_daemon, monkeypatch, publish_queue_bytes=BLOCK)
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()  # v1 published
        store.hold(puts=("/other",))
        c.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)  # the writer is stuck uploading it
        assert store.waiting.wait(10)
        c.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # queue full: skipped, v1's delete queued
        assert sample(a, "tiermem_remote_published_objects_total", result="skipped") == 1
        demote(a)
        store.gate.set()
    still_served(a, store, b"2" * BLOCK)


def test_a_delete_never_runs_between_a_demotions_upload_and_its_switch(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    a = daemon_on(store, make_daemon, monkeypatch, share=False)
    faults = a.store.faults
    real_point = faults.point
    uploaded, switch = threading.Event(), threading.Event()

    def point(name: str) -> None:
        if name == "move.after_copy" and threading.current_thread().name == "demotion":
            uploaded.set()
            assert switch.wait(30)
        real_point(name)

    monkeypatch.setattr(faults, "point", point)
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)
        assert a.mover.move(OTHER, ServerTier.REMOTE)
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        assert a.mover.move(KEY, ServerTier.REMOTE)
        store.hold(deletes=("/other",))
        c.delete(Kind.KV_BLOCK, "other")
        assert store.waiting.wait(10)  # the writer holds that delete alone (see above)
        c.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)
        a.mover.move(KEY, ServerTier.SSD)
        demotion = threading.Thread(
            target=lambda: a.mover.move(KEY, ServerTier.REMOTE), name="demotion"
        )
        demotion.start()
        try:
            assert uploaded.wait(30)  # v2 is in the store; the catalog does not say so yet
            store.gate.set()  # the writer reaches the delete of v1 now
            time.sleep(0.3)
            assert (store.block() or b"").endswith(b"2" * BLOCK)  # not deleted meanwhile
        finally:
            switch.set()
            demotion.join(30)
    still_served(a, store, b"2" * BLOCK)


def test_a_demotion_waits_for_a_delete_of_its_key_in_flight(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    a = daemon_on(store, make_daemon, monkeypatch, share=False)
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        assert a.mover.move(KEY, ServerTier.REMOTE)
        store.hold(deletes=("/block",))
        c.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # the delete of v1 is sent, slowly
        assert store.waiting.wait(10)
        a.mover.move(KEY, ServerTier.SSD)
        threading.Timer(0.3, store.gate.set).start()
        demote(a)  # uploads once that delete is done
    still_served(a, store, b"2" * BLOCK)
