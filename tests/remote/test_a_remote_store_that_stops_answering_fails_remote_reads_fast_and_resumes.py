"""The remote store stops answering (SIGSTOP: slow, not dead; its sockets stay
open) in the middle of a workload, on each backend. The daemon keeps serving
its local objects without a remote call; a read of an object only the store
holds fails with UNAVAILABLE within one operation deadline (retries included),
is never taken for an eviction (the entry stays), and once the circuit
breaker has tripped is refused at once. After SIGCONT remote reads and
demotions work again by themselves, byte-exact."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from tests.remote.conftest import BACKENDS, Peer, remote_config, sample
from tests.remote.pause import paused
from tiermem.client import Client, Kind, NotFoundError, Tier, UnavailableError
from tiermem.server.app import Daemon

MiB = 1 << 20
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}
OP_TIMEOUT_S = 1.0
BREAKER_FAILURES = 2
#: Long enough that no probe goes through between the trip and the next read.
BREAKER_OPEN_S = 3.0
#: What a gRPC call adds to the daemon's own wait on a loaded machine.
RPC_SLACK_S = 1.0


def remote_calls(daemon: Daemon) -> float:
    return sum(
        sample(daemon, "tiermem_remote_operations_total", op=op, result=result)
        for op in ("put", "get", "exists", "delete", "ping")
        for result in ("ok", "failed", "timeout", "refused")
    )


def where(client: Client, key: str) -> Tier | None:
    try:
        return client.stat(Kind.KV_BLOCK, key).tier
    except NotFoundError:
        return None


def demote(daemon: Daemon, client: Client) -> dict[str, bytes]:
    """1 MiB KV blocks, more than DRAM keeps, until at least three sit in the
    remote store (a demotion that misses its deadline on a loaded machine
    drops its block, as designed: then a fresh set is tried)."""
    for attempt in range(3):
        values = {f"block-{attempt}-{i}": os.urandom(MiB) for i in range(12)}
        for key, data in values.items():
            client.put(Kind.KV_BLOCK, key, data)
        daemon.maintain()
        tiers = {key: where(client, key) for key in values}
        if list(tiers.values()).count(Tier.REMOTE) >= BREAKER_FAILURES + 1:
            return values
        time.sleep(BREAKER_OPEN_S)
    raise AssertionError(f"fewer than {BREAKER_FAILURES + 1} blocks went remote: {tiers}")


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


# A data-plane read (shared-memory Lease, bulk Get) of an object only the store
# holds first tries to bring it in (``RemoteService.pull``, through ``stage`` or
# ``fill``); a silent store fails the request there, once: it used to leave the
# object to the read that follows (``Store.read_remote``), which asked the store
# again: two deadlines and two breaker failures for one request.
@pytest.mark.parametrize("path", ["grpc", "shm", "bulk"])
@pytest.mark.parametrize("own_peer", BACKENDS, indirect=True)
def test_a_paused_store_fails_remote_reads_within_the_deadline_and_resumes_after(
    own_peer: Peer, make_remote_daemon: Callable[..., Daemon], path: str
) -> None:
    remote = remote_config(
        own_peer,
        share=False,  # no write-behind: only reads and demotions talk to the store
        op_timeout_s=OP_TIMEOUT_S,
        retries=1,
        breaker_failures=BREAKER_FAILURES,
        breaker_open_s=BREAKER_OPEN_S,
    )
    daemon = make_remote_daemon(
        "a", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60}
    )
    # retries=0: the client retries UNAVAILABLE by default (meant for a daemon that is
    # starting or unreachable), which would make one Get several remote reads here
    paths = (path, "grpc") if path != "grpc" else ("grpc",)
    with Client(daemon.address, timeout_s=30, retries=0, fast_paths=paths) as client:
        values = demote(daemon, client)
        tiers = {key: where(client, key) for key in values}
        local = [k for k, t in tiers.items() if t == Tier.DRAM]
        remote_only = [k for k, t in tiers.items() if t == Tier.REMOTE]
        assert local

        with paused(own_peer):
            # local objects: byte-exact, without a remote call or a wait for one
            calls = remote_calls(daemon)
            small = os.urandom(64 * 1024)
            for key in local:
                started = time.monotonic()
                assert client.get(Kind.KV_BLOCK, key) == values[key]
                assert time.monotonic() - started < OP_TIMEOUT_S
            client.put(Kind.KV_BLOCK, "written-while-paused", small)
            assert client.get(Kind.KV_BLOCK, "written-while-paused") == small
            assert remote_calls(daemon) == calls

            # objects only the store holds: UNAVAILABLE within one deadline each,
            # then refused at once when the breaker has tripped
            waited = []
            for key in remote_only[: BREAKER_FAILURES + 1]:
                started = time.monotonic()
                with pytest.raises(UnavailableError):
                    client.get(Kind.KV_BLOCK, key)
                waited.append(time.monotonic() - started)
            assert max(waited) < OP_TIMEOUT_S + RPC_SLACK_S, waited
            assert waited[-1] < OP_TIMEOUT_S / 2, waited
            unanswered = sum(
                sample(daemon, "tiermem_remote_operations_total", op="get", result=result)
                for result in ("timeout", "failed")
            )
            assert unanswered == BREAKER_FAILURES
            assert sample(daemon, "tiermem_remote_operations_total", op="get", result="refused")
            assert sample(daemon, "tiermem_remote_available") == 0
            # a store that does not answer has not evicted anything
            assert sample(daemon, "tiermem_remote_stale_entries_total") == 0
            assert all(where(client, key) == Tier.REMOTE for key in remote_only)

        # resumed: the breaker's next probe finds the store and reads work again
        first = remote_only[0]

        def readable() -> bool:
            try:
                return client.get(Kind.KV_BLOCK, first) == values[first]
            except UnavailableError:
                return False

        wait_for(readable, 10 * BREAKER_OPEN_S)
        assert sample(daemon, "tiermem_remote_available") == 1
        for key in remote_only:
            assert client.get(Kind.KV_BLOCK, key) == values[key]
        assert client.get(Kind.KV_BLOCK, "written-while-paused") == small
        # and blocks DRAM cannot keep go to the store again
        more = demote(daemon, client)
        assert Tier.REMOTE in {where(client, key) for key in more}
        assert sample(daemon, "tiermem_remote_stale_entries_total") == 0
