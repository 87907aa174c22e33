"""A SYNC append whose group-commit log fsync fails is acknowledged only once
its records are durable another way: a flush commits them to RocksDB (a synced
batch). If that fails too, the client is told the records were appended (they
are readable and the next flush writes them) and must not append them again:
not UNAVAILABLE, which the client retries on its own, storing them twice.

Before, the failed fsync was only logged; the next group sync found nothing
"dirty", skipped the fsync and reported the position synced, so the append
was acknowledged as SYNC with its frame never fsynced and its records only
in DRAM. The fault is injected below the daemon's code: ``os.fsync`` fails
with EIO for files in the daemon's ``scratch-log`` directory."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

import pytest

from tests.agent.failing_commit import CommitFailsOnceWhenArmed
from tiermem.client import Client, RecordDurability, RecordKind
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon


def test_a_failed_log_fsync_never_acknowledges_an_unsynced_sync_append(
    agent_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = agent_daemon()
    rocks = CommitFailsOnceWhenArmed(
        daemon.scratch.rocks, "injected: the flush's RocksDB commit failed"
    )
    daemon.scratch.rocks = rocks  # type: ignore[assignment]
    real_fsync = os.fsync
    log_dir = str(daemon.config.data_dir / "scratch-log")

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(log_dir):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    with Client(daemon.address, timeout_s=60) as c:
        session = c.sessions.open(label="main").id
        monkeypatch.setattr(os, "fsync", fsync)
        (first,) = [c.scratch.append(session, RecordKind.DECISION, "go north", durability=SYNC)]
        stats = c.scratch.stats()
        assert (stats.buffered_records, stats.stored_records) == (0, 1), stats

        rocks.armed = True  # the flush that stands in for the fsync fails too
        with pytest.raises(TiermemClientError) as err:
            c.scratch.append(session, RecordKind.DECISION, "go east", durability=SYNC)
        assert err.value.code not in ("UNAVAILABLE", "OK"), err.value
        assert "do not append them again" in str(err.value).lower()
        assert [r.payload for r in c.scratch.replay(session)] == [b"go north", b"go east"]
        assert c.scratch.flush().records == 1
        replayed = [(r.id, r.payload) for r in c.scratch.replay(session)]
        assert replayed[0] == (first, b"go north") and len(replayed) == 2
    monkeypatch.setattr(os, "fsync", real_fsync)
    daemon.stop()
    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        assert [(r.id, r.payload) for r in c.scratch.replay(session)] == replayed


SYNC = RecordDurability.SYNC
