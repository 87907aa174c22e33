"""Leases: nothing leased is freed or reused under its holder.

Two layers:

* ``Leases`` — reference counts on in-memory copies. Readers ``acquire`` the
  (tier, location) they read from; ``free`` of a leased location is deferred
  until the last ``release``, and ``is_leased`` keeps ``make_room`` from
  picking the row. Used by gRPC reads (for the duration of a streamed
  response), by migrations (for the duration of a copy) and, through the
  table below, by the data plane.
* ``LeaseTable`` — leases handed to *clients* (shared-memory data plane): an
  id, an owner, a kind (read or write), the arena region and an expiry. A
  lease holds whatever keeps its region in place (a read lease: a reference
  above; a write lease: an uncommitted reservation) and gives it back through
  its ``end`` callback exactly once: on release, on commit, or when the
  background worker reaps it after its TTL. Each lease's ``end`` runs in
  isolation (``LeaseTable.end_each``): one that raises is logged and the
  lease is still ended, and the others of the same pass are still ended.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from tiermem.server.errors import (
    CapacityExceeded,
    FailedPrecondition,
    InvariantViolation,
    NotFound,
    PermissionDenied,
)
from tiermem.server.model import Tier

log = logging.getLogger(__name__)

Freer = Callable[[Tier, int, int], None]


class Leases:
    def __init__(self, freer: Freer) -> None:
        self._free = freer
        self._lock = threading.Lock()
        self._refs: dict[tuple[Tier, int], int] = {}
        self._deferred: dict[tuple[Tier, int], int] = {}

    def acquire(self, tier: Tier, location: int) -> None:
        with self._lock:
            key = (tier, location)
            if key in self._deferred:
                raise InvariantViolation(f"lease on a freed location {key}")
            self._refs[key] = self._refs.get(key, 0) + 1

    def try_acquire(self, tier: Tier, location: int) -> bool:
        """``acquire``, or False (nothing taken) when the location was freed while
        leased: a reader that found it without the store lock then looks again
        under the lock."""
        with self._lock:
            key = (tier, location)
            if key in self._deferred:
                return False
            self._refs[key] = self._refs.get(key, 0) + 1
            return True

    def release(self, tier: Tier, location: int) -> None:
        key = (tier, location)
        with self._lock:
            n = self._refs.get(key, 0)
            if n <= 0:
                raise InvariantViolation(f"release of an unleased location {key}")
            if n > 1:
                self._refs[key] = n - 1
                return
            del self._refs[key]
            size = self._deferred.pop(key, None)
        if size is not None:
            self._free(tier, location, size)

    def is_leased(self, tier: Tier, location: int) -> bool:
        return (tier, location) in self._refs

    def leased_locations(self, tier: Tier) -> list[int]:
        """Locations of ``tier`` leased now (few: one per reader or copy in flight)."""
        with self._lock:
            return [loc for t, loc in self._refs if t == tier]

    def free(self, tier: Tier, location: int, size: int) -> None:
        """Free now, or when the last lease on the location is released."""
        key = (tier, location)
        with self._lock:
            if key in self._refs:
                self._deferred[key] = size
                return
        self._free(tier, location, size)

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._refs)


#: What a lease is granted on: (offset, length, end callback, payload).
Region = tuple[int, int, Callable[[], None], object]


class LeaseKind(Enum):
    READ = "read"
    WRITE = "write"


@dataclass(slots=True, eq=False)
class Lease:
    """A client's lease on ``[offset, offset + length)`` of the arena.

    ``end`` gives back what holds the region (releases the read reference,
    or aborts the uncommitted reservation); the table calls it at most once,
    except for a write lease taken for commit, whose reservation the commit
    consumes instead. ``payload`` is the owner service's own state (for a
    write lease: the announced put)."""

    lease_id: int
    owner: str
    kind: LeaseKind
    offset: int
    length: int
    expires_at: float
    end: Callable[[], None]
    payload: object = None


class LeaseTable:
    """Client leases by id, with owners and expiry.

    Error contract (what a client sees): an id never issued is NOT_FOUND; an
    id already released, committed or expired is FAILED_PRECONDITION saying
    which (the last ``remembered`` ended ids are kept for that); another
    owner's lease is PERMISSION_DENIED; committing a read lease is
    FAILED_PRECONDITION. Batch operations check every id before changing
    anything, so a rejected batch ends no lease."""

    def __init__(
        self,
        max_leases: int,
        clock: Callable[[], float] = time.monotonic,
        remembered: int = 8192,
        observe: Callable[[Lease, str], None] | None = None,
    ) -> None:
        """``observe(lease, how)`` is called once per ended lease (for metrics)."""
        self._max = max_leases
        self._observe = observe
        self._clock = clock
        self._remembered = remembered
        self._lock = threading.Lock()
        self._leases: dict[int, Lease] = {}
        self._ended: OrderedDict[int, str] = OrderedDict()
        self.expired_total = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._leases)

    def count(self, kind: LeaseKind) -> int:
        with self._lock:
            return sum(1 for lease in self._leases.values() if lease.kind is kind)

    def grant_many(
        self,
        owner: str,
        kind: LeaseKind,
        ttl_s: float,
        regions: Sequence[Region],
    ) -> list[Lease]:
        """Grant one lease per ``(offset, length, end, payload)``; all or none
        (RESOURCE_EXHAUSTED when the table would exceed ``max_leases``; the
        caller then still owns the regions and must give them back)."""
        if not regions:  # e.g. a Lease whose values all came inline: no lock to take
            return []
        expires_at = self._clock() + ttl_s
        with self._lock:
            if len(self._leases) + len(regions) > self._max:
                raise CapacityExceeded(
                    f"{len(self._leases)} leases are outstanding and {len(regions)} more would "
                    f"exceed dataplane.max_leases={self._max}; release leases and retry"
                )
            out = []
            for offset, length, end, payload in regions:
                lease_id = secrets.randbits(64) or 1
                while lease_id in self._leases or lease_id in self._ended:
                    lease_id = secrets.randbits(64) or 1
                lease = Lease(lease_id, owner, kind, offset, length, expires_at, end, payload)
                self._leases[lease_id] = lease
                out.append(lease)
        return out

    def take_many(
        self, lease_ids: Sequence[int], owner: str, kind: LeaseKind | None
    ) -> list[Lease]:
        """Remove and return the leases (to end or commit them); all or none.

        ``kind`` None accepts either kind. Expired leases found here are ended
        and reported as expired (FAILED_PRECONDITION)."""
        expired: list[Lease] = []
        try:
            with self._lock:
                now = self._clock()
                seen: set[int] = set()
                for lease_id in lease_ids:
                    if lease_id in seen:
                        raise FailedPrecondition(
                            f"lease {lease_id:#x} appears twice in the request"
                        )
                    seen.add(lease_id)
                    lease = self._leases.get(lease_id)
                    if lease is None:
                        raise self._unknown(lease_id)
                    if lease.owner != owner:
                        raise PermissionDenied(
                            f"lease {lease_id:#x} belongs to another client (owner mismatch)"
                        )
                    if lease.expires_at <= now:
                        expired.append(self._leases.pop(lease_id))
                        self._remember(lease_id, "expired")
                        raise FailedPrecondition(
                            f"lease {lease_id:#x} expired; its region was reclaimed"
                            + ("" if lease.kind is LeaseKind.READ else " and nothing was stored")
                        )
                    if kind is not None and lease.kind is not kind:
                        raise FailedPrecondition(
                            f"lease {lease_id:#x} is a {lease.kind.value} lease; "
                            f"this call needs a {kind.value} lease"
                            + (" (from Reserve)" if kind is LeaseKind.WRITE else "")
                        )
                taken = [self._leases.pop(lease_id) for lease_id in lease_ids]
        finally:
            self.end_each(expired)  # (an ``end`` that raises never hides the answer)
            for lease in expired:
                self._note(lease, "expired")
        return taken

    def finish(self, leases: Sequence[Lease], how: str) -> None:
        """Remember taken leases as ended (``how``: released, committed, aborted)."""
        with self._lock:
            for lease in leases:
                self._remember(lease.lease_id, how)
        for lease in leases:
            self._note(lease, how)

    def release_many(self, lease_ids: Sequence[int], owner: str) -> int:
        """End leases of either kind (read: released; write: aborted)."""
        leases = self.take_many(lease_ids, owner, None)
        self.end_each(leases)
        self.finish([lease for lease in leases if lease.kind is LeaseKind.READ], "released")
        self.finish([lease for lease in leases if lease.kind is LeaseKind.WRITE], "aborted")
        return len(leases)

    def reap_expired(self) -> int:
        """End every expired lease (the background worker calls this)."""
        with self._lock:
            now = self._clock()
            gone = [lease for lease in self._leases.values() if lease.expires_at <= now]
            for lease in gone:
                del self._leases[lease.lease_id]
                self._remember(lease.lease_id, "expired")
        self.end_each(gone)
        for lease in gone:
            self._note(lease, "expired")
        return len(gone)

    def end_all(self) -> None:
        """End every lease (shutdown)."""
        with self._lock:
            gone = list(self._leases.values())
            self._leases.clear()
        self.end_each(gone)

    @staticmethod
    def end_each(leases: Iterable[Lease]) -> None:
        """Call each lease's ``end`` (leases already out of the table), each in
        isolation: one that raises is logged and the rest still end, so one
        broken callback cannot keep the regions of the others held forever
        (nothing would end them later). What the failed one held may stay held;
        the lease itself is ended either way."""
        for lease in leases:
            try:
                lease.end()
            except Exception:
                log.exception(
                    "ending %s lease %#x (arena [%d, +%d)) failed; "
                    "what held its region may stay held",
                    lease.kind.value,
                    lease.lease_id,
                    lease.offset,
                    lease.length,
                )

    def _note(self, lease: Lease, how: str) -> None:
        if how == "expired":
            with self._lock:
                self.expired_total += 1
        if self._observe is not None:
            self._observe(lease, how)

    def _unknown(self, lease_id: int) -> Exception:
        how = self._ended.get(lease_id)
        if how is None:
            return NotFound(
                f"lease {lease_id:#x} is unknown: never issued by this daemon, or ended long ago"
            )
        return FailedPrecondition(f"lease {lease_id:#x} was already {how}")

    def _remember(self, lease_id: int, how: str) -> None:
        self._ended[lease_id] = how
        while len(self._ended) > self._remembered:
            self._ended.popitem(last=False)
