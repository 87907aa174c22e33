"""Transport-free types of vector collections.

Enum values equal the wire enums in ``proto/tiermem/v1/vectors.proto`` so
conversion is a cast. Payloads are kept as the wire ``VectorPayload`` message
(they are stored and returned as-is); filters are parsed into ``Filter``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from tiermem.server.errors import InvalidArgument


class Metric(IntEnum):
    L2 = 1
    INNER_PRODUCT = 2
    COSINE = 3


class IndexKind(IntEnum):
    AUTO = 1
    FLAT = 2
    HNSW = 3
    IVF_PQ = 4


class FilterOp(IntEnum):
    EQ = 1
    NE = 2
    IN = 3
    LT = 4
    LE = 5
    GT = 6
    GE = 7
    EXISTS = 8


MAX_NAME_BYTES = 128
_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")  # fullmatch: no trailing newline


def validate_collection_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise InvalidArgument(
            f"collection name {name[:64]!r} is invalid: use 1..{MAX_NAME_BYTES} characters "
            "from A-Z a-z 0-9 . _ -"
        )
    return name


@dataclass(frozen=True, slots=True)
class IndexParams:
    """Effective index parameters (0 for IVF nlist = chosen at training)."""

    hnsw_m: int
    hnsw_ef_construction: int
    hnsw_ef_search: int
    ivf_nlist: int
    ivf_nprobe: int
    pq_m: int
    pq_nbits: int


@dataclass(frozen=True, slots=True)
class CollectionSpec:
    """What a collection is: fixed at creation."""

    namespace: str
    name: str
    dimension: int
    metric: Metric
    index: IndexKind
    params: IndexParams
    session: str = ""

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


def damage_name(namespace: str, name: str) -> str:
    """How the damage register and fsck name a collection (as an object of kind VECTOR)."""
    return f"{namespace}/VECTOR/{name}"


Scalar = str | float | bool


@dataclass(frozen=True, slots=True)
class Condition:
    """``field op values``; numeric values are float64, strings stay strings."""

    field: str
    op: FilterOp
    values: tuple[Scalar, ...]


@dataclass(frozen=True, slots=True)
class Filter:
    conditions: tuple[Condition, ...] = ()
    session: str = ""

    @property
    def empty(self) -> bool:
        return not self.conditions and not self.session


#: The payload column that holds each vector's session (not a user field name:
#: user field names may not start with "$").
SESSION_FIELD = "$session"


@dataclass(slots=True)
class SearchResult:
    """nq x k ids (-1 = no result) and distances, plus payloads when asked for."""

    ids: npt.NDArray[np.int64]  # (nq, k)
    distances: npt.NDArray[np.float32]  # (nq, k)
    payloads: list[bytes] = field(default_factory=list)  # serialized VectorPayload, nq*k
