"""Filters on payload fields (EQ, NE, IN, ranges, EXISTS) and on the session
that owns a vector; results are exactly the brute-force neighbours among the
vectors that pass, and payloads (fields, object references) come back."""

from __future__ import annotations

import numpy as np
import pytest

from tests.vectors.conftest import clustered
from tiermem.client import Client, Condition, Kind, ObjectRef, Op, Payload

N, D, K = 600, 8, 10


def _payload(i: int) -> Payload:
    fields: dict[str, str | int | float | bool] = {
        "lang": ["en", "de", "fr"][i % 3],
        "year": 2000 + i % 25,
    }
    if i % 2:
        fields["score"] = i / N
    if i % 5 == 0:
        fields["pinned"] = True
    return Payload(fields, ObjectRef(Kind.BLOB, f"doc-{i}", "default"), f"s{i % 4}")


CASES: list[tuple[object, str, object]] = [
    ({"lang": "de"}, "", lambda i, p: p.fields["lang"] == "de"),
    ({"lang": ["en", "fr"]}, "", lambda i, p: p.fields["lang"] in ("en", "fr")),
    ([Condition("lang", Op.NE, "en")], "", lambda i, p: p.fields["lang"] != "en"),
    ([Condition("year", Op.GE, 2020)], "", lambda i, p: p.fields["year"] >= 2020),
    (
        [Condition("year", Op.LT, 2010), Condition("score", Op.GT, 0.5)],
        "",
        lambda i, p: p.fields["year"] < 2010 and p.fields.get("score", -1) > 0.5,
    ),
    ([Condition("score", Op.EXISTS)], "", lambda i, p: "score" in p.fields),
    ({"pinned": True}, "", lambda i, p: p.fields.get("pinned") is True),
    (None, "s2", lambda i, p: p.session == "s2"),
    ({"lang": "en"}, "s1", lambda i, p: p.session == "s1" and p.fields["lang"] == "en"),
    ({"lang": "xx"}, "", lambda i, p: False),
]


@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_filtered_search_returns_the_nearest_matching_vectors(vclient: Client, index: str) -> None:
    x = clustered(N, D, seed=11)
    payloads = [_payload(i) for i in range(N)]
    vclient.vectors.create("c", D, index=index)
    vclient.vectors.upsert("c", np.arange(N), x, payloads)
    q = clustered(20, D, seed=12)
    for where, session, keep in CASES:
        allowed = np.array([keep(i, p) for i, p in enumerate(payloads)], dtype=bool)
        res = vclient.vectors.search(
            "c", q, K, where=where, session=session, include_payloads=True, ef_search=256
        )
        assert res.payloads is not None
        for row, qv in enumerate(q):
            got = [int(i) for i in res.ids[row] if i >= 0]
            assert all(allowed[i] for i in got), (where, session)
            cand = np.flatnonzero(allowed)
            dist = ((x[cand] - qv) ** 2).sum(1)
            truth = cand[np.argsort(dist)[:K]]
            assert len(got) == min(K, len(cand))
            assert len(set(got) & set(truth.tolist())) >= 0.9 * len(truth)
            for rank, i in enumerate(got):
                assert res.payloads[row][rank] == payloads[i]
