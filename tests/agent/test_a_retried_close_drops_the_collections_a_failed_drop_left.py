"""A session close whose collection drop failed is retried, and the retry
drops the collection: before, ``VectorService.drop_session`` took the
session's collections out of its table before dropping them, so the retried
close found none and the collection's record, log and files leaked."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tiermem.client import Client, NotFoundError
from tiermem.server.app import Daemon
from tiermem.v1 import vector_records_pb2 as records


class _Boom(Exception):
    pass


def test_a_retried_close_drops_the_collection_whose_drop_failed(
    agent_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = agent_daemon()
    oplog = daemon.vectors.log
    real_drop = oplog.drop
    failures = [1]

    def flaky_drop(rec: records.CollectionRecord) -> None:
        if failures[0]:
            failures[0] -= 1
            raise _Boom("injected: the collection's drop failed")
        real_drop(rec)

    monkeypatch.setattr(oplog, "drop", flaky_drop)
    with Client(daemon.address, timeout_s=30) as c:
        s = c.sessions.open(label="rag")
        c.vectors.create("owned", 8, session=s.id, index="flat")
        c.vectors.upsert("owned", [1, 2], np.ones((2, 8), dtype=np.float32))

        with pytest.raises(_Boom):
            daemon.sessions.close(s.id)
        # the failed drop changed nothing: the collection is still there
        assert c.vectors.describe("owned").count == 2

        daemon.sessions.close(s.id)
        assert failures == [0]
        assert c.sessions.list() == []
        with pytest.raises(NotFoundError):
            c.vectors.describe("owned")
        assert list(oplog.collection_records()) == []


def test_a_retried_drop_finds_the_collection_whose_drop_failed(
    agent_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = agent_daemon()
    oplog = daemon.vectors.log
    real_drop = oplog.drop
    failures = [1]

    def flaky_drop(rec: records.CollectionRecord) -> None:
        if failures[0]:
            failures[0] -= 1
            raise _Boom("injected: the collection's drop failed")
        real_drop(rec)

    monkeypatch.setattr(oplog, "drop", flaky_drop)
    with Client(daemon.address, timeout_s=30) as c:
        c.vectors.create("plain", 8, index="flat")
        with pytest.raises(_Boom):
            daemon.vectors.drop("default", "plain")
        assert daemon.vectors.drop("default", "plain") is True
        assert daemon.vectors.drop("default", "plain") is False
        assert list(oplog.collection_records()) == []
