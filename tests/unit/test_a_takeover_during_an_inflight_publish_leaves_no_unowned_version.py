"""A session's put that takes over an unowned key while that key's publish is
uploading deletes the uploaded version once the upload lands: the remote store
keeps no owner, and other daemons would go on adopting the version the session
replaced. Before, nothing queued that delete (``_replaced`` sees no remote copy
yet, the session's put publishes nothing, and the publish only skipped marking
the changed entry). Runs against an in-memory backend whose uploads wait on a
gate, so the session's put lands while the upload is in flight."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from tests.unit.test_a_burst_beyond_the_publish_queue_is_published_late_not_lost import (
    BLOCK,
    GatedStore,
)
from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import daemon_on
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon


class EnteredGatedStore(GatedStore):
    """A GatedStore that says when an upload has started (and waits at the gate)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        self.entered.set()
        return super().put_many(names, values)


@pytest.mark.parametrize("same_bytes", [False, True], ids=["other-bytes", "same-bytes"])
def test_a_takeover_during_the_upload_leaves_no_unowned_version(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch, same_bytes: bool
) -> None:
    store = EnteredGatedStore()
    daemon = daemon_on(store, make_daemon, monkeypatch, op_timeout_s=30, batch_max_objects=1)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "taken", b"u" * BLOCK)  # its upload waits at the gate
        assert store.entered.wait(10)
        session = client.sessions.open(label="owner")
        mine = b"u" * BLOCK if same_bytes else b"s" * BLOCK
        client.as_session(session.id).put(Kind.KV_BLOCK, "taken", mine)
        store.gate.set()
        daemon.maintain()  # waits for the writer (and the delete it queued)
        left = [n.rsplit("/", 1)[1] for n in store.values]
        assert left == [], f"the unowned version the session took over is still shared: {left}"
        # the session's own version is still read from this daemon
        got = client.as_session(session.id).get(Kind.KV_BLOCK, "taken")
        assert bytes(got) == mine
