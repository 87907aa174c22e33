"""The scratchpad's flush thread (which embeds flushed records) runs at a raised
nice value, so the kernel runs request handlers first; the rest of the daemon
keeps its priority, and flushing still works."""

import logging
import os
import sys
import threading

import pytest

from tiermem.client import Client, RecordKind
from tiermem.server.app import Daemon
from tiermem.server.threadpriority import MAX_NICE, lower_this_thread

from .conftest import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")


def nice_of(native_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, native_id)


def flush_thread(daemon: Daemon) -> threading.Thread:
    (thread,) = [t for t in daemon.scratch._threads if t.name == "scratch-flush"]
    return thread


def test_the_flush_thread_is_niced_and_flushes(agent_daemon) -> None:  # type: ignore[no-untyped-def]
    base = nice_of(threading.get_native_id())
    daemon: Daemon = agent_daemon(agent={"scratch": {"flush_interval_s": 0.1}})
    thread = flush_thread(daemon)
    assert thread.native_id is not None
    wait_for(lambda: nice_of(thread.native_id) != base)  # set as its loop starts
    assert nice_of(thread.native_id) == min(MAX_NICE, base + 10)
    assert nice_of(threading.get_native_id()) == base  # the caller's is untouched

    with Client(daemon.address, timeout_s=30) as client:
        session = client.sessions.open(label="nice").id
        client.scratch.append(session, RecordKind.OBSERVATION, b"flushed at a low priority")
        wait_for(lambda: daemon.scratch.stats().flushes > 0)
        records = client.scratch.replay(session)
        assert [r.payload for r in records] == [b"flushed at a low priority"]


def test_zero_leaves_the_flush_thread_at_the_daemons_priority(agent_daemon) -> None:  # type: ignore[no-untyped-def]
    base = nice_of(threading.get_native_id())
    daemon: Daemon = agent_daemon(agent={"scratch": {"flush_thread_nice": 0}})
    thread = flush_thread(daemon)
    assert thread.native_id is not None
    assert nice_of(thread.native_id) == base


def run_in_thread(fn):  # type: ignore[no-untyped-def]
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append((fn(), nice_of(threading.get_native_id()))))
    t.start()
    t.join()
    return out[0]


def test_the_value_is_capped_at_the_lowest_priority() -> None:
    result, nice = run_in_thread(lambda: lower_this_thread(100, "a test thread"))
    assert result == nice == MAX_NICE


def test_a_refused_change_is_logged_and_the_thread_goes_on(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    base = nice_of(threading.get_native_id())
    with caplog.at_level(logging.WARNING, logger="tiermem.server.threadpriority"):
        result, nice = run_in_thread(lambda: lower_this_thread(10, "a test thread"))
    assert result is None and nice == base
    assert "a test thread keeps its CPU priority" in caplog.text
    assert "Operation not permitted" in caplog.text
