"""Closing a session is retried after a cleanup step fails, and concurrent
closes of a parent and its child run each session's cleanup once.

A close that raised half-way (here a cleanup hook that fails once, as a
collection drop or an object delete can) left the session CLOSING with
nothing working on it: every later close answered "being closed already"
until a restart. And a parent's close that started while its child's close
was running marked the child again and ran the child's cleanups a second time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from tiermem.client import Client, Kind, RecordKind
from tiermem.server.app import Daemon
from tiermem.server.sessions.cleanup import Freed


class _Boom(Exception):
    pass


def test_a_close_that_failed_half_way_is_finished_by_the_next_close(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    failures = [1]

    def drop(session: str) -> Freed:
        if failures[0]:
            failures[0] -= 1
            raise _Boom("injected: a cleanup step failed")
        return Freed()

    daemon.sessions.cleanup.register_callable("flaky", drop)
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub")
        cc = c.as_session(child.id)
        cc.put(Kind.KV_BLOCK, "k/0", b"owned by the child")
        cc.scratch.append(child.id, RecordKind.THOUGHT, "a note")

        with pytest.raises(_Boom):
            daemon.sessions.close(root.id)
        assert daemon.sessions.get(root.id) is not None  # still there, CLOSING

        report = daemon.sessions.close(root.id)
        assert report.sessions_closed == 2
        assert c.sessions.list() == []
        assert daemon.sessions.object_usage(child.id) == {}
        assert c.scratch.stats().stored_records + c.scratch.stats().buffered_records == 0


def test_concurrent_parent_and_child_closes_run_each_cleanup_once(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    calls: Counter[str] = Counter()
    child_entered, child_go = threading.Event(), threading.Event()
    child_id = [""]

    def drop(session: str) -> Freed:
        calls[session] += 1
        if session == child_id[0] and calls[session] == 1:
            child_entered.set()
            child_go.wait(30)
        return Freed()

    daemon.sessions.cleanup.register_callable("counting", drop)
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub")
        child_id[0] = child.id
        errors: list[BaseException] = []

        def run(session: str) -> None:
            try:
                daemon.sessions.close(session)
            except BaseException as e:  # reported below
                errors.append(e)

        closing_child = threading.Thread(target=run, args=(child.id,))
        closing_child.start()
        assert child_entered.wait(30)
        closing_parent = threading.Thread(target=run, args=(root.id,))
        closing_parent.start()
        closing_parent.join(1.0)  # it waits for the child's close (or, wrongly, repeats it)
        child_go.set()
        closing_child.join(30)
        closing_parent.join(30)
        assert errors == []
        assert calls == Counter({child.id: 1, root.id: 1})
        assert c.sessions.list() == []


def test_the_reaper_finishes_a_close_that_failed(agent_daemon: Callable[..., Daemon]) -> None:
    daemon = agent_daemon()
    failures = [1]

    def drop(session: str) -> Freed:
        if failures[0]:
            failures[0] -= 1
            raise _Boom("injected: a cleanup step failed")
        return Freed()

    daemon.sessions.cleanup.register_callable("flaky", drop)
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        c.sessions.open(parent=root.id, label="sub")
        with pytest.raises(_Boom):
            daemon.sessions.close(root.id)
        assert daemon.sessions.reap_due() == 1
        assert c.sessions.list() == []
