"""A replay sees every acknowledged scratch record while the write-back buffer
is flushed at the same moment: it read RocksDB first and the buffer second,
so records a flush committed in between were in neither read (read-your-writes
broken). The flush is made to land in exactly that window by wrapping the
store's scan (the daemon's code runs as it is)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from tiermem.client import Client, NewRecord, RecordKind
from tiermem.server.app import Daemon


class _ScanThenRun:
    """The store, with ``on_scan`` run after each scan has read its rows."""

    def __init__(self, real: Any, on_scan: Callable[[], None]) -> None:
        self._real, self._on_scan = real, on_scan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def scan(self, *args: Any, **kw: Any) -> Iterator[Any]:
        rows = list(self._real.scan(*args, **kw))
        self._on_scan()
        return iter(rows)


def test_records_a_flush_commits_during_a_replay_are_replayed(
    adaemon: Daemon, aclient: Client
) -> None:
    session = aclient.sessions.open(label="main")
    ids = aclient.scratch.append_many(
        session.id, [NewRecord(RecordKind.THOUGHT, f"thought {i}") for i in range(5)]
    )
    scratch = adaemon.scratch
    flushed: list[int] = []

    def flush_once() -> None:
        if not flushed:
            flushed.append(1)
            flusher = threading.Thread(target=scratch.flush, args=("timer",))
            flusher.start()
            flusher.join()

    scratch.rocks = _ScanThenRun(scratch.rocks, flush_once)  # type: ignore[assignment]
    try:
        replayed = [r.id for r in aclient.scratch.replay(session.id)]
    finally:
        scratch.rocks = scratch.rocks._real  # type: ignore[attr-defined]
    assert flushed
    assert replayed == ids
    assert [r.id for r in aclient.scratch.replay(session.id)] == ids
