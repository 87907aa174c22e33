"""Operator arguments that are valid JSON of the wrong shape, or a time limit
that is not a number, are INVALID_ARGUMENT with the reason, never INTERNAL:
JSON nested past the parser's depth or holding a 5,000-digit integer, an edge
weight too large for a float, strings where a vector's numbers go, a ragged
vector, a list as a tag, grid rows that are not strings or lists, a NaN
timeout (which passed the range check and made the call time out at once)."""

from __future__ import annotations

import json

import pytest

from tiermem.client import Client, InvalidArgumentError
from tiermem.v1 import operators_pb2, operators_pb2_grpc


def invoke_raw(c: Client, name: str, args_json: str, timeout_s: float = 0.0) -> object:
    stub = operators_pb2_grpc.OperatorServiceStub(c.transport.channel)
    request = operators_pb2.InvokeRequest(name=name, args_json=args_json, timeout_s=timeout_s)
    return c.transport.call(
        lambda t: stub.Invoke(request, timeout=t, metadata=c.transport.metadata), 30
    )


CASES = {
    "args nested past the parser's depth": (
        "math.eval",
        '{"expression": "1", "vars": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ),
    "a 5,000-digit integer": (
        "math.eval",
        '{"expression": "1", "vars": {"x": 1' + "0" * 5000 + "}}",
    ),
    "an edge weight too large for a float": (
        "graph.shortest_path",
        json.dumps({"source": "a", "target": "b", "edges": [["a", "b", 10**400]]}),
    ),
    "a vector of strings": ("vector.topk", json.dumps({"vector": ["x"] * 256})),
    "a ragged vector": ("vector.topk", json.dumps({"vector": [[1.0], 2.0]})),
    "a list as a tag": ("vector.topk", json.dumps({"text": "hi", "tags": [[1]]})),
    "a grid row that is a number": (
        "grid.shortest_path",
        json.dumps({"start": [0, 0], "goal": [0, 0], "grid": [5]}),
    ),
    "a second grid row that is a number": (
        "grid.shortest_path",
        json.dumps({"start": [0, 0], "goal": [0, 0], "grid": ["..", 7]}),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_unusable_arguments_are_invalid_argument(aclient: Client, case: tuple[str, str]) -> None:
    name, args = case
    with pytest.raises(InvalidArgumentError):
        invoke_raw(aclient, name, args)


def test_a_nan_time_limit_is_invalid_argument(aclient: Client) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout_s"):
        invoke_raw(aclient, "math.eval", '{"expression": "1+1"}', float("nan"))
    assert json.loads(str(invoke_raw(aclient, "math.eval", '{"expression": "1+1"}').result_json))
