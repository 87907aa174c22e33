"""A filter that few vectors of an IVF_PQ collection match still returns k
results when k vectors match. faiss searches only the ``nprobe`` inverted
lists nearest the query and applies the filter inside them: with 40 matches
scattered over the collection's 55 lists and the default nprobe, queries got
a few of their 10 results and -1 for the rest. The search now probes more
lists (up to all of them) for the queries that came back short."""

from __future__ import annotations

import numpy as np

from tests.vectors.conftest import clustered
from tiermem.client import Client, Condition, IndexType, Op
from tiermem.server.app import Daemon


def test_a_selective_filter_on_ivf_pq_returns_k_matches(vdaemon: Daemon, vclient: Client) -> None:
    c = vclient
    n, dim, k = 3000, 16, 10
    x = clustered(n, dim, seed=3)
    ids = np.arange(n)
    payloads = [{"g": int(i % 75), "low": int(i < 500)} for i in ids]
    c.vectors.create("pf", dim, index="ivf_pq")
    c.vectors.upsert("pf", ids, x, payloads=payloads)
    vdaemon.vectors.compact("default", "pf")  # trains the IVF_PQ index
    assert c.vectors.describe("pf").built_index == IndexType.IVF_PQ
    q = clustered(20, dim, seed=4)

    hits = c.vectors.search("pf", q, k, where={"g": 7})  # 40 of 3,000 match
    assert (hits.ids >= 0).all(), f"results missing per query: {(hits.ids < 0).sum(1).tolist()}"
    assert (hits.ids % 75 == 7).all()
    assert np.isfinite(hits.distances).all()

    # fewer matches than k (7): every query gets all 7, then -1
    few = c.vectors.search("pf", q, k, where=[Condition("g", Op.EQ, 7), Condition("low", Op.EQ, 1)])
    matching = {i for i in range(500) if i % 75 == 7}
    for row in few.ids:
        assert set(row[:7].tolist()) == matching
        assert (row[7:] == -1).all()
