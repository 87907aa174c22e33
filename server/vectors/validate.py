"""Validation of vector requests: every check runs before anything is logged,
so a rejected request changes nothing. Messages say what was wrong and which
limit (``vectors.*`` in the config) applies."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tiermem.server.config import VectorsConfig
from tiermem.server.errors import CapacityExceeded, InvalidArgument
from tiermem.server.model import MAX_SESSION_BYTES, ObjectKey, validate_session
from tiermem.server.vectors.types import CollectionSpec, Filter, FilterOp, IndexParams
from tiermem.v1 import vectors_pb2

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

FIELD_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # fullmatch: no trailing newline
MAX_EF_SEARCH = 4096


def resolve_params(cfg: VectorsConfig, p: IndexParams, dimension: int) -> IndexParams:
    """Check explicit index parameters; fill the zeros from the config."""
    if p.pq_m and dimension % p.pq_m:
        raise InvalidArgument(f"pq_m {p.pq_m} must divide the dimension {dimension}")
    if p.pq_nbits and not 4 <= p.pq_nbits <= 8:
        raise InvalidArgument(f"pq_nbits {p.pq_nbits} is out of range: use 4..8")
    if p.hnsw_m and not 4 <= p.hnsw_m <= 128:
        raise InvalidArgument(f"hnsw_m {p.hnsw_m} is out of range: use 4..128")
    for field, value, top in (
        ("hnsw_ef_construction", p.hnsw_ef_construction, MAX_EF_SEARCH),
        ("hnsw_ef_search", p.hnsw_ef_search, MAX_EF_SEARCH),
        ("ivf_nlist", p.ivf_nlist, 65_536),
        ("ivf_nprobe", p.ivf_nprobe, 65_536),
    ):
        if value > top:
            raise InvalidArgument(f"{field} {value} is too large: the limit is {top}")
    return IndexParams(
        p.hnsw_m or cfg.hnsw_m,
        p.hnsw_ef_construction or cfg.hnsw_ef_construction,
        p.hnsw_ef_search or cfg.hnsw_ef_search,
        p.ivf_nlist,
        p.ivf_nprobe or cfg.ivf_nprobe,
        p.pq_m,
        p.pq_nbits or cfg.pq_nbits,
    )


def check_ids(cfg: VectorsConfig, ids: I64) -> I64:
    """A flat int64 array of unique ids >= 0, within the batch limit."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise InvalidArgument("ids must be a flat array of integers")
    n = len(ids)
    if n == 0:
        raise InvalidArgument("no ids given")
    if n > cfg.max_batch_vectors:
        raise InvalidArgument(
            f"{n} ids in one request; the limit is vectors.max_batch_vectors = "
            f"{cfg.max_batch_vectors}: split the batch"
        )
    if ids.dtype.kind == "u" and int(ids.max()) >= 1 << 63:
        raise InvalidArgument("ids must be below 2^63")
    ids = ids.astype(np.int64)
    if int(ids.min()) < 0:
        raise InvalidArgument(f"ids must be >= 0, got {int(ids.min())}")
    uniq = np.unique(ids)
    if len(uniq) != n:
        counts = np.unique(ids, return_counts=True)
        dup = int(counts[0][np.argmax(counts[1] > 1)])
        raise InvalidArgument(f"id {dup} appears more than once in the batch")
    return ids


#: Largest squared Euclidean norm of a stored or query vector: any distance or
#: inner product between two such vectors (at most 4x this) stays below
#: float32's largest value. A larger finite vector was stored, and then no
#: search ever returned it (its distances overflowed to infinity).
MAX_SQUARED_NORM = float(np.finfo(np.float32).max) / 4
MAX_NORM = MAX_SQUARED_NORM**0.5


