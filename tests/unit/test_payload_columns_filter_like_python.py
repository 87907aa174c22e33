"""Payload columns answer filters exactly as evaluating each payload in Python
would, across growth, snapshot round trips and compaction renumbering."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tiermem.server.vectors.payloads import PayloadColumns, scalar
from tiermem.server.vectors.types import Condition, Filter, FilterOp
from tiermem.v1 import vectors_pb2

FIELDS = ["a", "b", "c"]
values = st.one_of(
    st.sampled_from(["x", "y", "z"]),
    st.integers(-3, 3),
    st.floats(-3, 3, allow_nan=False),
    st.booleans(),
)
payloads = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from(FIELDS), values, max_size=3),
        st.sampled_from(["", "s1", "s2"]),
    ),
    min_size=1,
    max_size=60,
)
conditions = st.lists(
    st.tuples(
        st.sampled_from(FIELDS),
        st.sampled_from(list(FilterOp)),
        st.lists(values, min_size=1, max_size=3),
    ),
    max_size=3,
)


def _num(v: Any) -> float | str:
    return v if isinstance(v, str) else float(v)


def _python(fields: dict[str, Any], session: str, flt: Filter) -> bool:
    if flt.session and session != flt.session:
        return False
    for c in flt.conditions:
        present = c.field in fields
        v = _num(fields[c.field]) if present else None
        if c.op == FilterOp.EXISTS:
            ok = present
        elif c.op in (FilterOp.EQ, FilterOp.IN, FilterOp.NE):
            ok = present and v in c.values
            ok = not ok if c.op == FilterOp.NE else ok
        else:
            x = c.values[0]
            if not present or isinstance(v, str) or isinstance(x, str):
                ok = False
            else:
                ok = {
                    FilterOp.LT: v < x,
                    FilterOp.LE: v <= x,
                    FilterOp.GT: v > x,
                    FilterOp.GE: v >= x,
                }[c.op]
        if not ok:
            return False
    return True


def _msg(fields: dict[str, Any], session: str) -> vectors_pb2.VectorPayload:
    out = vectors_pb2.VectorPayload(session=session)
    for k, v in fields.items():
        pv = out.fields[k]
        if isinstance(v, bool):
            pv.b = v
        elif isinstance(v, int):
            pv.i = v
        elif isinstance(v, float):
            pv.f = v
        else:
            pv.s = v
    return out


@settings(max_examples=150, deadline=None)
@given(payloads, conditions, st.sampled_from(["", "s1", "s2"]))
def test_mask_matches_python_evaluation(
    rows: list[tuple[dict[str, Any], str]],
    conds: list[tuple[str, FilterOp, list[Any]]],
    session: str,
) -> None:
    cols = PayloadColumns()
    cols.grow(len(rows))
    for slot, (fields, sess) in enumerate(rows):
        cols.set(slot, _msg(fields, sess))
    flt = Filter(
        tuple(
            Condition(f, op, tuple(scalar(_msg({"v": v}, "").fields["v"]) for v in vals))
            for f, op, vals in conds
            # the service rejects ranges on strings before they get here
            if not (
                op in (FilterOp.LT, FilterOp.LE, FilterOp.GT, FilterOp.GE)
                and isinstance(vals[0], str)
            )
        ),
        session,
    )
    want = np.array([_python(f, s, flt) for f, s in rows], dtype=bool)
    assert np.array_equal(cols.mask(flt, len(rows)), want)

    again = PayloadColumns.from_arrays(*cols.to_arrays(), cols.size)  # snapshot round trip
    assert np.array_equal(again.mask(flt, len(rows)), want)

    keep = np.arange(0, len(rows), 2, dtype=np.int64)  # compaction renumbers slots
    again.take(keep)
    assert np.array_equal(again.mask(flt, len(keep)), want[keep])
