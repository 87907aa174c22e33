"""A publish waiting in the write-behind queue uploads the object's version
that is current when its turn comes: when a session has taken the key over
meanwhile (its put replaced the unowned version), nothing is uploaded, since
the remote store keeps no owner and other daemons would adopt the session's
block as unowned. Runs against an in-memory backend whose uploads wait on a
gate, so the publish is still queued when the session's put lands."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.test_a_burst_beyond_the_publish_queue_is_published_late_not_lost import (
    BLOCK,
    GatedStore,
)
from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import daemon_on, sample
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon


def test_a_queued_publish_of_a_key_a_session_took_over_uploads_nothing(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    daemon = daemon_on(store, make_daemon, monkeypatch, op_timeout_s=30, batch_max_objects=1)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "first", b"f" * BLOCK)  # the writer waits at the gate
        client.put(Kind.KV_BLOCK, "taken", b"u" * BLOCK)  # queued behind it
        session = client.sessions.open(label="owner")
        client.as_session(session.id).put(Kind.KV_BLOCK, "taken", b"s" * BLOCK)
        store.gate.set()
        daemon.maintain()  # waits for the writer
        assert [n.rsplit("/", 1)[1] for n in store.values] == ["first"]
        assert sample(daemon, "tiermem_remote_published_objects_total", result="stored") == 1
        # still the session's own, read from this daemon
        got = client.as_session(session.id).get(Kind.KV_BLOCK, "taken")
        assert bytes(got) == b"s" * BLOCK
