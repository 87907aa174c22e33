"""Payload fields as columns over index slots, for filters at numpy speed.

The payload itself (the wire ``VectorPayload``) is stored in RocksDB and
returned from there; filters never touch it. Instead every field seen in a
collection gets columns indexed by slot (the faiss label of a vector):

```
 slot:        0      1      2      3   ...
 num["year"]  2021   NaN    2019   2024      float64, NaN = absent (ints, floats, bools)
 str["lang"]  0      1      -1     0         int32 codes into vocab ["en", "de"], -1 = absent
```

A filter becomes a boolean mask over slots (vectorised comparisons), which the
index search turns into a faiss ``IDSelectorBitmap``. Slots are never reused
(an upsert of an existing id takes a fresh slot), so writing a payload only
ever fills fresh cells; compaction renumbers slots with ``take``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.server.errors import InvalidArgument
from tiermem.server.vectors.types import SESSION_FIELD, Condition, Filter, FilterOp, Scalar
from tiermem.v1 import vectors_pb2

Mask = npt.NDArray[np.bool_]


class PayloadColumns:
    def __init__(self) -> None:
        self.size = 0  # slots covered
        self.num: dict[str, npt.NDArray[np.float64]] = {}
        self.codes: dict[str, npt.NDArray[np.int32]] = {}
        self.vocab: dict[str, dict[str, int]] = {}

    # -- writes ------------------------------------------------------------------
    def grow(self, size: int) -> None:
        """Cover slots ``[0, size)``; new cells are absent."""
        if size <= self.size:
            return
        capacity = self._allocated()
        if capacity and size > capacity:
            new_cap = max(size, 2 * capacity)
            for name, col in self.num.items():
                grown = np.full(new_cap, np.nan)
                grown[: len(col)] = col
                self.num[name] = grown
            for name, codes in self.codes.items():
                grown_codes = np.full(new_cap, -1, dtype=np.int32)
                grown_codes[: len(codes)] = codes
                self.codes[name] = grown_codes
        self.size = size

    def _allocated(self) -> int:
        """Length of the column arrays (all equal), 0 when there are none."""
        for col in self.num.values():
            return len(col)
        for codes in self.codes.values():
            return len(codes)
        return 0

    def _capacity(self) -> int:
        return self._allocated() or max(self.size, 1024)

    def _num_col(self, name: str) -> npt.NDArray[np.float64]:
        col = self.num.get(name)
        if col is None:
            col = self.num[name] = np.full(self._capacity(), np.nan)
        return col

    def _code_col(self, name: str) -> npt.NDArray[np.int32]:
        col = self.codes.get(name)
        if col is None:
            col = self.codes[name] = np.full(self._capacity(), -1, dtype=np.int32)
            self.vocab[name] = {}
        return col

    def set(self, slot: int, payload: vectors_pb2.VectorPayload) -> None:
        """Record the filterable fields of the (fresh) ``slot``."""
        for name, value in payload.fields.items():
            kind = value.WhichOneof("value")
            if kind == "s":
                self._set_str(name, slot, value.s)
            elif kind == "i":
                self._num_col(name)[slot] = float(value.i)
            elif kind == "f":
                self._num_col(name)[slot] = value.f
            elif kind == "b":
                self._num_col(name)[slot] = 1.0 if value.b else 0.0
        if payload.session:
            self._set_str(SESSION_FIELD, slot, payload.session)

    def _set_str(self, name: str, slot: int, value: str) -> None:
        col = self._code_col(name)
        vocab = self.vocab[name]
        code = vocab.get(value)
        if code is None:
            code = vocab[value] = len(vocab)
        col[slot] = code

    def take(self, slots: npt.NDArray[np.int64]) -> None:
        """Renumber: new slot i holds old slot ``slots[i]`` (compaction)."""
        for name, col in self.num.items():
            self.num[name] = col[slots]
        for name, codes in self.codes.items():
            self.codes[name] = codes[slots]
        self.size = len(slots)

    # -- reads -------------------------------------------------------------------
    def mask(self, flt: Filter, size: int) -> Mask:
        """Slots ``[0, size)`` that pass every condition of ``flt``."""
        self.grow(size)
        out = np.ones(size, dtype=bool)
        if flt.session:
            out &= self._str_eq(SESSION_FIELD, flt.session, size)
        for cond in flt.conditions:
            out &= self._condition(cond, size)
        return out

    def _str_eq(self, name: str, value: str, size: int) -> Mask:
        codes = self.codes.get(name)
        code = self.vocab.get(name, {}).get(value)
        if codes is None or code is None:
            return np.zeros(size, dtype=bool)
        out: Mask = codes[:size] == code
        return out

    def _condition(self, cond: Condition, size: int) -> Mask:
        name, op, values = cond.field, cond.op, cond.values
        if op == FilterOp.EXISTS:
            out = np.zeros(size, dtype=bool)
            if name in self.num:
                out |= ~np.isnan(self.num[name][:size])
            if name in self.codes:
                out |= self.codes[name][:size] >= 0
            return out
        if op == FilterOp.NE:
            return ~self._condition(Condition(name, FilterOp.EQ, values), size)
        if op in (FilterOp.EQ, FilterOp.IN):
            out = np.zeros(size, dtype=bool)
            strings = [v for v in values if isinstance(v, str)]
            numbers = [float(v) for v in values if not isinstance(v, str)]
            if strings and name in self.codes:
                vocab = self.vocab[name]
                wanted = [vocab[s] for s in strings if s in vocab]
                if wanted:
                    out |= np.isin(self.codes[name][:size], wanted)
            if numbers and name in self.num:
                out |= np.isin(self.num[name][:size], numbers)
            return out
        value = values[0]
        if isinstance(value, str):
            raise InvalidArgument(f"filter on {name!r}: {op.name} needs a number, not a string")
        col = self.num.get(name)
        if col is None:
            return np.zeros(size, dtype=bool)
        x = col[:size]
        with np.errstate(invalid="ignore"):
            if op == FilterOp.LT:
                return x < value
            if op == FilterOp.LE:
                return x <= value
            if op == FilterOp.GT:
                return x > value
            return x >= value

    @property
    def nbytes(self) -> int:
        # read without the collection's lock (memory accounting, budget): copy
        # each dict's values first (atomic), as an upsert may add a field's
        # column meanwhile and a generator over the live dict would then raise
        total = sum(c.nbytes for c in list(self.num.values()))
        total += sum(c.nbytes for c in list(self.codes.values()))
        return total + sum(64 * len(v) for v in list(self.vocab.values()))

    # -- snapshot form -----------------------------------------------------------
    def to_arrays(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """Arrays (``num0``, ``str0`` ...) and a JSON-able description naming them."""
        arrays: dict[str, npt.NDArray[Any]] = {}
        desc: dict[str, Any] = {"num": [], "str": []}
        for i, (name, col) in enumerate(self.num.items()):
            arrays[f"num{i}"] = col[: self.size]
            desc["num"].append(name)
        for i, (name, codes) in enumerate(self.codes.items()):
            arrays[f"str{i}"] = codes[: self.size]
            vocab = sorted(self.vocab[name].items(), key=lambda kv: kv[1])
            desc["str"].append([name, [s for s, _ in vocab]])
        return arrays, desc

    @classmethod
    def from_arrays(
        cls, arrays: dict[str, npt.NDArray[Any]], desc: dict[str, Any], size: int
    ) -> PayloadColumns:
        cols = cls()
        cols.size = size
        # A snapshot holds the columns as long as they were: they grow only when
        # an upsert carries payloads (or a filter runs), so after upserts
        # without any they are shorter than the slots; the cells past their end
        # are absent (NaN, -1), and every column covers all ``size`` slots.
        for i, name in enumerate(desc.get("num", [])):
            num = np.full(size, np.nan)
            saved = np.asarray(arrays[f"num{i}"], dtype=np.float64)[:size]
            num[: len(saved)] = saved
            cols.num[name] = num
        for i, (name, words) in enumerate(desc.get("str", [])):
            codes = np.full(size, -1, dtype=np.int32)
            saved_codes = np.asarray(arrays[f"str{i}"], dtype=np.int32)[:size]
            codes[: len(saved_codes)] = saved_codes
            cols.codes[name] = codes
            cols.vocab[name] = {w: j for j, w in enumerate(words)}
        return cols


def describe(desc: dict[str, Any]) -> str:
    return json.dumps(desc, separators=(",", ":"))


def scalar(value: vectors_pb2.PayloadValue) -> Scalar:
    """A filter value as a Python scalar (numbers as float)."""
    kind = value.WhichOneof("value")
    if kind == "s":
        return value.s
    if kind == "i":
        return float(value.i)
    if kind == "f":
        return float(value.f)
    if kind == "b":
        return 1.0 if value.b else 0.0
    raise InvalidArgument("a filter value is empty: set one of s, i, f, b")
