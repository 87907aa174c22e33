"""A remote delete that fails (the store refuses it, is down, or answers too
late) is tried again while the daemon runs, until the store confirms it: it
used to be given up at once, leaving the deleted block in the store (to be
adopted by other daemons) until the store evicted it by itself. Until then
the key is a miss here and nothing is uploaded under its name. Publishes
queued meanwhile do not hold the retry back."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, remote_config
from tests.remote.test_a_block_deleted_just_before_a_kill_9_is_deleted_remotely_after_restart import (  # noqa: E501
    refusing_deletes,
    wait_for,
)
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

KEY = ObjectKey("default", ServerKind.KV_BLOCK, "refused").encode()


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_a_refused_delete_is_done_once_the_store_takes_deletes_again(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    daemon = make_remote_daemon(
        "a", remote_config(peer, breaker_failures=1000), background={"migrate_interval_s": 60}
    )
    service = daemon.remote
    assert service is not None
    with Client(daemon.address) as c:
        c.put(Kind.KV_BLOCK, "refused", b"r" * 4096)
        assert service.flush(10) and service.remote.exists([KEY])[0]
        with refusing_deletes(peer):
            assert c.delete(Kind.KV_BLOCK, "refused")
            time.sleep(1.0)  # the delete failed, maybe more than once
            assert service.remote.exists([KEY])[0]
            assert service.deleting(KEY)  # a miss here meanwhile
            for i in range(20):  # publishes queued meanwhile
                c.put(Kind.KV_BLOCK, f"busy-{i}", b"b" * 4096)
        assert wait_for(lambda: not service.remote.exists([KEY])[0], 10)
        assert wait_for(lambda: not service.deleting(KEY), 10)
