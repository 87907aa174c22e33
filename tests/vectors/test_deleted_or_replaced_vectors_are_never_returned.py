"""Deletes and upserts on every index type: a deleted id never comes back, an
upsert replaces the vector (and payload) in place of the old one, before and
after compaction and across a snapshot + reload."""

from __future__ import annotations

import numpy as np
import pytest

from tests.vectors.conftest import clustered
from tiermem.client import Client
from tiermem.server.app import Daemon

N, D = 2000, 16


def _fill(client: Client, daemon: Daemon, index: str) -> np.ndarray:
    x = clustered(N, D, seed=3)
    client.vectors.create("c", D, index=index)
    client.vectors.upsert("c", np.arange(N), x, payloads=[{"v": 1}] * N)
    daemon.vectors.compact("default", "c")  # IVF_PQ trains on the first batch
    return x


@pytest.mark.parametrize("index", ["flat", "hnsw", "ivf_pq", "auto"])
def test_deleted_ids_are_never_returned(vdaemon: Daemon, vclient: Client, index: str) -> None:
    x = _fill(vclient, vdaemon, index)
    gone = np.arange(0, N, 3)  # a third of the collection
    assert vclient.vectors.delete("c", gone) == len(gone)
    assert vclient.vectors.delete("c", gone[:5]) == 0  # already gone
    assert vclient.vectors.count("c") == N - len(gone)
    queries = x[gone[:200]]  # each deleted vector is its own nearest neighbour
    for _ in range(2):
        res = vclient.vectors.search("c", queries, 20, nprobe=64)
        assert not np.isin(res.ids, gone).any()
        assert (res.ids >= 0).all()
        vdaemon.vectors.compact("default", "c")  # tombstones dropped: same answer
    vclient.vectors.unload("c")
    res = vclient.vectors.search("c", queries, 20, nprobe=64)
    assert not np.isin(res.ids, gone).any()


@pytest.mark.parametrize("index", ["flat", "hnsw", "ivf_pq"])
def test_upsert_replaces_vector_and_payload(vdaemon: Daemon, vclient: Client, index: str) -> None:
    x = _fill(vclient, vdaemon, index)
    target = 7
    moved = x[1500] + 0.001  # id 7 now lives next to vector 1500
    vclient.vectors.upsert("c", [target], moved[None, :], payloads=[{"v": 2}])
    assert vclient.vectors.count("c") == N
    res = vclient.vectors.search("c", x[[1500, target]], 5, include_payloads=True, nprobe=64)
    assert target in res.ids[0]
    assert target not in res.ids[1]  # the old vector of id 7 is gone
    assert res.payloads is not None
    rank = list(res.ids[0]).index(target)
    assert res.payloads[0][rank] is not None and res.payloads[0][rank].fields == {"v": 2}
    # Each id appears once, however often it was replaced.
    for i in range(5):
        vclient.vectors.upsert("c", [target], (moved + i * 1e-4)[None, :])
    res = vclient.vectors.search("c", moved[None, :], 50, nprobe=64)
    assert list(res.ids[0]).count(target) == 1
    vdaemon.vectors.compact("default", "c")
    assert vclient.vectors.count("c") == N
    res = vclient.vectors.search("c", moved[None, :], 50, include_payloads=True, nprobe=64)
    assert list(res.ids[0]).count(target) == 1
    # The last upsert gave no payload: the old one is cleared.
    assert res.payloads is not None and res.payloads[0][list(res.ids[0]).index(target)] is None
