"""The journal of remote deletes: objects whose copy in the remote store must be
deleted, kept in the catalog (RocksDB column family ``remote_deletes``).

A remote delete is carried out in the background (``services/remote.py``), so
a crash can come between the local change that makes it necessary (a delete,
an overwrite, a demotion of an object nobody else will adopt) and the delete
itself. The journal keeps the key until the delete is confirmed by the store
(or found unnecessary), and a restarted daemon carries out every delete it
lists.

An object has two names in the store (``codec``): its shared name and this
daemon's private name (a session's value). Each entry maps an encoded object
key to the names still to delete, one byte of ``SHARED | PRIVATE`` bits::

    key (encoded ObjectKey) -> b""       the shared name (the first format)
                               b"\\x01"   the shared name
                               b"\\x02"   the private name
                               b"\\x03"   both

The remote name is derived from the key (and, for the private one, the
daemon's id, kept in the catalog: the same after a restart) when the delete
runs. Adding a name a key already has changes nothing; removing one keeps the
others.

A write reads the marks of all its keys in one multi-get and changes them in
one batch. Writes are unsynced: they go to the WAL after the catalog write that
made them necessary and before the WAL sync of any durable change made after
it, so they survive a process crash, and power loss whenever that change's own
sync does.
A removal lost to power loss only repeats a delete at the next start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiermem.server.storage.rocks import RocksStore

#: The column family (declared in ``storage/rocks.py``).
COLUMN_FAMILY = "remote_deletes"
#: The key's shared name is to be deleted.
SHARED = 0x01
#: This daemon's private name of the key is to be deleted.
PRIVATE = 0x02


def bit(private: bool) -> int:
    """The mark of one name: ``PRIVATE`` or ``SHARED``."""
    return PRIVATE if private else SHARED


def names(marks: int) -> list[bool]:
    """The names ``marks`` stands for, as private flags (False: the shared one)."""
    return [private for private in (False, True) if marks & bit(private)]


def _marks(value: bytes | None) -> int:
    if value is None:
        return 0
    if not value:
        return SHARED  # written before private names
    return value[0] & (SHARED | PRIVATE)


class DeleteJournal:
    def __init__(self, rocks: RocksStore) -> None:
        self._rocks = rocks
        #: orders the read-modify-write of the marks of a key
        self._lock = threading.Lock()

    def add(self, keys: Iterable[bytes], *, private: bool = False) -> None:
        """Record that the remote copies of ``keys`` under their shared names
        (or with ``private`` this daemon's private names) must be deleted (one
        write). Raises what ``RocksStore.write`` raises (CapacityExceeded,
        Unavailable)."""
        self._write(keys, bit(private), remove=False)

    def remove(self, keys: Iterable[bytes], *, private: bool = False) -> None:
        """Forget the shared (or ``private``) names of ``keys``: their remote
        deletes were carried out (one write); a key's other name stays."""
        self._write(keys, bit(private), remove=True)

    def entries(self, limit: int, after: bytes = b"") -> list[tuple[bytes, int]]:
        """Up to ``limit`` journaled keys after ``after`` (b"": from the first),
        in key order, each with its marks (``names``)."""
        out: list[tuple[bytes, int]] = []
        for key, value in self._rocks.scan(COLUMN_FAMILY, start=after or None):
            if key == after:
                continue
            if len(out) >= limit:
                break
            marks = _marks(value)
            if marks:
                out.append((key, marks))
        return out

    def marks(self, key: bytes) -> int:
        """The names journaled for ``key`` (0: none)."""
        return _marks(self._rocks.get(COLUMN_FAMILY, key))

    def marks_many(self, keys: list[bytes]) -> list[int]:
        """``marks`` of each of ``keys``, read in one multi-get (a write of tens
        of thousands of keys runs under the store lock). Raises what
        ``RocksStore.get`` raises (Corrupted)."""
        if not keys:
            return []
        wanted: list[str | int | float | bytes | bool] = list(keys)
        try:
            values = self._rocks.cf(COLUMN_FAMILY).get(wanted)
        except Exception:
            values = None
        if not isinstance(values, list) or len(values) != len(keys):
            # read key by key: raises what a read of the damaged one raises
            return [self.marks(key) for key in keys]
        return [_marks(None if v is None else bytes(v)) for v in values]

    def _write(self, keys: Iterable[bytes], mark: int, *, remove: bool) -> None:
        unique = list(dict.fromkeys(keys))
        if not unique:
            return
        with self._lock:
            batch = self._rocks.batch()
            changed = False
            for key, old in zip(unique, self.marks_many(unique), strict=True):
                new = old & ~mark if remove else old | mark
                if new == old:
                    continue
                changed = True
                if new:
                    batch.put(COLUMN_FAMILY, key, bytes([new]))
                else:
                    batch.delete(COLUMN_FAMILY, key)
            if changed:
                batch.commit(sync=False)
