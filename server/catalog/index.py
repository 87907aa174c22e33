"""Compact in-memory index of every object, for the hot path and the planner.

A million objects is normal, so there is no Python object per entry beyond one
dict slot: ``dict[id64, row]`` maps the high 64 bits of the key's 128-bit hash to
a row of fixed-width numpy columns. The low 64 bits are kept in ``check`` and
compared on lookup; two keys whose high halves collide go to a small overflow
map keyed by the encoded key. Measured cost is about 190 bytes per object.

Column layout (one row per object)::

    check u64 | tier u8 | kind u8 | flags u8 | ns u16 | size i64 | loc i64 |
    seg i32 | seg_off i64 | checksum u64 | atime f64 | rate f32 | expires u64 | sess u32 |
    version u32

``flags`` holds FLAG_LIVE / FLAG_DURABLE / FLAG_PINNED / FLAG_SEEN, the
access hint (bits 4-5) and FLAG_REMOTE (bit 6: a copy is in the remote store);
``atime`` / ``rate`` are the access model's last access
and decayed rate (``tiermem.placement.access``); ``sess`` an interned session id
(``catalog.sessions``; 0 = none) for cost per session; ``version`` the
object's version (0 = not known here: rows rebuilt at recovery, which reads
only record headers; the record then says), so a put that replaces an object
need not read its record to number the new one.

``loc`` is the tier engine's location of the serving copy (DRAM/HBM), ``seg`` /
``seg_off`` the SSD copy (``SEG_INLINE`` = inline in RocksDB, ``SEG_NONE`` = no
SSD copy). Vectorised queries (LRU candidates, expired rows, rows in a segment)
run over the columns without touching Python objects.

Not thread-safe: the owner (the catalog) serialises access.
"""

from __future__ import annotations

import functools
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
    "kv_chain_halves",
    "kv_chunk_split",
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
    "version": np.uint32,
}

#: Largest version the ``version`` column holds; a later one is stored as 0
#: (unknown), so its record is read instead.
VERSION_COLUMN_MAX = (1 << 32) - 1


#: Kind byte of KV blocks (``Kind.KV_BLOCK``; not imported to keep this module
#: free of the object model).
_KV_KIND = 1
_LOWER_HEX = b"0123456789abcdef"
_FMIX_1 = 0xFF51AFD7ED558CCD
_FMIX_2 = 0xC4CEB9FE1A85EC53
_U64_33, _U64_32 = np.uint64(33), np.uint64(32)
_U64_FMIX_1, _U64_FMIX_2 = np.uint64(_FMIX_1), np.uint64(_FMIX_2)


