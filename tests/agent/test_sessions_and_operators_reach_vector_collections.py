"""Sessions and operators work with the collections service: closing a session
drops the collections it owns; ``vector.topk`` searches any collection."""

import numpy as np
import pytest

from tiermem.client import Client, NotFoundError


def test_closing_a_session_drops_its_collections(aclient: Client) -> None:
    s = aclient.sessions.open(label="rag")
    x = np.eye(8, dtype=np.float32)
    aclient.vectors.create("owned", 8, session=s.id)
    aclient.vectors.create("kept", 8)
    aclient.vectors.upsert("owned", list(range(8)), x)
    aclient.vectors.upsert("kept", list(range(8)), x)
    aclient.sessions.close(s.id, "done")
    with pytest.raises(NotFoundError):
        aclient.vectors.count("owned")
    assert aclient.vectors.count("kept") == 8


def test_vector_topk_operator_searches_a_collection(aclient: Client) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 16)).astype(np.float32)
    aclient.vectors.create("facts", 16, metric="COSINE")
    aclient.vectors.upsert("facts", list(range(100, 150)), x)
    hits = aclient.operators.invoke(
        "vector.topk", {"collection": "facts", "vector": x[7].tolist(), "k": 3}
    )
    assert hits[0]["id"] == 107 and len(hits) == 3
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
    with pytest.raises(NotFoundError):
        aclient.operators.invoke("vector.topk", {"collection": "nope", "vector": [0.0] * 16})
