"""Compact in-memory index of every object, for the hot path and the planner.

A million objects is normal, so there is no Python object per entry beyond one
dict slot: ``dict[id64, row]`` maps the high 64 bits of the key's 128-bit hash to
a row of fixed-width numpy columns. The low 64 bits are kept in ``check`` and
compared on lookup; two keys whose high halves collide go to a small overflow
map keyed by the encoded key. Measured cost is about 190 bytes per object.

Column layout (one row per object)::

    check u64 | tier u8 | kind u8 | flags u8 | ns u16 | size i64 | loc i64 |
    seg i32 | seg_off i64 | checksum u64 | atime f64 | rate f32 | expires u64 | sess u32

``flags`` holds FLAG_LIVE / FLAG_DURABLE / FLAG_PINNED / FLAG_SEEN and the
access hint (bits 4-5); ``atime`` / ``rate`` are the access model's last access
and decayed rate (``tiermem.placement.access``); ``sess`` an interned session id
(``catalog.sessions``; 0 = none) for cost per session.

``loc`` is the tier engine's location of the serving copy (DRAM/HBM), ``seg`` /
``seg_off`` the SSD copy (``SEG_INLINE`` = inline in RocksDB, ``SEG_NONE`` = no
SSD copy). Vectorised queries (LRU candidates, expired rows, rows in a segment)
run over the columns without touching Python objects.

Not thread-safe: the owner (the catalog) serialises access.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from tiermem.placement.model import (  # the flag bits are shared with the planner
    FLAG_DURABLE,
    FLAG_LIVE,
    FLAG_PINNED,
    FLAG_SEEN,
    HINT_MASK,
    HINT_SHIFT,
)
from tiermem.server.errors import InvariantViolation, invariant

SEG_NONE = -2
SEG_INLINE = -1

__all__ = [
    "FLAG_DURABLE",
    "FLAG_LIVE",
    "FLAG_PINNED",
    "FLAG_SEEN",
    "HINT_MASK",
    "HINT_SHIFT",
    "SEG_INLINE",
    "SEG_NONE",
    "ObjectIndex",
    "key_hash",
]

_MASK64 = (1 << 64) - 1

COLUMNS: dict[str, npt.DTypeLike] = {
    "check": np.uint64,
    "tier": np.uint8,
    "kind": np.uint8,
    "flags": np.uint8,
    "ns": np.uint16,
    "size": np.int64,
    "loc": np.int64,
    "seg": np.int32,
    "seg_off": np.int64,
    "checksum": np.uint64,
    "atime": np.float64,
    "rate": np.float32,
    "expires": np.uint64,
    "sess": np.uint32,
}


def key_hash(encoded_key: bytes) -> tuple[int, int]:
    """(high, low) 64-bit halves of the key's xxh3-128 hash."""
    h = xxhash.xxh3_128_intdigest(encoded_key)
    return h >> 64, h & _MASK64


class ObjectIndex:
    """Rows of fixed-width columns addressed by encoded object key."""

    def __init__(self, initial_rows: int = 1024) -> None:
        self._rows: dict[int, int] = {}
        self._overflow: dict[bytes, int] = {}
        self._free: list[int] = []
        self._next = 0
        self.capacity = 0
        self.cols: dict[str, npt.NDArray[Any]] = {}
        self._grow(max(16, initial_rows))

    def __len__(self) -> int:
        return len(self._rows) + len(self._overflow)

    @property
    def high_water_row(self) -> int:
        """Rows ``[0, high_water_row)`` may be live; scan only those."""
        return self._next

    def _grow(self, rows: int) -> None:
        for name, dtype in COLUMNS.items():
            new = np.zeros(rows, dtype=dtype)
            old = self.cols.get(name)
            if old is not None:
                new[: len(old)] = old
            self.cols[name] = new
        self.capacity = rows

    def find(self, encoded_key: bytes) -> int | None:
        """Row of the key, or None."""
        hi, lo = key_hash(encoded_key)
        row = self._rows.get(hi)
        if row is not None and int(self.cols["check"][row]) == lo:
            return row
        if self._overflow:
            return self._overflow.get(encoded_key)
        return None

    def insert(self, encoded_key: bytes) -> int:
        """Allocate a row for a key that is not present; columns are zeroed."""
        invariant(self.find(encoded_key) is None, "index insert of a present key")
        hi, lo = key_hash(encoded_key)
        if self._free:
            row = self._free.pop()
        else:
            if self._next == self.capacity:
                self._grow(self.capacity * 2)
            row = self._next
            self._next += 1
        for col in self.cols.values():
            col[row] = 0
        self.cols["check"][row] = lo
        self.cols["flags"][row] = FLAG_LIVE
        if hi in self._rows:
            self._overflow[encoded_key] = row
        else:
            self._rows[hi] = row
        return row

    def insert_many(self, encoded_keys: list[bytes]) -> npt.NDArray[np.int64]:
        """Bulk insert for start-up recovery (keys must be absent). Sets ``check``
        and FLAG_LIVE; the caller fills the other columns vectorised."""
        n = len(encoded_keys)
        while self._next + n > self.capacity:
            self._grow(self.capacity * 2)
        first = self._next
        rows = np.arange(first, first + n, dtype=np.int64)
        checks = np.empty(n, dtype=np.uint64)
        table, overflow = self._rows, self._overflow
        for i, key in enumerate(encoded_keys):
            h = xxhash.xxh3_128_intdigest(key)
            hi = h >> 64
            checks[i] = h & _MASK64
            if hi in table:
                overflow[key] = first + i
            else:
                table[hi] = first + i
        self._next += n
        self.cols["check"][first : first + n] = checks
        self.cols["flags"][first : first + n] = FLAG_LIVE
        return rows

    def remove(self, encoded_key: bytes) -> int:
        """Free the key's row and return it (its column values stay readable until reuse)."""
        hi, lo = key_hash(encoded_key)
        row = self._rows.get(hi)
        if row is not None and int(self.cols["check"][row]) == lo:
            del self._rows[hi]
        else:
            row = self._overflow.pop(encoded_key, None)
            if row is None:
                raise InvariantViolation("index remove of a missing key")
        self.cols["flags"][row] = 0
        self._free.append(row)
        return row

    def live_rows(self) -> npt.NDArray[np.int64]:
        n = self._next
        return np.flatnonzero(self.cols["flags"][:n] & FLAG_LIVE)

    def nbytes(self) -> int:
        """Bytes held by the columns (dict overhead not included)."""
        return sum(col.nbytes for col in self.cols.values())
