"""Write-behind publishing survives a slow or failing store: an upload that
fails is retried (PUBLISH_ATTEMPTS tries in all, the writer pausing between
them); after the last it is given up and counted as failed. Runs against an
in-memory backend that fails a scripted number of puts (no peer needed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.services.remote import PUBLISH_ATTEMPTS
from tiermem.server.tiers.remote import RemoteBackend, RemoteError


class FlakyStore(RemoteBackend):
    name = "flaky"

    def __init__(self, failing_puts: int) -> None:
        self.values: dict[str, bytes] = {}
        self.failing_puts = failing_puts
        self.put_calls = 0

    @property
    def address(self) -> str:
        return "memory"

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        self.put_calls += 1
        if self.failing_puts > 0:
            self.failing_puts -= 1
            raise RemoteError("scripted failure")
        self.values.update(zip(names, values, strict=True))
        return [True] * len(names)

    def get_many(self, names: Sequence[str]) -> list[tuple[memoryview, object] | None]:
        return [(memoryview(self.values[n]), None) if n in self.values else None for n in names]

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        return [n in self.values for n in names]

    def delete_many(self, names: Sequence[str]) -> None:
        for n in names:
            self.values.pop(n, None)

    def ping(self) -> None:
        return None

    def close(self) -> None:
        return None


def daemon_on(
    store: FlakyStore,
    make_daemon: Callable[..., Daemon],
    monkeypatch: pytest.MonkeyPatch,
    **settings: Any,
) -> Daemon:
    """A daemon whose remote tier is ``store``; ``settings`` add to or replace
    the ``tiers.remote`` settings."""
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    remote: dict[str, Any] = {
        "enabled": True,
        "deployment": "unit",
        "retries": 0,
        "breaker_failures": 100,  # count every failure, never open
        **settings,
    }
    return make_daemon(tiers={"remote": remote})


def sample(daemon: Daemon, name: str, **labels: str) -> float:
    return daemon.metrics.registry.get_sample_value(name, labels) or 0.0


def test_an_upload_that_fails_is_published_on_a_later_try(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=PUBLISH_ATTEMPTS - 1)
    daemon = daemon_on(store, make_daemon, monkeypatch)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "block", b"x" * 4096)
        daemon.maintain()  # waits for the writer, retries included
    assert store.put_calls == PUBLISH_ATTEMPTS
    assert len(store.values) == 1
    assert sample(daemon, "tiermem_remote_published_objects_total", result="stored") == 1
    assert sample(daemon, "tiermem_remote_published_objects_total", result="failed") == 0
    assert sample(daemon, "tiermem_remote_operations_total", op="put", result="failed") == (
        PUBLISH_ATTEMPTS - 1
    )


def test_an_upload_that_keeps_failing_is_given_up_and_counted(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=1000)
    daemon = daemon_on(store, make_daemon, monkeypatch)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "block", b"x" * 4096)
        daemon.maintain()
        assert client.get(Kind.KV_BLOCK, "block") == b"x" * 4096  # still served locally
    assert store.put_calls == PUBLISH_ATTEMPTS and not store.values
    assert sample(daemon, "tiermem_remote_published_objects_total", result="failed") == 1
    assert sample(daemon, "tiermem_remote_publish_queue_bytes") == 0
