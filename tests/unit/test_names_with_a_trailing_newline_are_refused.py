"""Names checked against a character pattern refuse a trailing newline: with
``re.match`` and ``^...$`` the ``$`` also matched just before a final ``\\n``,
so ``"team\\n"`` passed as a namespace, a collection, a payload or filter
field, an embedding space and a KV scope's dtype (names that reach metric
labels, log lines, table names and object keys)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tiermem.kv_keys import scope_problem
from tiermem.server.blobs.model import space_name
from tiermem.server.config import VectorsConfig
from tiermem.server.errors import InvalidArgument
from tiermem.server.model import ObjectKey, validate_namespace
from tiermem.server.vectors.types import Condition, Filter, FilterOp, validate_collection_name
from tiermem.server.vectors.validate import check_filter, check_payloads
from tiermem.v1 import vectors_pb2


def _payload_field(name: str) -> None:
    payload = vectors_pb2.VectorPayload()
    payload.fields[name].s = "v"
    check_payloads(VectorsConfig(), [payload], 1)


def _filter_field(name: str) -> None:
    check_filter(VectorsConfig(), Filter((Condition(name, FilterOp.EQ, ("v",)),)))


def _kv_dtype(name: str) -> None:
    problem = scope_problem("model", 1, 0, name.replace("-", "_"))  # dtypes have no "-"
    if problem is not None:
        raise InvalidArgument(problem)


CHECKS: dict[str, Callable[[str], object]] = {
    "namespace": validate_namespace,
    "object key's namespace": lambda n: ObjectKey.checked(n, 1, "k"),
    "collection": validate_collection_name,
    "payload field": _payload_field,
    "filter field": _filter_field,
    "embedding space": space_name,
    "KV scope dtype": _kv_dtype,
}


@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_a_name_is_taken_as_is_and_refused_with_a_trailing_newline(
    check: Callable[[str], object],
) -> None:
    check("team-a")  # accepted
    for bad in ("team-a\n", "team-a\n\n", "\nteam-a"):
        with pytest.raises(InvalidArgument):
            check(bad)
