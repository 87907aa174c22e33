"""A filter that few vectors of an HNSW collection match returns the k
nearest matches, exactly as brute force does. The graph's walk stops after
``efSearch`` candidates and the filter removed most of them: with 30 matches
among 3,000 vectors, queries got 1 to 4 of their 10 results and -1 for the
rest. Filters matching many vectors still use the graph."""

from __future__ import annotations

import numpy as np

from tests.vectors.conftest import brute_force, clustered
from tiermem.client import Client, Condition, Op


def test_a_selective_filter_finds_the_k_nearest_matches(vclient: Client) -> None:
    c = vclient
    n, dim, k = 3000, 16, 10
    x = clustered(n, dim, seed=1)
    groups = np.arange(n) % 100
    c.vectors.create("hf", dim, index="hnsw")
    c.vectors.upsert("hf", np.arange(n), x, payloads=[{"g": int(g)} for g in groups])
    assert c.vectors.describe("hf").built_index.name == "HNSW"
    q = x[:20] + 0.01
    hits = c.vectors.search("hf", q, k, where={"g": 3})
    matching = np.flatnonzero(groups == 3)  # 30 vectors
    truth = matching[brute_force(x[matching], q, k, "l2")]
    assert (hits.ids == truth).all()
    assert np.isfinite(hits.distances).all()
    # a broad filter (half of the vectors) still finds its matches through the graph
    broad = c.vectors.search("hf", q, k, where=[Condition("g", Op.LT, 50)])
    assert (broad.ids % 100 < 50).all() and (broad.ids >= 0).all()
