"""The Release a shared-memory get sends once its copy is done is part of the
get: sending it on a bulk session (opening one included) ends by the get's
timeout. Before, a release that needed a new session opened it within the
bulk channel's I/O timeout (30 s by default), so a get with ``timeout_s=0.5``
whose bulk channel accepted connections and never answered returned after the
whole I/O timeout. A release the call could not send in its time goes to the
plane's releasing thread (gRPC); a release made after its call returned
(``release_leases``, that thread) waits at most RELEASE_TIMEOUT_S, not the I/O
timeout or the client's default call timeout."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.dataplane.helpers import key, wait_for
from tiermem.client import Client, DeadlineError, Kind
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.client.fastpath import plane as plane_module
from tiermem.client.fastpath.plane import RELEASE_TIMEOUT_S, DataPlane
from tiermem.client.fastpath.session import Session, SessionPool
from tiermem.dataplane_wire import OP_LEASE, OP_RELEASE
from tiermem.server.app import Daemon
from tiermem.v1 import dataplane_pb2

IO_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 0.5
#: a call must end within this: far above its timeout, far below the I/O timeout
LATE_S = 3 * CALL_TIMEOUT_S
VALUE = b"\x07" * (256 << 10)


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A bulk address whose 'daemon' accepts connections (the kernel's backlog
    does) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        yield f"127.0.0.1:{lsock.getsockname()[1]}"


def silent_sessions(plane: DataPlane, address: str) -> None:
    """Leases go by gRPC; releases go to a bulk channel that never answers an
    opening (no session is pooled, so each release has to open one)."""
    if "shm" not in plane.offer().paths or "bulk" not in plane.offer().paths:
        pytest.skip("the daemon offers no shared memory or no bulk channel here")
    plane._session_ops_refused.add(OP_LEASE)
    plane._sessions.close()
    plane._sessions = SessionPool(b"", "", io_timeout_s=IO_TIMEOUT_S)
    plane.offer().bulk_address = address


def test_a_shm_gets_release_opens_its_session_within_the_calls_timeout(
    daemon: Daemon, client: Client, silent_listener: str
) -> None:
    plane = client.dataplane
    plane.put_many([PutItem(Kind.KV_BLOCK, "v", VALUE)], path="shm")
    silent_sessions(plane, silent_listener)
    started = time.monotonic()
    got = plane.get_many([ObjectRef(Kind.KV_BLOCK, "v")], path="shm", timeout_s=CALL_TIMEOUT_S)
    assert time.monotonic() - started < LATE_S
    assert bytes(got[0].data) == VALUE and got[0].path == "shm"
    # the release the get could not send in its time went by gRPC, well before
    # the lease's TTL (30 s)
    wait_for(lambda: daemon.store.leases.active == 0, "the lease to be released", 5.0)


def test_a_release_after_its_call_returned_waits_at_most_release_timeout_s(
    daemon: Daemon, client: Client, silent_listener: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plane_module, "RELEASE_TIMEOUT_S", CALL_TIMEOUT_S)
    plane = client.dataplane
    client.put(Kind.KV_BLOCK, "v", VALUE)
    silent_sessions(plane, silent_listener)
    leased = plane._dp.Lease(dataplane_pb2.LeaseRequest(keys=[key("v")]), timeout=10)
    assert daemon.store.leases.active == 1
    started = time.monotonic()
    plane.release_leases([leased.leases[0].lease_id])  # e.g. a blob reader closing
    assert time.monotonic() - started < LATE_S
    wait_for(lambda: daemon.store.leases.active == 0, "the lease to be released", 5.0)


def test_the_releasing_thread_gives_each_release_release_timeout_s(client: Client) -> None:
    """Its releases' calls have returned: the client's default call timeout
    (30 s here) is not theirs to use."""
    plane = client.dataplane
    plane._session_ops_refused.add(OP_RELEASE)  # releases go by the thread
    timeouts: list[float] = []

    def release(_request: Any, *, timeout: float, metadata: Any) -> None:
        timeouts.append(timeout)

    plane._dp.Release = release
    plane.release_leases([1])
    wait_for(lambda: timeouts != [], "the releasing thread to send the release", 5.0)
    assert timeouts == [RELEASE_TIMEOUT_S] and client.transport.timeout_s > RELEASE_TIMEOUT_S


def test_a_release_on_a_session_whose_daemon_reads_nothing_ends_by_the_deadline() -> None:
    """A release sent without waiting for its answer still waits for its send:
    one into a connection the daemon stopped reading ends by the call's
    deadline, not the I/O timeout."""
    mine, peer = socket.socketpair()
    with mine, peer:
        mine.setblocking(False)
        with pytest.raises(BlockingIOError):  # fill what the kernel buffers
            while True:
                mine.send(b"\x00" * (64 << 10))
        mine.settimeout(IO_TIMEOUT_S)
        started = time.monotonic()
        session = Session(mine, True, 0, IO_TIMEOUT_S, started + CALL_TIMEOUT_S)
        request = dataplane_pb2.ReleaseRequest(lease_ids=list(range(1, 5000)))
        with pytest.raises(DeadlineError):
            session.send_only(OP_RELEASE, request)
        assert time.monotonic() - started < LATE_S
        assert not session.in_step  # part of it may have gone: never pooled
