"""``LookupPrefix`` and ``Prefetch`` made as a session renew its lease every
time, as every other call made as a session does, whatever blocks they find:
its own, those of no session, or none. Before, they renewed it only when they
checked a block another session owns, so a session that only looked up and
prefetched its own cached prefixes for longer than ``lease_s`` was closed as
ABANDONED under it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tiermem.client import Client, KvBlock, KvScope
from tiermem.server.app import Daemon

SCOPE = KvScope("m", world_size=1, worker_id=0, dtype="uint8")


def blocks(*ids: int) -> list[KvBlock]:
    return [KvBlock(i.to_bytes(8, "big"), bytes([i]) * 64, dtype="uint8", shape=(64,)) for i in ids]


def hashes(*ids: int) -> list[bytes]:
    return [b.chunk_hash for b in blocks(*ids)]


def _renews(daemon: Daemon, session: str, call: Callable[[], object]) -> bool:
    before = daemon.sessions.get(session).heartbeat_ms
    time.sleep(0.01)  # the heartbeat is in milliseconds
    call()
    return daemon.sessions.get(session).heartbeat_ms > before


@pytest.mark.parametrize("call", ["lookup", "prefetch"])
@pytest.mark.parametrize("finds", ["its_own", "unowned", "nothing"])
def test_a_kv_lookup_or_prefetch_made_as_the_session_renews_its_lease(
    daemon: Daemon, client: Client, call: str, finds: str
) -> None:
    s = client.sessions.open(label="reader", lease_s=60)
    as_it = client.as_session(s.id)
    as_it.kv.put_blocks(SCOPE, blocks(0, 1))
    client.kv.put_blocks(SCOPE, blocks(2, 3))
    chain = {"its_own": hashes(0, 1), "unowned": hashes(2, 3), "nothing": hashes(7, 8)}[finds]
    calls: dict[str, Callable[[], object]] = {
        "lookup": lambda: as_it.kv.lookup_prefix(SCOPE, chain),
        "prefetch": lambda: as_it.kv.prefetch(SCOPE, chain),
    }
    assert _renews(daemon, s.id, calls[call])
