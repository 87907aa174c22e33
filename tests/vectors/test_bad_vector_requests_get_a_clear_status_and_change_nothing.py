"""Bad input is rejected with a status that says what was wrong, and nothing
stored changes: not the vectors, not the log sequence, not the payloads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest

from tests.vectors.conftest import clustered
from tiermem.client import (
    AlreadyExistsError,
    CapacityError,
    Client,
    Condition,
    InvalidArgumentError,
    NotFoundError,
    Op,
    TiermemClientError,
)
from tiermem.v1 import vectors_pb2, vectors_pb2_grpc

D = 8
GOOD = clustered(4, D, seed=1)


def _nan() -> np.ndarray:
    v = GOOD.copy()
    v[2, 3] = np.nan
    return v


def _inf() -> np.ndarray:
    v = GOOD.copy()
    v[1, 0] = np.inf
    return v


BAD_CALLS: list[tuple[str, Callable[[Client], Any], type[TiermemClientError], str]] = [
    (
        "wrong dimension",
        lambda c: c.vectors.upsert("c", [1, 2], clustered(2, D + 1)),
        InvalidArgumentError,
        "dimension",
    ),
    ("NaN", lambda c: c.vectors.upsert("c", [1, 2, 3, 4], _nan()), InvalidArgumentError, "NaN"),
    (
        "inf",
        lambda c: c.vectors.upsert("c", [1, 2, 3, 4], _inf()),
        InvalidArgumentError,
        "infinite",
    ),
    (
        "negative id",
        lambda c: c.vectors.upsert("c", [1, -2, 3, 4], GOOD),
        InvalidArgumentError,
        ">= 0",
    ),
    (
        "duplicate id",
        lambda c: c.vectors.upsert("c", [1, 2, 2, 4], GOOD),
        InvalidArgumentError,
        "more than once",
    ),
    (
        "payload too big",
        lambda c: c.vectors.upsert("c", [1, 2, 3, 4], GOOD, [{"a": "x" * 9000}] * 4),
        CapacityError,
        "max_payload_bytes",
    ),
    (
        "bad field name",
        lambda c: c.vectors.upsert("c", [1, 2, 3, 4], GOOD, [{"$x": 1}] * 4),
        InvalidArgumentError,
        "field name",
    ),
    (
        "cosine zero",
        lambda c: c.vectors.upsert("cos", [1], np.zeros((1, D), np.float32)),
        InvalidArgumentError,
        "zero",
    ),
    ("k = 0", lambda c: c.vectors.search("c", GOOD, 0), InvalidArgumentError, "at least 1"),
    ("k too large", lambda c: c.vectors.search("c", GOOD, 5000), InvalidArgumentError, "max_k"),
    (
        "query dimension",
        lambda c: c.vectors.search("c", clustered(1, D - 1), 3),
        InvalidArgumentError,
        "dimension",
    ),
    ("query NaN", lambda c: c.vectors.search("c", _nan(), 3), InvalidArgumentError, "NaN"),
    (
        "range on string",
        lambda c: c.vectors.search("c", GOOD, 3, where=[Condition("a", Op.LT, "x")]),
        InvalidArgumentError,
        "number",
    ),
    ("unknown collection", lambda c: c.vectors.search("nope", GOOD, 3), NotFoundError, "nope"),
    (
        "unknown collection upsert",
        lambda c: c.vectors.upsert("nope", [1, 2, 3, 4], GOOD),
        NotFoundError,
        "nope",
    ),
    ("duplicate create", lambda c: c.vectors.create("c", D), AlreadyExistsError, "exists"),
    (
        "unknown namespace",
        lambda c: c.vectors.create("x", D, namespace="ghost"),
        NotFoundError,
        "ghost",
    ),
    ("bad name", lambda c: c.vectors.create("a/b", D), InvalidArgumentError, "name"),
    ("dimension 0", lambda c: c.vectors.create("z", 0), InvalidArgumentError, "dimension"),
    (
        "pq_m",
        lambda c: c.vectors.create(
            "z",
            D,
            index="ivf_pq",
            params=__import__("tiermem.client", fromlist=["IndexParams"]).IndexParams(pq_m=3),
        ),
        InvalidArgumentError,
        "divide",
    ),
]


def _state(client: Client) -> tuple[Any, ...]:
    res = client.vectors.search("c", GOOD, 4, include_payloads=True)
    info = client.vectors.describe("c")
    return (res.ids.tolist(), res.payloads, info.count, info.log_seq, client.vectors.count("cos"))


@pytest.fixture(scope="module")
def stocked(shared_vclient: Client) -> Client:
    """One collection for every case: each rejected call must leave it as it was."""
    vclient = shared_vclient
    vclient.vectors.create("c", D, index="flat")
    vclient.vectors.create("cos", D, metric="cosine")
    vclient.vectors.upsert("c", [1, 2, 3, 4], GOOD, [{"a": i} for i in range(4)])
    return vclient


@pytest.mark.parametrize(
    ("what", "call", "error", "says"), BAD_CALLS, ids=[case[0] for case in BAD_CALLS]
)
def test_bad_request_is_rejected_and_changes_nothing(
    stocked: Client,
    what: str,
    call: Callable[[Client], Any],
    error: type[TiermemClientError],
    says: str,
) -> None:
    before = _state(stocked)
    with pytest.raises(error) as info:
        call(stocked)
    assert says in info.value.message, info.value.message
    assert _state(stocked) == before
    assert [i.name for i in stocked.vectors.list()] == ["c", "cos"]


def test_malformed_raw_bytes_are_invalid_argument(stocked: Client) -> None:
    stub = vectors_pb2_grpc.VectorServiceStub(stocked.transport.channel)
    ref = vectors_pb2.CollectionRef(namespace="default", name="c")
    before = _state(stocked)
    for request in (
        vectors_pb2.UpsertRequest(collection=ref, ids=b"\x01" * 7, vectors=GOOD[:1].tobytes()),
        vectors_pb2.UpsertRequest(collection=ref, ids=np.int64([5]).tobytes(), vectors=b"abc"),
        vectors_pb2.UpsertRequest(  # 2 ids, 1 payload
            collection=ref,
            ids=np.int64([5, 6]).tobytes(),
            vectors=GOOD[:2].tobytes(),
            payloads=[vectors_pb2.VectorPayload(session="s")],
        ),
    ):
        with pytest.raises(grpc.RpcError) as info:
            stub.Upsert(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        stub.Search(
            vectors_pb2.SearchRequest(
                collection=ref,
                queries=GOOD.tobytes(),
                k=3,
                filter=vectors_pb2.Filter(conditions=[vectors_pb2.Condition(field="a", op=99)]),
            )
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _state(stocked) == before
