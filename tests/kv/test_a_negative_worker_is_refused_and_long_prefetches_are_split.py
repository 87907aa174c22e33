"""A KV scope's worker id is in 0..world_size-1: a negative one passed the
check and the fast paths stored blocks under keys the daemon can never
produce (gRPC's uint32 could not carry it). A prefetch of a chain longer than
one request may hold is split by the client, as gets are (5,000 hashes were
refused INVALID_ARGUMENT)."""

from __future__ import annotations

import pytest
import torch

from tiermem.client import Client, InvalidArgumentError, KvBlock, KvScope
from tiermem.kv_keys import scope_problem


def test_a_negative_worker_id_is_refused(client: Client) -> None:
    assert scope_problem("m", 1, -1, "float32") is not None
    assert scope_problem("m", 2, 1, "float32") is None
    with pytest.raises(InvalidArgumentError, match="worker_id"):
        client.kv.put_blocks(
            KvScope("neg-worker", dtype="float32", worker_id=-1), [KvBlock(1, torch.ones(16384))]
        )


def test_a_prefetch_longer_than_a_request_is_split(client: Client) -> None:
    scope = KvScope("long-prefetch", dtype="float32")
    client.kv.put_blocks(scope, [KvBlock(h, torch.ones(64)) for h in range(3)])
    got = client.kv.prefetch(scope, list(range(5000)))
    assert got.resident + got.promoted == 3
    assert got.missing == 4997
