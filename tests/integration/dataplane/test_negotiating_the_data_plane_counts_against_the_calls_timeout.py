"""A client's first call asks the daemon what it offers (Hello: shared memory,
the bulk channel's address) before it moves anything; that exchange is part of
the call and ends by the call's timeout. Before, it was bounded by the client's
default timeout (30 s), or was given the call's whole timeout and the request
then got the whole timeout again, so a call could take about twice its
timeout; a Hello cut short was also remembered as 'no fast paths' for good.
Now a stalled Hello ends the call with DeadlineError within its timeout,
nothing is remembered, and the request gets only what the Hello left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.dataplane.helpers import stalled_hello as stall_hello
from tiermem.client import Client, DeadlineError, Kind, NotFoundError
from tiermem.client.fastpath import session as session_module
from tiermem.dataplane_wire import OP_STAT
from tiermem.server.app import Daemon

CALL_TIMEOUT_S = 0.5
#: a call must end within this: far above its timeout, far below the stall
LATE_S = 3 * CALL_TIMEOUT_S
STALL_S = 10.0
VALUE = b"\x03" * (256 << 10)


@pytest.fixture
def stalled_hello(daemon: Daemon) -> Iterator[threading.Event]:
    """The daemon's Hello waits (up to STALL_S) until the event is set."""
    with stall_hello(daemon, STALL_S) as go_on:
        yield go_on


CALLS: dict[str, Callable[[Client], object]] = {
    "put": lambda c: c.put(Kind.KV_BLOCK, "k", VALUE, timeout_s=CALL_TIMEOUT_S),
    "get": lambda c: c.get(Kind.KV_BLOCK, "k", timeout_s=CALL_TIMEOUT_S),
    "stat": lambda c: c.stat(Kind.KV_BLOCK, "k", timeout_s=CALL_TIMEOUT_S),
    "delete": lambda c: c.delete(Kind.KV_BLOCK, "k", timeout_s=CALL_TIMEOUT_S),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_first_call_whose_hello_stalls_ends_by_its_timeout(
    daemon: Daemon, stalled_hello: threading.Event, call: str
) -> None:
    with Client(daemon.address, timeout_s=30) as c:
        started = time.monotonic()
        with pytest.raises(DeadlineError):
            CALLS[call](c)
        assert time.monotonic() - started < LATE_S
        stalled_hello.set()
        # a Hello cut short by one call's timeout is not taken for 'no fast paths'
        assert "bulk" in c.dataplane.paths()
        c.put(Kind.KV_BLOCK, "k", VALUE)
        assert c.get(Kind.KV_BLOCK, "k") == VALUE


def test_the_request_gets_what_the_negotiation_left_of_its_timeout(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bulk session request that follows a slow Hello carries (and waits)
    only the time the Hello left of the call's timeout."""
    plane = daemon.dataplane
    assert plane is not None
    real = plane.hello
    hello_s = 0.3

    def slow_hello() -> Any:
        time.sleep(hello_s)
        return real()

    monkeypatch.setattr(plane, "hello", slow_hello)
    carried: list[float | None] = []
    real_request = session_module.request

    def request(op: int, payload: bytes, flags: int = 0, timeout_s: float | None = None) -> bytes:
        if op == OP_STAT:
            carried.append(timeout_s)
        return real_request(op, payload, flags, timeout_s)

    monkeypatch.setattr(session_module, "request", request)
    timeout_s = 1.0
    with Client(daemon.address, timeout_s=30) as c:
        with pytest.raises(NotFoundError):
            c.stat(Kind.KV_BLOCK, "nothing", timeout_s=timeout_s)
        if "bulk" not in c.dataplane.paths():
            pytest.skip("the daemon offers no bulk channel")
    assert len(carried) == 1 and carried[0] is not None
    assert carried[0] <= timeout_s - hello_s + 0.01
