"""Every step inside one batch of a put or get gets what is left of the call's
timeout when that step starts, not what was left when the batch started: a
shared-memory put's Commit after its Reserve, a Release after a failed copy,
the next path after one that could not serve (shared memory, then the bulk
channel, then gRPC), and each object of an object-by-object gRPC loop. Before,
each of them got the whole of what the batch started with, so a batch of
slow steps could take several times its timeout."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tiermem.client import Client, Kind
from tiermem.client.fastpath import plane as plane_module
from tiermem.client.fastpath import session as session_module
from tiermem.dataplane_wire import OP_COMMIT, OP_PUT, OP_RELEASE
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded

TIMEOUT_S = 1.0
SLOW_S = 0.3
#: what a step's timeout may exceed what was left when it started by
SLACK_S = 0.02
VALUE = b"\x09" * (256 << 10)


@pytest.fixture
def carried(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[float | None]]:
    """The timeout each bulk session request carried, by op."""
    seen: dict[int, list[float | None]] = {}
    real = session_module.request

    def request(op: int, payload: bytes, flags: int = 0, timeout_s: float | None = None) -> bytes:
        seen.setdefault(op, []).append(timeout_s)
        return real(op, payload, flags, timeout_s)

    monkeypatch.setattr(session_module, "request", request)
    return seen


@pytest.fixture
def shm_client(daemon: Daemon) -> Iterator[Client]:
    """A client that puts 256 KiB values by shared memory first, its offer known."""
    with Client(daemon.address, timeout_s=30, fast_shm_min_bytes=0) as c:
        c.put(Kind.KV_BLOCK, "warm", VALUE)
        if c.dataplane.paths()[:2] != ["shm", "bulk"]:
            pytest.skip("the daemon offers no shared memory or no bulk channel here")
        yield c


def slow_reserve(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, refuse: bool = False
) -> list[float]:
    """The daemon's Reserve takes SLOW_S (then refuses when ``refuse``); returns
    when each ended (``time.monotonic``)."""
    shm = daemon.dataplane.shm  # type: ignore[union-attr]
    real = shm.reserve
    ended: list[float] = []

    def reserve(*args: Any, **kw: Any) -> Any:
        time.sleep(SLOW_S)
        ended.append(time.monotonic())
        if refuse:
            raise CapacityExceeded("no room in the arena (test)")
        return real(*args, **kw)

    monkeypatch.setattr(shm, "reserve", reserve)
    return ended


def test_a_shm_puts_commit_gets_what_its_reserve_left(
    daemon: Daemon,
    shm_client: Client,
    carried: dict[int, list[float | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow_reserve(daemon, monkeypatch)
    shm_client.put(Kind.KV_BLOCK, "k", VALUE, timeout_s=TIMEOUT_S)
    assert shm_client.path_stats()["shm"]["puts"] == 2
    (commit,) = carried[OP_COMMIT][-1:]
    assert commit is not None and commit <= TIMEOUT_S - SLOW_S + SLACK_S


def test_the_bulk_path_after_shm_refused_gets_what_shm_left(
    daemon: Daemon,
    shm_client: Client,
    carried: dict[int, list[float | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow_reserve(daemon, monkeypatch, refuse=True)
    carried.clear()
    shm_client.put(Kind.KV_BLOCK, "k", VALUE, timeout_s=TIMEOUT_S)
    assert shm_client.get(Kind.KV_BLOCK, "k") == VALUE
    (put,) = carried[OP_PUT]
    assert put is not None and put <= TIMEOUT_S - SLOW_S + SLACK_S


def test_the_release_after_a_failed_copy_gets_what_the_copy_left(
    shm_client: Client,
    carried: dict[int, list[float | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def copy_in(*_args: Any) -> None:  # the lease ran out mid-copy
        time.sleep(SLOW_S)
        raise plane_module._Fallback()

    monkeypatch.setattr(plane_module, "_copy_in", copy_in)
    carried.clear()
    shm_client.put(Kind.KV_BLOCK, "k", VALUE, timeout_s=TIMEOUT_S)  # then by the bulk channel
    (release,) = carried[OP_RELEASE]
    assert release is not None and release <= TIMEOUT_S - SLOW_S + SLACK_S


GRPC_LOOPS: dict[str, tuple[str, Callable[[Client, list[str]], object]]] = {
    "put": (
        "Put",
        lambda c, keys: c.dataplane.put_many(
            [plane_module.PutItem(Kind.KV_BLOCK, k, VALUE) for k in keys], timeout_s=TIMEOUT_S
        ),
    ),
    "get": (
        "Get",
        lambda c, keys: c.dataplane.get_many(
            [plane_module.ObjectRef(Kind.KV_BLOCK, k) for k in keys], timeout_s=TIMEOUT_S
        ),
    ),
}


@pytest.mark.parametrize("loop", sorted(GRPC_LOOPS))
def test_each_object_of_a_grpc_loop_gets_what_the_ones_before_left(
    daemon: Daemon, loop: str
) -> None:
    method, call = GRPC_LOOPS[loop]
    keys = ["a", "b", "c"]
    step_s = 0.15
    with Client(daemon.address, timeout_s=30, fast_paths=("grpc",)) as c:
        for k in keys:
            c.put(Kind.KV_BLOCK, k, VALUE)
        plane = c.dataplane
        real = getattr(plane._objects, method)
        timeouts: list[float] = []

        def slow(*args: Any, timeout: float, **kw: Any) -> Any:
            timeouts.append(timeout)
            time.sleep(step_s)
            return real(*args, timeout=timeout, **kw)

        setattr(plane._objects, method, slow)
        call(c, keys)
    assert len(timeouts) == len(keys)
    for i, timeout in enumerate(timeouts):
        assert timeout <= TIMEOUT_S - i * step_s + SLACK_S, timeouts
