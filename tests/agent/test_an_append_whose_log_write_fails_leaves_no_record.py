"""An append whose group-commit log write fails (here a full disk under the
scratch log) is answered with an error, and none of its records takes effect:
not in Replay, not in the next flush, not after a restart. The records used to
stay in the DRAM buffer, readable and flushed to RocksDB later, so a client
that retried the failed append stored them twice. The appends after it work
as usual and get new, increasing ids.

The fault is injected below the daemon's code: ``os.write`` fails with
ENOSPC for files in the daemon's ``scratch-log`` directory only."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

import pytest

from tiermem.client import Client, NewRecord, RecordDurability, RecordKind
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon


def _records(*payloads: tuple[str, RecordDurability]) -> list[NewRecord]:
    return [NewRecord(RecordKind.OBSERVATION, p, durability=d) for p, d in payloads]


def test_a_failed_log_write_appends_nothing(
    agent_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = agent_daemon()
    real_write = os.write
    log_dir = str(daemon.config.data_dir / "scratch-log")
    disk_full = True

    def write(fd: int, data: bytes | memoryview) -> int:
        if disk_full and os.readlink(f"/proc/self/fd/{fd}").startswith(log_dir):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    with Client(daemon.address, timeout_s=30) as c:
        session = c.sessions.open(label="main").id
        (before,) = c.scratch.append_many(session, _records(("before", RecordDurability.LOGGED)))
        monkeypatch.setattr(os, "write", write)
        for durability in (RecordDurability.LOGGED, RecordDurability.SYNC):
            failed = _records(
                ("failed, buffered", RecordDurability.BUFFERED), ("failed", durability)
            )
            with pytest.raises(TiermemClientError) as err:
                c.scratch.append_many(session, failed)
            assert [r.payload for r in c.scratch.replay(session)] == [b"before"]
            assert c.scratch.stats().buffered_records == 1
            assert err.value.code == "RESOURCE_EXHAUSTED", err.value
        disk_full = False
        later = _records(("after", RecordDurability.LOGGED), ("after 2", RecordDurability.SYNC))
        after = c.scratch.append_many(session, later)
        assert before < after[0] < after[1]
        assert c.scratch.flush().records == 3
        expected = [(before, b"before"), (after[0], b"after"), (after[1], b"after 2")]
        assert [(r.id, r.payload) for r in c.scratch.replay(session)] == expected
    daemon.stop()
    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        assert [(r.id, r.payload) for r in c.scratch.replay(session)] == expected
