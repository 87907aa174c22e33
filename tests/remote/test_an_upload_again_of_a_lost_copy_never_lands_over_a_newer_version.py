"""A demotion that sends a value again because the store lost its published
copy is ordered with the remote writer like a first upload: it holds the key's
claim from the upload to the switch. An overwrite during that upload therefore
cannot be published before it, and the older upload, not recorded, is deleted
again. It used to upload without the claim: an overwrite published meanwhile
was replaced by the older value when the slow upload landed, and other
daemons read that stale value as current."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.remote.conftest import Peer, forget, remote_config
from tiermem.client import Client, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.tiers.remote import remote_name

MiB = 1 << 20
NODE = {  # room for the blocks below the high watermark; the newer ones go over it
    "dram": {"capacity_bytes": 16 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}
KEY = "lost-then-overwritten"


def test_an_upload_again_never_replaces_an_overwrite_published_meanwhile(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote, tiers=NODE, background={"migrate_interval_s": 60})
    b = make_remote_daemon("b", remote)
    old, new = os.urandom(MiB), os.urandom(MiB)
    assert a.remote is not None and a.store.remote is not None
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.put(Kind.KV_BLOCK, KEY, old)  # the coldest: demoted first
        for i in range(5):
            ca.put(Kind.KV_BLOCK, f"other-{i}", os.urandom(MiB))
        assert a.remote.flush(10)  # all published
        key = ObjectKey("default", ServerKind.KV_BLOCK, KEY)
        forget(peer, [remote_name(remote["deployment"], key)])  # the store lost it

        # the demotion's upload of the old value waits until the overwrite is in
        entered, go_on = threading.Event(), threading.Event()
        put = a.store.remote.put

        def slow_put(items: Any) -> list[bool]:
            # a demotion's upload (the migrator's, or maintain's), not a publish
            demotion = threading.current_thread().name != "tiermem-remote-writer"
            if demotion and not go_on.is_set() and any(m.key.key == KEY for m, _ in items):
                entered.set()
                assert go_on.wait(30)
            return put(items)

        monkeypatch.setattr(a.store.remote, "put", slow_put)
        for i in range(4):
            ca.put(Kind.KV_BLOCK, f"newer-{i}", os.urandom(MiB))
        demoting = threading.Thread(target=a.maintain)
        demoting.start()
        try:
            assert entered.wait(30), "the demotion did not upload the lost copy again"
            ca.put(Kind.KV_BLOCK, KEY, new)  # overwritten while that upload is on the wire
            a.remote.flush(2)  # the overwrite's publish (it waits for the claim now)
        finally:
            go_on.set()
            demoting.join(60)
        assert a.remote.flush(10)
        # this daemon and another find the new value, or nothing (a CACHE block
        # may be dropped under memory pressure): never the old one
        for client in (ca, cb):
            try:
                seen = client.get(Kind.KV_BLOCK, KEY)
            except NotFoundError:
                continue
            assert seen == new
