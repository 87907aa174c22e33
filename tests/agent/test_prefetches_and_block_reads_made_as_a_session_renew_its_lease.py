"""An object ``Prefetch`` (``PlacementService``) and a KV ``GetBlocks`` made
as a session renew its lease on every call, whatever they find: the session's
own objects, those of no session, or nothing. Before, they renewed it only
through the guard's check of an object another session owns (the prefetch),
or of a block found (the block read), so a session that only prefetched its
own objects, or read blocks that were all missing, for longer than ``lease_s``
was closed as ABANDONED under it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tiermem.client import Client, Kind, KvBlock, KvScope
from tiermem.server.app import Daemon

SCOPE = KvScope("m", world_size=1, worker_id=0, dtype="uint8")


def _blocks(*ids: int) -> list[KvBlock]:
    return [KvBlock(i.to_bytes(8, "big"), bytes([i]) * 64, dtype="uint8", shape=(64,)) for i in ids]


def _renews(daemon: Daemon, session: str, call: Callable[[], object]) -> bool:
    before = daemon.sessions.get(session).heartbeat_ms
    time.sleep(0.01)  # the heartbeat is in milliseconds
    call()
    return daemon.sessions.get(session).heartbeat_ms > before


@pytest.mark.parametrize("finds", ["its_own", "unowned", "nothing"])
def test_an_object_prefetch_made_as_the_session_renews_its_lease(
    daemon: Daemon, client: Client, finds: str
) -> None:
    s = client.sessions.open(label="reader", lease_s=60)
    as_it = client.as_session(s.id)
    as_it.put(Kind.BLOB, "mine", b"m" * 64)
    client.put(Kind.BLOB, "shared", b"u" * 64)
    key = {"its_own": "mine", "unowned": "shared", "nothing": "absent"}[finds]
    assert _renews(daemon, s.id, lambda: as_it.placement.prefetch([(Kind.BLOB, key)]))


def test_a_block_read_made_as_the_session_that_finds_nothing_renews_its_lease(
    daemon: Daemon, client: Client
) -> None:
    s = client.sessions.open(label="reader", lease_s=60)
    as_it = client.as_session(s.id)
    chain = [b.chunk_hash for b in _blocks(7, 8)]
    got: list[object] = []
    assert _renews(daemon, s.id, lambda: got.extend(as_it.kv.get_blocks(SCOPE, chain)))
    assert len(got) == 2
