"""The key of a blob's DRAM cache copy (".tiermem/blob-cache/<sha256 hex>") is
reserved: a put or delete of it by a client, on every data path, is refused
INVALID_ARGUMENT and changes nothing, so the namespace's usage and quotas
stay exact. And an object that replaces a copy inside the daemon is counted
as what it is. Any writer could overwrite the copy's key with one byte: the
cache's tally of copies went on subtracting the copy's 3 MiB from the
namespace's usage while the catalog counted the 1-byte object, and a blob
that took the namespace past its 5 MiB quota was accepted (and the 1-byte
object passed for the blob's cached copy)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
import xxhash

from tests.blobs.helpers import MiB, pattern
from tiermem.client import CapacityError, Client, InvalidArgumentError, Kind
from tiermem.server.app import Daemon
from tiermem.server.blobs.cache import cache_key
from tiermem.server.model import Durability, Profile
from tiermem.server.model import Kind as ServerKind
from tiermem.server.services.objects import PutSpec

QUOTA = {"namespaces": {"q": {"max_bytes": "5MiB", "max_objects": 10}}}
FAST = 300_000  # above the fast paths' threshold


def cached(daemon: Daemon, c: Client, key: str, data: bytes) -> bytes:
    """Read ``key`` until the daemon caches it; returns its SHA-256."""
    for _ in range(20):  # a bound on reads, not a timing assertion
        assert c.blobs.get(key) == data
        if c.blobs.stat(key).cached:
            return hashlib.sha256(data).digest()
    raise AssertionError(f"{key} was never cached")


@pytest.mark.parametrize("path", ["grpc", "shm", "bulk"])
def test_clients_cannot_put_or_delete_a_cache_copy(
    make_daemon: Callable[..., Daemon], path: str
) -> None:
    daemon = make_daemon(namespaces=["default", "q"], limits=QUOTA)
    hot = pattern(3 * MiB, seed=60)
    with Client(daemon.address, namespace="q", timeout_s=30, fast_paths=(path,)) as c:
        if path != "grpc":
            assert c.dataplane is not None and c.dataplane.paths()[0] == path
        c.blobs.put("hot.bin", hot)
        key = ".tiermem/blob-cache/" + cached(daemon, c, "hot.bin", hot).hex()
        usage = daemon.store.guard.namespace_usage("q")
        assert usage == (1, 3 * MiB)
        for value in (b"x", b"x" * FAST):
            with pytest.raises(InvalidArgumentError, match="reserved"):
                c.put(Kind.BLOB, key, value)
        with pytest.raises(InvalidArgumentError, match="reserved"):
            c.put(Kind.SCRATCH, ".tiermem/mine", b"x")  # the whole prefix is the daemon's
        with pytest.raises(InvalidArgumentError, match="reserved"):
            c.delete(Kind.BLOB, key)
        assert c.blobs.stat("hot.bin").cached
        assert c.get(Kind.BLOB, key) == hot  # reads are allowed
        assert daemon.store.guard.namespace_usage("q") == usage
        with pytest.raises(CapacityError):
            c.blobs.put("big.bin", pattern(4 * MiB, seed=61))  # 3 + 4 MiB > 5 MiB


def test_an_object_that_replaces_a_copy_in_the_daemon_is_counted(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(namespaces=["default", "q"], limits=QUOTA)
    hot = pattern(3 * MiB, seed=62)
    with Client(daemon.address, namespace="q", timeout_s=30) as c:
        c.blobs.put("hot.bin", hot)
        sha = cached(daemon, c, "hot.bin", hot)
        assert daemon.store.guard.namespace_usage("q") == (1, 3 * MiB)

        # a put of the daemon's own, not a fill, replaces the copy with one byte
        objects = daemon.objects
        profile = Profile(durability=Durability.CACHE).resolved(ServerKind.BLOB)
        spec = PutSpec(cache_key("q", sha), 1, profile)
        reservation = objects.reserve(1, profile, ServerKind.BLOB)
        reservation.buffer[:1] = b"x"
        checksum = xxhash.xxh3_64_intdigest(reservation.buffer)
        objects.commit_filled(spec, profile, reservation, checksum)

        assert daemon.store.guard.namespace_usage("q") == (2, 3 * MiB + 1)
        with pytest.raises(CapacityError):
            c.blobs.put("big.bin", pattern(4 * MiB, seed=63))
        assert not c.blobs.stat("hot.bin").cached  # that object is no copy of the blob:
        assert c.blobs.get("hot.bin") == hot  # never served as one
