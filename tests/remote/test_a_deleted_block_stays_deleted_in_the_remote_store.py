"""A block deleted here stays deleted in the shared remote store, whatever the
writer is doing at that moment. Deleted while its publish was uploading (it
had no remote copy yet, so no remote delete was queued), the upload then
landed and left it in the store for good; read again before the writer's
remote delete ran, it was fetched from the store and adopted back as a local
object, and stayed after the delete."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.remote.conftest import Peer, remote_config
from tiermem.client import Client, KvScope
from tiermem.server.app import Daemon


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_a_block_deleted_while_it_is_published_is_not_found(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    scope = KvScope("del-model", dtype="float32")
    daemon = make_remote_daemon("a", remote_config(peer), background={"migrate_interval_s": 60})
    tier = daemon.remote.remote
    real_put = tier.put
    uploading, go = threading.Event(), threading.Event()

    def held_put(items: Any) -> Any:
        uploading.set()
        go.wait(10)
        return real_put(items)

    tier.put = held_put  # type: ignore[method-assign]
    with Client(daemon.address) as c:
        c.kv.put(scope, 777, torch.arange(4096, dtype=torch.float32))
        assert uploading.wait(10)
        assert c.kv.delete()[0] == 1  # while the upload is on its way
        go.set()
        assert daemon.remote.flush(10)
        tier.put = real_put  # type: ignore[method-assign]
        assert c.kv.lookup_prefix(scope, [777]).stored_chunks == 0


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_a_block_read_before_its_remote_delete_ran_is_missing(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    scope = KvScope("del2-model", dtype="float32")
    daemon = make_remote_daemon("a", remote_config(peer), background={"migrate_interval_s": 60})
    service = daemon.remote
    with Client(daemon.address) as c:
        c.kv.put(scope, 778, torch.arange(4096, dtype=torch.float32))
        assert service.flush(10)  # published
        real_delete = service._delete
        go = threading.Event()

        def held_delete(keys: list[bytes]) -> None:
            go.wait(10)
            real_delete(keys)

        service._delete = held_delete  # type: ignore[method-assign]
        assert c.kv.delete()[0] == 1
        got = c.kv.get_tensors(scope, [778])  # before the remote delete has run
        go.set()
        assert service.flush(10)
        assert got[0] is None
        assert c.kv.lookup_prefix(scope, [778]).stored_chunks == 0
