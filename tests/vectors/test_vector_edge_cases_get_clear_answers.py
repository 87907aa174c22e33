"""Edge cases of vector collections that used to go wrong quietly:

* an ``ivf_nlist`` larger than the training set can feed (one list per 39
  vectors) is capped when the index is trained; faiss refused to train and
  every maintenance pass failed, so the collection never became IVF_PQ;
* a finite vector so long that its distances overflow float32 is refused
  (it was stored and then never returned by any search);
* a search whose payloads make a reply larger than a message is split by the
  client (it guessed 512 bytes a payload and the daemon refused the part);
* a search with no query rows is a ValueError saying so (numpy's own error
  about concatenating nothing came out);
* a missing result's distance is NaN, whether nothing matched at all or faiss
  ran out of candidates (it was then the largest float)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tiermem.client import Client, InvalidArgumentError
from tiermem.client.vectors import IndexParams
from tiermem.server.app import Daemon


def test_an_ivf_nlist_too_large_for_the_training_set_is_capped(
    make_vdaemon: Callable[..., Daemon],
) -> None:
    daemon = make_vdaemon("ivf")  # trains at 1,000 vectors (tests' vector config)
    with Client(daemon.address, timeout_s=60) as c:
        c.vectors.create("ivf", 8, index="ivf_pq", params=IndexParams(ivf_nlist=4096))
        x = np.random.default_rng(0).standard_normal((1000, 8)).astype(np.float32)
        c.vectors.upsert("ivf", np.arange(1000), x)
        daemon.vectors.maintain()
        info = c.vectors.describe("ivf")
        assert info.built_index.name == "IVF_PQ"
        assert info.params.ivf_nlist == 1000 // 39
        assert c.vectors.search("ivf", x[7], 1).ids[0, 0] == 7


def test_a_vector_whose_distances_would_overflow_is_refused(vclient: Client) -> None:
    c = vclient
    c.vectors.create("long", 4, index="flat")
    with pytest.raises(InvalidArgumentError, match="Euclidean norm"):
        c.vectors.upsert("long", [5], np.full((1, 4), 3e38, np.float32))
    with pytest.raises(InvalidArgumentError, match="Euclidean norm"):
        c.vectors.search("long", np.full(4, 1e30, np.float32), 1)
    assert c.vectors.count("long") == 0
    c.vectors.upsert("long", [6], np.full((1, 4), 1e18, np.float32))  # long, but fits
    assert c.vectors.search("long", np.zeros(4, np.float32), 1).ids[0, 0] == 6


def test_a_search_whose_payloads_outgrow_a_message_is_split(vclient: Client) -> None:
    c = vclient
    c.vectors.create("big", 4, index="flat")
    n = 1024
    x = np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)
    c.vectors.upsert("big", np.arange(n), x, payloads=[{"t": "x" * 3000}] * n)
    hits = c.vectors.search("big", np.zeros((4, 4), np.float32), k=n, include_payloads=True)
    assert hits.ids.shape == (4, n)
    assert hits.payloads is not None and len(hits.payloads) == 4
    assert all(p is not None and p.fields["t"] == "x" * 3000 for p in hits.payloads[3])


def test_a_search_without_queries_says_so(vclient: Client) -> None:
    vclient.vectors.create("empty-q", 4, index="flat")
    with pytest.raises(ValueError, match="at least one query"):
        vclient.vectors.search("empty-q", np.zeros((0, 4), np.float32), 1)


def test_missing_results_have_nan_distances(vclient: Client) -> None:
    c = vclient
    c.vectors.create("few", 4, index="flat")
    c.vectors.upsert("few", [1, 2], np.eye(4, dtype=np.float32)[:2])
    got = c.vectors.search("few", np.zeros(4, np.float32), 4)
    assert got.ids[0].tolist()[2:] == [-1, -1]
    assert np.isnan(got.distances[0, 2:]).all() and np.isfinite(got.distances[0, :2]).all()
