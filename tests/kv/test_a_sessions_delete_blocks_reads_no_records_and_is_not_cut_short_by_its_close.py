"""``KvService.DeleteBlocks`` made as a session decides which blocks it may
delete from the index's owner column: its own blocks and those of no session
go, another session's stay, and no block's record is read to decide it. A
close of the session that starts while the call runs does not cut it short:
every block is deleted exactly once, by the call or by the close. Before,
each block's record was read (a RocksDB read under the store lock) and the
call failed half-way (FAILED_PRECONDITION, some blocks deleted and some not)
at the first other session's block once its session was closing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tiermem.client import Client, KvBlock, KvScope
from tiermem.server.app import Daemon
from tiermem.server.sessions.model import SessionState

SCOPE = KvScope("m", world_size=1, worker_id=0, dtype="uint8")


def blocks(*ids: int) -> list[KvBlock]:
    return [KvBlock(i.to_bytes(8, "big"), bytes([i]) * 64, dtype="uint8", shape=(64,)) for i in ids]


def found(client: Client, *ids: int) -> int:
    got = client.kv.get_blocks(SCOPE, [b.chunk_hash for b in blocks(*ids)])
    return sum(1 for b in got if b.found)


def _two_sessions(client: Client) -> tuple[str, str]:
    """Session a owns blocks 0-2 and 6-8, session b owns 3-5 (between a's in
    key order), block 9 is owned by no session."""
    a, b = client.sessions.open(label="a").id, client.sessions.open(label="b").id
    client.as_session(a).kv.put_blocks(SCOPE, blocks(0, 1, 2, 6, 7, 8))
    client.as_session(b).kv.put_blocks(SCOPE, blocks(3, 4, 5))
    client.kv.put_blocks(SCOPE, blocks(9))
    return a, b


def test_ownership_is_decided_without_reading_records(
    daemon: Daemon, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _b = _two_sessions(client)
    catalog = daemon.store.catalog
    metas: list[bytes] = []
    real_meta = catalog.meta

    def counted(encoded: bytes, entry: Any) -> Any:
        metas.append(encoded)
        return real_meta(encoded, entry)

    monkeypatch.setattr(catalog, "meta", counted)
    assert client.as_session(a).kv.delete(model="m") == (7, 7 * 64)
    assert metas == []
    assert found(client, 0, 1, 2, 6, 7, 8, 9) == 0
    assert found(client, 3, 4, 5) == 3


def test_a_close_starting_mid_call_does_not_cut_it_short(
    daemon: Daemon, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _b = _two_sessions(client)
    sessions = daemon.sessions
    real_touch: Callable[[str], None] = sessions.touch
    closes: list[threading.Thread] = []
    reports: list[Any] = []

    def touch_then_close(session: str) -> None:
        real_touch(session)
        if session != a or closes:
            return
        # another client closes the session now; the call goes on once it is CLOSING
        t = threading.Thread(target=lambda: reports.append(client.sessions.close(a)))
        t.start()
        closes.append(t)
        deadline = time.monotonic() + 10
        while sessions.get(a) is not None and sessions.get(a).state == SessionState.OPEN:
            if time.monotonic() > deadline:
                raise AssertionError("the close did not start")
            time.sleep(0.005)

    monkeypatch.setattr(sessions, "touch", touch_then_close)
    deleted, freed = client.as_session(a).kv.delete(model="m")
    closes[0].join(20)
    assert not closes[0].is_alive()
    # the unowned block by the call; each of a's blocks by the call or by the close
    assert found(client, 9) == 0
    assert deleted >= 1 and freed == deleted * 64
    assert deleted + reports[0].objects_freed == 7
    assert found(client, 0, 1, 2, 6, 7, 8) == 0
    assert found(client, 3, 4, 5) == 3
