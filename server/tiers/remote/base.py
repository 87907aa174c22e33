"""The small interface a remote store backend implements.

A backend maps names to byte values in some store shared by several daemons
(Redis Cluster, Mooncake Store). It knows nothing about tiermem objects: the
``RemoteTier`` engine adds names, headers, checksums, deadlines, retries and
the circuit breaker on top. Every method is a batch (remote stores pay a round
trip per call); ``get``/``exists`` of one name have default implementations.

Outcomes:

* a name that is not in the store is a *value* (``None`` / ``False``): remote
  stores evict by themselves, so absence is expected;
* a value the store refuses to take (full, too large) is ``False`` in
  ``put_many``'s result;
* anything that says the store cannot be reached or answered wrongly raises
  ``RemoteError`` (counted by the circuit breaker).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Final, Protocol


class RemoteError(Exception):
    """The remote store could not be reached or did not answer as expected."""


class Landed:
    """What ``get_many_into`` answers for a value whose bytes after its head
    landed in the buffer the lander gave for it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "LANDED"


#: The one ``Landed`` value.
LANDED: Final = Landed()


class Lander(Protocol):
    """Where the values of a ``get_many_into`` land (past their head).

    A backend that reads a value's first bytes before the rest (a stream)
    reads ``head_bytes`` of it, asks ``head_length`` how long its whole head
    is (-1: read the value the ordinary way), reads the rest of the head and
    asks ``target`` for a buffer of exactly the value's remaining bytes, which
    it then fills (None: read the value the ordinary way).

    A backend that must say where every byte goes before it reads any, and
    knows each value's length, asks ``target_whole`` for (head length, buffer
    of the whole value), reads the value into that buffer in one transfer,
    then tells ``head_read`` with the buffer's first head-length bytes: False
    means the value is not laid out that way (answer the buffer's bytes as the
    value). One destination per value: Mooncake's TCP transport moves each
    destination slice as a transfer of its own, and 16 values of 1 MiB read
    in 9.4 ms into one slice each against 12 ms into two (head, payload)."""

    head_bytes: int

    def head_length(self, index: int, fixed: memoryview, value_len: int) -> int: ...

    def target(self, index: int, head: memoryview, value_len: int) -> memoryview | None: ...

    def target_whole(self, index: int, value_len: int) -> tuple[int, memoryview] | None: ...

    def head_read(self, index: int, head: memoryview, value_len: int) -> bool: ...


class RemoteBackend(ABC):
    #: backend name as in the config (``tiers.remote.backend``)
    name: str = ""
    #: A client of this backend can go stale when the store restarts (it keeps
    #: what it learnt about the old store): the engine connects afresh after
    #: its breaker trips rather than keep using it.
    reconnect_after_trip: bool = False

    @property
    @abstractmethod
    def address(self) -> str:
        """Where the store is, for stats and logs."""

    @abstractmethod
    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        """Store each value under its name, replacing what was there. False where
        the store refused the value."""

    @abstractmethod
    def get_many(self, names: Sequence[str]) -> list[tuple[memoryview, object] | None]:
        """Each value as a view plus an owner object to keep alive while the view
        is used (``None`` where the name is not in the store)."""

    def get_many_into(
        self, names: Sequence[str], lander: Lander
    ) -> list[tuple[memoryview, object] | Landed | None]:
        """``get_many``, except that values may land past their head in buffers
        ``lander`` gives (``LANDED`` where one did). By default none does."""
        return list(self.get_many(names))

    @abstractmethod
    def exists_many(self, names: Sequence[str]) -> list[bool]:
        """Whether each name is in the store."""

    @abstractmethod
    def delete_many(self, names: Sequence[str]) -> None:
        """Remove the names (absent ones are ignored)."""

    @abstractmethod
    def ping(self) -> None:
        """One cheap round trip; raises RemoteError when the store is unreachable."""

    @abstractmethod
    def close(self) -> None: ...

    def release(self, owner: object) -> None:
        """Give back the buffer behind a value returned by ``get_many``."""
        return None

    def get(self, name: str) -> tuple[memoryview, object] | None:
        return self.get_many([name])[0]

    def exists(self, name: str) -> bool:
        return self.exists_many([name])[0]
