"""Batches through the bulk channel and shared memory are admitted, read and
committed per batch (``ObjectService.read_many`` / ``commit_filled_many``):
a batch is stored whole or not at all, quotas count the whole batch, objects
read together share one admission that ends with the last of them, and a batch
mixing tiers or naming a key twice still reads and writes exactly."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.integration.dataplane.helpers import MiB, wait_for
from tiermem.client import CapacityError, Client, Kind, NotFoundError
from tiermem.client.errors import TiermemClientError
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey, Tier

PATHS = ("bulk", "shm")


def blocks(n: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


def inflight(daemon: Daemon) -> int:
    return int(daemon.metrics.inflight_bytes._value.get())


def requests_in_progress(daemon: Daemon, namespace: str = "default") -> int:
    state = daemon.store.guard._ns.get(namespace)  # dropped once nothing is in progress
    return 0 if state is None else state.rpcs


@pytest.mark.parametrize("path", PATHS)
def test_a_batch_with_one_refused_object_stores_none_of_it(
    daemon: Daemon, client: Client, path: str
) -> None:
    client.put(Kind.KV_BLOCK, "taken", b"old" * (100 << 10))
    values = blocks(4, 256 << 10, 1)
    names = ["n0", "n1", "taken", "n3"]
    items = [
        PutItem(Kind.KV_BLOCK, name, value, if_absent=True)
        for name, value in zip(names, values, strict=True)
    ]
    with pytest.raises(TiermemClientError, match="if_absent"):
        client.dataplane.put_many(items, path=path)
    for name in ("n0", "n1", "n3"):
        with pytest.raises(NotFoundError):
            client.stat(Kind.KV_BLOCK, name)
    assert client.get(Kind.KV_BLOCK, "taken") == b"old" * (100 << 10)
    dp = daemon.dataplane
    assert dp is not None and dp.budget.used_bytes == 0
    assert inflight(daemon) == 0


def test_a_namespace_quota_counts_the_whole_batch(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(
        namespaces=["default", "small"],
        limits={"namespaces": {"small": {"max_objects": 3}}},
    )
    with Client(daemon.address, namespace="small", retries=0) as c:
        values = blocks(4, 256 << 10, 2)
        items = [PutItem(Kind.KV_BLOCK, f"k{i}", v) for i, v in enumerate(values)]
        with pytest.raises(CapacityError, match="max_objects is 3"):
            c.dataplane.put_many(items, path="bulk")
        assert list(c.list()) == []
        got = c.dataplane.put_many(items[:3], path="bulk")
        assert [info.key for info in got] == ["k0", "k1", "k2"]
        again = c.dataplane.put_many(items[:3], path="bulk")  # overwrites add no object
        assert [info.version for info in again] == [2, 2, 2]


@pytest.mark.parametrize("path", PATHS)
def test_a_batch_naming_a_key_twice_keeps_the_later_value(client: Client, path: str) -> None:
    first, second, other = blocks(3, 256 << 10, 3)
    items = [
        PutItem(Kind.KV_BLOCK, "twice", first),
        PutItem(Kind.KV_BLOCK, "other", other),
        PutItem(Kind.KV_BLOCK, "twice", second),
    ]
    client.dataplane.put_many(items, path=path)
    assert client.get(Kind.KV_BLOCK, "twice") == second
    assert client.get(Kind.KV_BLOCK, "other") == other


@pytest.mark.parametrize("path", PATHS)
def test_objects_read_together_share_one_admission_that_ends_with_the_last(
    make_daemon: Callable[..., Daemon], path: str
) -> None:
    # reads are admitted without counting unless their namespace has a limit
    daemon = make_daemon(limits={"namespace": {"max_concurrent_rpcs": 64}})
    with Client(daemon.address, timeout_s=30) as client:
        _read_together(daemon, client, path)


def _read_together(daemon: Daemon, client: Client, path: str) -> None:
    values = blocks(6, 1 * MiB, 4)
    names = [f"m{i}" for i in range(len(values))]
    client.dataplane.put_many(
        [PutItem(Kind.KV_BLOCK, n, v) for n, v in zip(names, values, strict=True)], path=path
    )
    # Two of them move to SSD: the batch mixes memory and SSD reads.
    for name in names[1:3]:
        encoded = ObjectKey("default", ServerKind.KV_BLOCK, name).encode()
        assert daemon.mover.move(encoded, Tier.SSD, force=True)
    refs = [ObjectRef(Kind.KV_BLOCK, n) for n in [*names, names[0]]]
    got = client.dataplane.get_many(refs, path=path)
    assert [bytes(f.data) for f in got] == [*values, values[0]]
    # (shared-memory read leases are released without waiting for the answer)
    wait_for(lambda: daemon.store.leases.active == 0, "the read leases to end")
    wait_for(lambda: requests_in_progress(daemon) == 0, "the shared admission to end")
    assert inflight(daemon) == 0
    with pytest.raises(NotFoundError, match="missing"):
        client.dataplane.get_many([*refs[:2], ObjectRef(Kind.KV_BLOCK, "missing")], path=path)
    wait_for(lambda: requests_in_progress(daemon) == 0, "the refused batch to end its admission")
    dp = daemon.dataplane
    assert dp is not None and dp.budget.used_bytes == 0
