"""Compact in-memory index of every object, for the hot path and the planner.

A million objects is normal, so there is no Python object per entry beyond one
dict slot: ``dict[id64, row]`` maps the high 64 bits of the key's 128-bit hash to
a row of fixed-width numpy columns. The low 64 bits are kept in ``check`` and
compared on lookup; two keys whose high halves collide go to a small overflow
map keyed by the encoded key. Measured cost is about 190 bytes per object.

Column layout (one row per object)::

    check u64 | tier u8 | kind u8 | flags u8 | ns u16 | size i64 | loc i64 |
    seg i32 | seg_off i64 | checksum u64 | atime f64 | rate f32 | expires u64 | sess u32

``flags`` holds FLAG_LIVE / FLAG_DURABLE / FLAG_PINNED / FLAG_SEEN, the
access hint (bits 4-5) and FLAG_REMOTE (bit 6: a copy is in the remote store);
``atime`` / ``rate`` are the access model's last access
and decayed rate (``tiermem.placement.access``); ``sess`` an interned session id
(``catalog.sessions``; 0 = none) for cost per session.

``loc`` is the tier engine's location of the serving copy (DRAM/HBM), ``seg`` /
``seg_off`` the SSD copy (``SEG_INLINE`` = inline in RocksDB, ``SEG_NONE`` = no
SSD copy). Vectorised queries (LRU candidates, expired rows, rows in a segment)
run over the columns without touching Python objects.

Not thread-safe: the owner (the catalog) serialises access.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from tiermem.placement.model import (  # the flag bits are shared with the planner
    FLAG_DURABLE,
    FLAG_LIVE,
    FLAG_PINNED,
    FLAG_REMOTE,
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
    "FLAG_REMOTE",
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


#: The key's xxh3-128 hash as 16 bytes: high half then low half, big-endian
#: (the same hash as ``key_hash``; a module attribute so tests can replace it).
key_digest = xxhash.xxh3_128_digest


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

    def find_many(self, encoded_keys: Sequence[bytes]) -> npt.NDArray[np.int64]:
        """Rows of many keys at once (-1 where absent). Per key only the hash and
        one dict probe run in Python; splitting the 128-bit hashes and checking
        the low halves are vectorised (the digest bytes are big-endian hi, lo)."""
        if not encoded_keys:
            return np.zeros(0, dtype=np.int64)
        digest = key_digest
        halves = np.frombuffer(b"".join([digest(k) for k in encoded_keys]), dtype=">u8")
        his = halves[0::2].tolist()
        table_get = self._rows.get
        rows = np.array([table_get(h, -1) for h in his], dtype=np.int64)
        hit = rows >= 0
        bad = hit & (self.cols["check"][np.where(hit, rows, 0)] != halves[1::2])
        rows[bad] = -1
        if self._overflow:
            for i in np.flatnonzero(rows < 0):
                rows[i] = self._overflow.get(encoded_keys[int(i)], -1)
        return rows

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

    def insert_many(
        self,
        hi: npt.NDArray[np.uint64],
        lo: npt.NDArray[np.uint64],
        key_of: Callable[[int], bytes],
    ) -> npt.NDArray[np.int64]:
        """Bulk insert for start-up recovery from precomputed key hashes (keys
        must be absent). Sets ``check`` and FLAG_LIVE; the caller fills the other
        columns vectorised. ``key_of(i)`` gives the i-th encoded key, needed only
        when high hash halves collide (then the slow path handles the batch)."""
        n = len(hi)
        if self._next + n > self.capacity:
            # Grow by at most 1/8 beyond what is needed: recovery inserts in
            # batches, and doubling would leave up to half the columns unused.
            need = self._next + n
            self._grow(max(need, min(self.capacity * 2, need * 9 // 8)))
        first = self._next
        his = hi.tolist()
        if len(np.unique(hi)) == n and self._rows.keys().isdisjoint(his):
            self._rows.update(zip(his, range(first, first + n), strict=True))
        else:
            for i, h in enumerate(his):
                if h in self._rows:
                    self._overflow[key_of(i)] = first + i
                else:
                    self._rows[h] = first + i
        self._next += n
        self.cols["check"][first : first + n] = lo
        self.cols["flags"][first : first + n] = FLAG_LIVE
        return np.arange(first, first + n, dtype=np.int64)

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