def check_vectors(
    cfg: VectorsConfig, vectors: F32, spec: CollectionSpec, n: int | None, what: str
) -> F32:
    """(rows, dimension) float32, finite, ``n`` rows when given."""
    arr = np.asarray(vectors)
    if arr.dtype != np.float32:
        raise InvalidArgument(f"{what} must be float32, got {arr.dtype}")
    d = spec.dimension
    if arr.ndim == 2 and arr.shape[1] != d:
        raise InvalidArgument(
            f"{what} have dimension {arr.shape[1]}; collection {spec.label} has {d}"
        )
    if arr.size % d:
        raise InvalidArgument(
            f"{what}: {arr.size} floats is not a multiple of the dimension {d} "
            f"of collection {spec.label}"
        )
    rows = arr.size // d
    if n is not None and rows != n:
        raise InvalidArgument(
            f"{n} ids but {rows} vectors of dimension {d} ({arr.size} floats) in the request"
        )
    if rows == 0:
        raise InvalidArgument(f"no {what} given")
    if rows > cfg.max_batch_vectors:
        raise InvalidArgument(
            f"{rows} {what} in one request; the limit is vectors.max_batch_vectors = "
            f"{cfg.max_batch_vectors}: split the batch"
        )
    arr = np.ascontiguousarray(arr.reshape(rows, d))
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise InvalidArgument(f"{what} row {row} has NaN or infinite values")
    squared = np.einsum("ij,ij->i", arr, arr, dtype=np.float64)
    too_long = squared > MAX_SQUARED_NORM
    if too_long.any():
        row = int(np.flatnonzero(too_long)[0])
        raise InvalidArgument(
            f"{what} row {row} has a Euclidean norm of {float(np.sqrt(squared[row])):.3g}; "
            f"at most {MAX_NORM:.3g}, so that distances stay finite in float32"
        )
    return arr


def check_payloads(
    cfg: VectorsConfig, payloads: Sequence[vectors_pb2.VectorPayload], n: int
) -> list[bytes | None]:
    """Validate; returns what to store per id (None = no payload: clear it)."""
    if not payloads:
        return [None] * n
    if len(payloads) != n:
        raise InvalidArgument(f"{len(payloads)} payloads for {n} ids: give none or one per id")
    out: list[bytes | None] = []
    for i, p in enumerate(payloads):
        if len(p.fields) > cfg.max_payload_fields:
            raise InvalidArgument(
                f"payload {i} has {len(p.fields)} fields; the limit is "
                f"vectors.max_payload_fields = {cfg.max_payload_fields}"
            )
        for field, value in p.fields.items():
            if not FIELD_RE.fullmatch(field):
                raise InvalidArgument(
                    f"payload {i}: field name {field[:64]!r} is invalid: use 1..64 "
                    "characters from A-Z a-z 0-9 _ . -"
                )
            kind = value.WhichOneof("value")
            if kind is None:
                raise InvalidArgument(f"payload {i}: field {field!r} has no value")
            if kind == "f" and not math.isfinite(value.f):
                raise InvalidArgument(f"payload {i}: field {field!r} is NaN or infinite")
        if p.HasField("ref"):
            ObjectKey.checked(p.ref.namespace, int(p.ref.kind), p.ref.key)
        if len(p.session.encode()) > MAX_SESSION_BYTES:
            raise InvalidArgument(f"payload {i}: session id is over {MAX_SESSION_BYTES} bytes")
        raw = p.SerializeToString()
        if len(raw) > cfg.max_payload_bytes:
            raise CapacityExceeded(
                f"payload {i} is {len(raw)} bytes; the limit is vectors.max_payload_bytes = "
                f"{cfg.max_payload_bytes}"
            )
        out.append(raw if raw else None)
    return out


def check_filter(cfg: VectorsConfig, flt: Filter) -> None:
    if len(flt.conditions) > cfg.max_filter_conditions:
        raise InvalidArgument(
            f"filter has {len(flt.conditions)} conditions; the limit is "
            f"vectors.max_filter_conditions = {cfg.max_filter_conditions}"
        )
    validate_session(flt.session)
    for cond in flt.conditions:
        if not FIELD_RE.fullmatch(cond.field):
            raise InvalidArgument(f"filter field {cond.field[:64]!r} is invalid")
        n = len(cond.values)
        if cond.op == FilterOp.IN and n == 0:
            raise InvalidArgument(f"filter on {cond.field!r}: IN needs at least one value")
        if cond.op not in (FilterOp.IN, FilterOp.EXISTS) and n != 1:
            raise InvalidArgument(
                f"filter on {cond.field!r}: {cond.op.name} needs exactly one value, got {n}"
            )
        if cond.op in (FilterOp.LT, FilterOp.LE, FilterOp.GT, FilterOp.GE) and isinstance(
            cond.values[0], str
        ):
            raise InvalidArgument(
                f"filter on {cond.field!r}: {cond.op.name} needs a number, not a string"
            )
