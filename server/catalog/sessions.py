"""Interned session ids for the index's ``sess`` column (cost per session).

Session names are strings up to 256 bytes; the index keeps a 32-bit id per
object instead. Ids are reference-counted by the objects that carry them and
recycled when the last one goes, so the table is bounded by the sessions that
own live objects. In memory only: recovery rebuilds it from the records.

Not thread-safe: the catalog's owner serialises access.
"""

from __future__ import annotations

from tiermem.server.errors import CapacityExceeded, InvariantViolation

MAX_SESSIONS = (1 << 32) - 2


class SessionIds:
    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._refs: dict[int, int] = {}
        self._free: list[int] = []
        self._next = 1

    def __len__(self) -> int:
        return len(self._ids)

    def acquire(self, name: str) -> int:
        """Id of ``name`` (0 for no session), counting one more object that uses it."""
        if not name:
            return 0
        sid = self._ids.get(name)
        if sid is None:
            if self._free:
                sid = self._free.pop()
            else:
                if self._next > MAX_SESSIONS:
                    raise CapacityExceeded(f"more than {MAX_SESSIONS} sessions own objects")
                sid = self._next
                self._next += 1
            self._ids[name] = sid
            self._names[sid] = name
            self._refs[sid] = 0
        self._refs[sid] += 1
        return sid

    def release(self, sid: int) -> None:
        """One object fewer uses ``sid`` (0 is ignored)."""
        if sid == 0:
            return
        refs = self._refs.get(sid)
        if refs is None:
            raise InvariantViolation(f"release of unknown session id {sid}")
        if refs > 1:
            self._refs[sid] = refs - 1
            return
        name = self._names.pop(sid)
        del self._refs[sid], self._ids[name]
        self._free.append(sid)

    def name(self, sid: int) -> str:
        """The session name of ``sid`` ("" for 0, no session)."""
        if sid == 0:
            return ""
        name = self._names.get(sid)
        if name is None:
            raise InvariantViolation(f"name of unknown session id {sid}")
        return name

    def names(self) -> dict[int, str]:
        return dict(self._names)
