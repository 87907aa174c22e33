"""A blob's DRAM cache copy is an extra copy of bytes its namespace already
holds: the blob counts once in the namespace's usage (and its quotas)
whatever its cache state, and caching it needs no room under the quota.
The copy was counted as an object of the namespace besides the blob, so a
namespace filled to half its quota with a hot blob refused the next put of
the same size, and reads of a blob larger than the room left under the quota
failed RESOURCE_EXHAUSTED when the daemon tried to cache it."""

from __future__ import annotations

from collections.abc import Callable

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.server.app import Daemon

QUOTA = {"namespaces": {"q": {"max_bytes": "5MiB", "max_objects": 3}}}


def read_until_cached(c: Client, key: str, data: bytes) -> None:
    for _ in range(20):  # a bound on reads, not a timing assertion
        assert c.blobs.get(key) == data
        if c.blobs.stat(key).cached:
            return
    raise AssertionError(f"{key} was never cached")


def test_a_cached_blob_counts_once(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(namespaces=["default", "q"], limits=QUOTA)
    hot, other = pattern(2 * MiB, seed=60), pattern(2 * MiB, seed=61)
    with Client(daemon.address, namespace="q", timeout_s=30) as c:
        c.blobs.put("hot.bin", hot)
        read_until_cached(c, "hot.bin", hot)
        usage = daemon.store.guard.namespace_usage("q")
        assert usage == (1, 2 * MiB)  # one blob, its bytes once
        c.blobs.put("other.bin", other)  # 2 + 2 <= 5 MiB (the copy would make it 6)
        c.blobs.put("third.bin", b"3")  # 3 objects: the copy is not one of them
        assert c.blobs.get("hot.bin") == hot
        assert daemon.store.guard.namespace_usage("q") == (3, 4 * MiB + 1)


def test_a_blob_larger_than_the_room_left_is_cached_and_read(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(namespaces=["default", "q"], limits=QUOTA)
    big = pattern(3 * MiB, seed=62)
    with Client(daemon.address, namespace="q", timeout_s=30) as c:
        c.blobs.put("big.bin", big)  # 3 MiB of 5: caching a counted copy would pass it
        read_until_cached(c, "big.bin", big)
        assert daemon.store.guard.namespace_usage("q") == (1, 3 * MiB)


def test_a_reader_token_reads_a_hot_blob_as_it_is_cached(
    make_daemon: Callable[..., Daemon],
) -> None:
    tokens = [
        {"name": "writer", "token": "t-w", "namespaces": ["q"], "roles": ["read", "write"]},
        {"name": "reader", "token": "t-r", "namespaces": ["q"], "roles": ["read"]},
    ]
    daemon = make_daemon(namespaces=["default", "q"], security={"tokens": tokens})
    data = pattern(2 * MiB, seed=63)
    with Client(daemon.address, token="t-w", namespace="q", timeout_s=30) as w:
        w.blobs.put("hot.bin", data)
    with Client(daemon.address, token="t-r", namespace="q", timeout_s=30) as r:
        read_until_cached(r, "hot.bin", data)  # the copy needs no WRITE role
