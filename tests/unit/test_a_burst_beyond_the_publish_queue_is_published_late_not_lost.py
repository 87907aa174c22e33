"""Write-behind publishing under a burst: puts that find the publish queue full
(``publish_queue_bytes``) are deferred and published once the writer has made
room, in order; only beyond ``MAX_DEFERRED_PUBLISHES`` are they skipped and
counted. Runs against an in-memory backend whose uploads wait on a gate, so
the queue fills while the first batch is in flight (no peer needed)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import (
    FlakyStore,
    sample,
)
from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import (
    daemon_on as remote_daemon_on,
)
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon

BLOCK = 4096


class GatedStore(FlakyStore):
    """Uploads wait until ``gate`` is set; records the order names arrive in."""

    def __init__(self) -> None:
        super().__init__(failing_puts=0)
        self.gate = threading.Event()
        self.order: list[str] = []

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        assert self.gate.wait(30), "the test never opened the gate"
        self.order.extend(names)
        return super().put_many(names, values)


def daemon_on(
    store: GatedStore, make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> Daemon:
    """The queue holds four blocks; the writer uploads two at a time."""
    return remote_daemon_on(
        store,
        make_daemon,
        monkeypatch,
        op_timeout_s=30,
        publish_queue_bytes=4 * BLOCK,
        batch_max_objects=2,
    )


def test_puts_beyond_a_full_queue_are_all_published_in_order(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    daemon = daemon_on(store, make_daemon, monkeypatch)
    with Client(daemon.address) as client:
        for i in range(24):  # six times what the queue holds, the writer stuck
            client.put(Kind.KV_BLOCK, f"block-{i:02d}", bytes([i]) * BLOCK)
        assert len(store.values) == 0
        store.gate.set()
        daemon.maintain()  # waits for the writer: queued and deferred publishes
    assert len(store.values) == 24
    # each stored value is a header and the block's bytes
    assert all(v.endswith(bytes([int(n[-2:])]) * BLOCK) for n, v in store.values.items())
    assert [n[-2:] for n in store.order] == [f"{i:02d}" for i in range(24)]
    assert sample(daemon, "tiermem_remote_published_objects_total", result="stored") == 24
    assert sample(daemon, "tiermem_remote_published_objects_total", result="skipped") == 0
    assert sample(daemon, "tiermem_remote_publish_queue_bytes") == 0


def test_beyond_the_deferred_bound_publishes_are_skipped_and_counted(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tiermem.server.services.remote.MAX_DEFERRED_PUBLISHES", 3)
    store = GatedStore()
    daemon = daemon_on(store, make_daemon, monkeypatch)
    with Client(daemon.address) as client:
        for i in range(12):
            client.put(Kind.KV_BLOCK, f"block-{i:02d}", bytes([i]) * BLOCK)
        store.gate.set()
        daemon.maintain()
        for i in range(12):  # skipped publishes lose nothing locally
            assert client.get(Kind.KV_BLOCK, f"block-{i:02d}") == bytes([i]) * BLOCK
    stored = sample(daemon, "tiermem_remote_published_objects_total", result="stored")
    skipped = sample(daemon, "tiermem_remote_published_objects_total", result="skipped")
    assert stored == len(store.values) and stored + skipped == 12
    # at most a batch in flight, four queued and three deferred were kept
    assert 7 <= stored <= 9 and skipped >= 3
