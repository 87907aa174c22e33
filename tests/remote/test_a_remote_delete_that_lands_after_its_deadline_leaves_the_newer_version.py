"""A remote delete the daemon gave up at its deadline may still be carried out
by the store later (a slow Redis node runs the DEL it received). A newer
version published meanwhile under the same name was then removed by it: the
catalog said the store held the object, the store held nothing. Now, after a
delete of a key fails, nothing is uploaded under its name (no publish, no
demotion) until a later delete of it, started once the failed call had ended,
is confirmed by the store. The late delete is simulated by a backend whose
first DEL is sent only after the daemon's deadline has passed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.remote.conftest import Peer, remote_config
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.tiers.remote import RemoteBackend

KEY = ObjectKey("default", ServerKind.KV_BLOCK, "block").encode()
OP_TIMEOUT_S = 0.5
#: how long the slow DEL waits before it reaches the store (past the deadline)
LATE_S = 1.5


class LateDeletes:
    """The real backend, except that the first DEL after ``arm`` reaches the store
    ``LATE_S`` after it was sent (``landed`` is set then)."""

    def __init__(self, inner: RemoteBackend) -> None:
        self.inner = inner
        self.armed = False
        self.sent = threading.Event()
        self.landed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete_many(self, names: Sequence[str]) -> None:
        if self.armed:
            self.armed = False
            self.sent.set()
            time.sleep(LATE_S)
            self.inner.delete_many(names)
            self.landed.set()
            return
        self.inner.delete_many(names)


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_a_delete_that_lands_late_leaves_the_version_published_after_it(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tiermem.server.app as app

    backends: list[LateDeletes] = []
    real = app.make_backend

    def make(config: Any) -> Any:
        backends.append(LateDeletes(real(config)))
        return backends[-1]

    monkeypatch.setattr(app, "make_backend", make)
    remote = remote_config(peer, op_timeout_s=OP_TIMEOUT_S, retries=0)
    daemon = make_remote_daemon("a", remote, background={"migrate_interval_s": 60})
    service = daemon.remote
    assert service is not None
    with Client(daemon.address) as c:
        c.put(Kind.KV_BLOCK, "block", b"1" * 4096)
        assert service.flush(10)
        assert service.remote.exists([KEY])[0]  # v1 published
        backends[0].armed = True
        assert c.delete(Kind.KV_BLOCK, "block")
        assert backends[0].sent.wait(10)
        time.sleep(OP_TIMEOUT_S + 0.2)  # the daemon gave the delete up
        c.put(Kind.KV_BLOCK, "block", b"2" * 4096)  # v2, published while the DEL is late
        assert backends[0].landed.wait(10)
        deadline = time.monotonic() + 10
        while True:
            got = service.remote.get([KEY])[0]
            if got is not None and not isinstance(got, Exception):
                payload = bytes(got.payload)
                got.release()
                if payload == b"2" * 4096:
                    break
            assert time.monotonic() < deadline, "the late delete removed the newer version"
            time.sleep(0.2)
        assert c.get(Kind.KV_BLOCK, "block") == b"2" * 4096
