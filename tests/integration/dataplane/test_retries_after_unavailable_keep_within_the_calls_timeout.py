"""A call the daemon answers UNAVAILABLE is retried (with backoff), but its
timeout bounds all attempts together: each retry gets what is left of it, and
none starts once nothing would be. Before, ``Transport.call`` gave every
attempt the whole timeout, so a call with ``timeout_s=0.5`` (e.g.
``Client.stats``) whose daemon took 0.4 s to answer UNAVAILABLE each time ran
four attempts: about 2 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tiermem.client import AsyncClient, Client, DeadlineError, UnavailableError
from tiermem.server.app import Daemon
from tiermem.server.errors import Unavailable

CALL_TIMEOUT_S = 0.5
#: a call must end within this: far above its timeout, far below 4 attempts
LATE_S = 3 * CALL_TIMEOUT_S
ANSWER_S = 0.4
RETRIES = 3


@pytest.fixture
def slow_unavailable(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The daemon's Stats answers UNAVAILABLE after ANSWER_S; yields when each
    attempt arrived."""
    arrived: list[float] = []

    def stats() -> Any:
        arrived.append(time.monotonic())
        time.sleep(ANSWER_S)
        raise Unavailable("a dependency is down (test)")

    monkeypatch.setattr(daemon.admin, "stats", stats)
    yield arrived


def test_stats_retried_after_unavailable_ends_by_its_timeout(
    daemon: Daemon, slow_unavailable: list[float]
) -> None:
    with Client(daemon.address, timeout_s=30, retries=RETRIES) as c:
        started = time.monotonic()
        with pytest.raises((DeadlineError, UnavailableError)):
            c.stats(timeout_s=CALL_TIMEOUT_S)
        assert time.monotonic() - started < LATE_S
    assert slow_unavailable  # (the daemon was asked)


def test_an_async_clients_retries_end_by_its_timeout(
    daemon: Daemon, slow_unavailable: list[float]
) -> None:
    async def scenario() -> float:
        async with AsyncClient(daemon.address, timeout_s=30, retries=RETRIES) as c:
            started = time.monotonic()
            with pytest.raises((DeadlineError, UnavailableError)):
                await c.stats(timeout_s=CALL_TIMEOUT_S)
            return time.monotonic() - started

    assert asyncio.run(scenario()) < LATE_S
