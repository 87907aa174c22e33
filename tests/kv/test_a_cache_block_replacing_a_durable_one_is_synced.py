"""A KV put whose CACHE block replaces a DURABLE one returns only after the
WAL sync, as an object put does (docs/reliability.md: an acknowledged
overwrite never rolls back to the old durable bytes). PutBlocks synced only
when its own profile was DURABLE, so after a power loss the old block could
come back."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tiermem.client import Client, Durability, Kind, KvBlock, KvScope, Profile
from tiermem.server.app import Daemon

SCOPE = KvScope("m", dtype="float32")
DURABLE = Profile(durability=Durability.DURABLE)
CACHE = Profile(durability=Durability.CACHE)


def _count_syncs(rocks: Any) -> list[int]:
    calls: list[int] = []
    real = rocks.flush

    def flush() -> Any:
        calls.append(1)
        return real()

    rocks.flush = flush
    return calls


@pytest.mark.parametrize("path", ["grpc", None], ids=["grpc", "default"])
def test_a_cache_kv_block_over_a_durable_one_is_synced(
    daemon: Daemon, client: Client, path: str | None
) -> None:
    extra = {} if path is None else {"path": path}
    client.kv.put_blocks(SCOPE, [KvBlock(1, torch.ones(64))], profile=DURABLE, **extra)
    syncs = _count_syncs(daemon.store.catalog.rocks)
    client.kv.put_blocks(SCOPE, [KvBlock(1, torch.zeros(64))], profile=CACHE, **extra)
    assert syncs
    client.kv.put_blocks(SCOPE, [KvBlock(2, torch.zeros(64))], profile=CACHE, **extra)
    assert len(syncs) == 1  # a CACHE block replacing nothing durable needs none


def test_an_object_put_does_the_same(daemon: Daemon, client: Client) -> None:
    client.put(Kind.BLOB, "b", b"x" * 100, profile=DURABLE)
    syncs = _count_syncs(daemon.store.catalog.rocks)
    client.put(Kind.BLOB, "b", b"y" * 100, profile=CACHE)
    assert syncs