def _fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser (a bijection that mixes every bit)."""
    x ^= x >> 33
    x = (x * _FMIX_1) & _MASK64
    x ^= x >> 33
    x = (x * _FMIX_2) & _MASK64
    return x ^ (x >> 33)


def _fmix64_array(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """``_fmix64`` over an array, in place (uint64 arithmetic wraps like the
    masked ints)."""
    s = _U64_33
    x ^= x >> s
    np.multiply(x, _U64_FMIX_1, out=x)
    x ^= x >> s
    np.multiply(x, _U64_FMIX_2, out=x)
    x ^= x >> s
    return x


def kv_chunk_split(encoded_key: bytes) -> tuple[bytes, int] | None:
    """(key prefix, chunk hash) of a canonical KV block key, else None.

    Canonical means kind KV_BLOCK and a key ending in ``@`` and 16 lowercase
    hex digits (a 64-bit chunk hash, as LMCache's), which is how the KV service
    names blocks (``tiermem.kv_keys``). Such keys are hashed from the prefix's
    hash and the chunk hash (``kv_chain_halves``), so the index probe of a
    1,000-chunk chain is vectorised instead of building and hashing 1,000 keys.
    """
    if encoded_key[-17:-16] != b"@" or encoded_key[-16:].translate(None, _LOWER_HEX):
        return None
    nul = encoded_key.find(b"\x00")
    if nul < 0 or nul + 1 >= len(encoded_key) - 16 or encoded_key[nul + 1] != _KV_KIND:
        return None
    return encoded_key[:-16], int(encoded_key[-16:], 16)


def kv_chain_halves(
    prefix: bytes, chunks: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """(high, low) halves of the keys ``prefix + hex(chunk)`` for many chunks:
    the same values ``key_hash`` gives each canonical KV key. Both halves mix
    the chunk with an independent half of the prefix's xxh3-128 hash: within a
    scope neither half collides (the mix is a bijection), across scopes a full
    collision needs two 64-bit coincidences."""
    p = xxhash.xxh3_128_intdigest(prefix)
    c = chunks.astype(np.uint64, copy=False)
    hi = _fmix64_array(c ^ np.uint64(p >> 64))
    lo = c << _U64_32
    lo |= c >> _U64_32
    lo ^= np.uint64(p & _MASK64)
    return hi, _fmix64_array(lo)


def _key_hash(encoded_key: bytes) -> tuple[int, int]:
    """(high, low) 64-bit halves of the key's hash: xxh3-128 of the key, or for
    a canonical KV block key the chunk mixed with its prefix's hash
    (``kv_chain_halves``)."""
    split = kv_chunk_split(encoded_key)
    if split is None:
        h = xxhash.xxh3_128_intdigest(encoded_key)
        return h >> 64, h & _MASK64
    prefix, chunk = split
    p = xxhash.xxh3_128_intdigest(prefix)
    rotated = ((chunk << 32) | (chunk >> 32)) & _MASK64
    return _fmix64(chunk ^ (p >> 64)), _fmix64(rotated ^ (p & _MASK64))


#: ``_key_hash``, remembered for the keys of recent requests. One request
#: hashes the same key again and again (its find, the replace check, the
#: insert, its record, the access count): adopting a remote KV block hashed
#: its key 10 times. A canonical KV key costs about 4 us to hash (the split,
#: the prefix's xxh3-128, two mixes), a hit here about 0.15 us. Bounded: at
#: most KEY_HASH_CACHE keys (about 300 bytes each) are kept.
KEY_HASH_CACHE = 4096
key_hash = functools.lru_cache(maxsize=KEY_HASH_CACHE)(_key_hash)


def key_digest(encoded_key: bytes) -> bytes:
    """``key_hash`` as 16 bytes, high half then low half, big-endian."""
    if encoded_key[-17:-16] != b"@":  # cannot be a canonical KV key: one C call
        return _xxh3_128_digest(encoded_key)
    hi, lo = key_hash(encoded_key)
    return ((hi << 64) | lo).to_bytes(16, "big")


_xxh3_128_digest = xxhash.xxh3_128_digest


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
        return self._rows_of(halves[0::2], halves[1::2], encoded_keys)

    def find_kv_chain(
        self, prefix: bytes, chunks: npt.NDArray[np.uint64], encoded_keys: Sequence[bytes]
    ) -> npt.NDArray[np.int64]:
        """``find_many`` of the canonical KV keys ``prefix + hex(chunk)``
        (``encoded_keys`` lists them; it is read only on a high-half collision)
        with the hashes computed vectorised."""
        if not len(chunks):
            return np.zeros(0, dtype=np.int64)
        hi, lo = kv_chain_halves(prefix, chunks)
        return self._rows_of(hi, lo, encoded_keys)

    def _rows_of(
        self,
        hi: npt.NDArray[np.uint64],
        lo: npt.NDArray[np.uint64],
        encoded_keys: Sequence[bytes],
    ) -> npt.NDArray[np.int64]:
        table_get = self._rows.get
        rows = np.array([table_get(h, -1) for h in hi.tolist()], dtype=np.int64)
        hit = rows >= 0
        bad = hit & (self.cols["check"][np.where(hit, rows, 0)] != lo)
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
