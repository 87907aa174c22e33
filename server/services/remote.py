"""The remote tier in the daemon: publishing, sharing and clean-up.

The engine (``tiers/remote``) moves bytes; this service decides what moves:

* **publish** (``tiers.remote.share``) — every committed put of a shared kind
  (``tiers.remote.kinds``, KV blocks by default) that no session owns (the
  store keeps no owner: other daemons would adopt a session's object as
  unowned; a plain owner tag, an id this daemon never opened, is no session)
  is queued and copied to the remote store by one background
  thread, in batches (write-behind: puts never wait for the remote store). A
  published object carries ``FLAG_REMOTE``, so demoting it later copies
  nothing. The queue is bounded (``publish_queue_bytes``); a put that finds
  it full is deferred (its key remembered, up to ``MAX_DEFERRED_PUBLISHES``)
  and queued as soon as the writer has made room, so a burst of puts is
  published late, not lost. Beyond
  that bound, and after ``PUBLISH_ATTEMPTS`` failed uploads, publishes are
  skipped and counted, and the key's remote copy is deleted (queued after any
  publish on its way): an older version left there would be adopted by other
  daemons, and by this one once the new version is evicted (with ``share``
  off, an overwrite deletes the copy a demotion left there, for that reason);
* **delete** — objects removed on purpose (delete, TTL, session close) have
  their remote copies deleted by the same thread, in order with the publishes
  (an eviction keeps the remote copy: other daemons may still use it). A
  delete removes an older version, never the one the catalog says the store
  holds: a demotion uploads directly (not through this queue), so when the
  delete runs it is dropped for a key whose current version has a remote
  copy; a demotion ``claim``s its key from its upload to its catalog switch,
  and the writer carries out no publish or delete of a claimed key
  meanwhile (nor does a demotion upload a key the writer is working on). A
  publish that finds its object gone (evicted before its turn) deletes the
  older version instead, and reads treat such a key as a miss until then.
  Deletes survive a crash: each is journaled in the catalog
  (``tiers/remote/journal.py``) right after the local change that needs it,
  as are the old version of an overwrite until the new one is published over
  it and every demotion's upload (the object's record is volatile: a restart
  purges it); a restarted daemon queues the journal before it serves. Deletes
  beyond ``MAX_PENDING_DELETES`` stay in the journal only and are queued from
  it as the queue drains (``_replay``), reads treating a key whose shared name
  the journal lists as a miss meanwhile (``_journal_only``). A delete
  that fails (the store down, or its deadline passed: the store may still
  carry it out later) fences its key: nothing is uploaded under it and reads
  treat it as a miss until a later delete, started once the failed call
  ended, is confirmed (tried again after ``DELETE_RETRY_PAUSE_S``, doubled
  after each further failure up to ``DELETE_RETRY_MAX_PAUSE_S``, and sooner
  once the store confirms a delete or takes a publish). Beyond
  ``MAX_FENCED_NAMES`` fenced names, a failed name stays in the journal only:
  reads consult it, a demotion under a name it lists is not done meanwhile,
  and passes over the journal try it again;
* **lookup** — a chain's chunks missing locally (and those served from the
  remote tier, which the store may have evicted) are checked with batched
  existence calls (``extend_prefix``);
* **pull** — reads of such chunks fetch them in one batch, verify every payload
  against its checksum, and then either promote them (objects this daemon
  demoted) or *adopt* them: an object another daemon wrote becomes a local
  object with a catalog entry, placed by admission like any put;
* **stage** — a shared-memory read of objects this daemon does not hold has
  them fetched straight into extents the client is leased (Redis: each
  payload is received from the socket into its extent; Mooncake: transferred
  into it) and verified there (no catalog work before the reply); each extent
  becomes the adopted object's storage when its lease ends
  (``adopt_filled``), off the reply's critical path.

Values the remote store no longer has are misses: their stale catalog entries
are removed (``Store.forget_stale``), never reported as errors.

**Private copies.** A session's object is never published; demoted to the
remote tier, it is written under this daemon's private name (``codec``), which
no other daemon reads or asks for, and which never replaces the shared value
of the key. This daemon reads, promotes and deletes it under that name: which
name holds an object's remote copy is remembered per key
(``_private_copies``, in memory: sessions' objects are purged at restart), as
the catalog keeps no owner of a removed version, and a delete queued for one
(``_Op.private``) removes that name only. The journal of deletes records
names, not keys: a demotion's private upload is journaled under the private
name (``claim``), so the restart that purges the session's object deletes its
copy, and a key can be journaled under both names at once. A failed delete
fences its name only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tiermem.server.catalog.catalog import Entry
from tiermem.server.config import RemoteTierConfig
from tiermem.server.errors import (
    AlreadyExists,
    CapacityExceeded,
    Corrupted,
    InvariantViolation,
    TiermemError,
    Unavailable,
)
from tiermem.server.model import Durability, Kind, ObjectKey, ObjectMeta, Tier
from tiermem.server.services.guard import Role
from tiermem.server.services.objects import FilledPut, ObjectService, PutSpec
from tiermem.server.services.placement import PlacementService
from tiermem.server.services.store import Store, ValueRead
from tiermem.server.storage.rocks import RocksStore
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.remote import RemoteTier, RemoteValue
from tiermem.server.tiers.remote.codec import new_daemon_id, valid_daemon_id
from tiermem.server.tiers.remote.codec import private as private_value
from tiermem.server.tiers.remote.engine import LandedValue, ReadValue, release_all
from tiermem.server.tiers.remote.journal import DeleteJournal, bit, names

log = logging.getLogger(__name__)

#: Most keys waiting in memory for a remote delete; more stay in the journal only
#: (the writer queues them from there as the queue drains: ``_replay``).
MAX_PENDING_DELETES = 100_000
#: Most keys whose publish waits for room in the full queue; more are skipped.
MAX_DEFERRED_PUBLISHES = 65_536
#: Tries of a publish whose upload failed (store slow or down) before it is given up.
PUBLISH_ATTEMPTS = 3
#: Pause of the writer after a failed upload before it tries again (seconds).
PUBLISH_RETRY_PAUSE_S = 0.25
#: Pause after a failed remote delete before it is tried again (seconds); doubled
#: after each further failure, up to ``DELETE_RETRY_MAX_PAUSE_S``, and back to it
#: once the store confirms a delete or takes a publish.
DELETE_RETRY_PAUSE_S = 0.5
#: Longest pause between tries of failed remote deletes (seconds).
DELETE_RETRY_MAX_PAUSE_S = 8.0
#: Most names fenced in memory after failed deletes (``_fenced``, ``_parked``);
#: more stay in the journal only: reads consult it, and passes over it try them
#: again.
MAX_FENCED_NAMES = 65_536
#: Key (column family "meta") of this daemon's id, which scopes its private names.
DAEMON_ID_KEY = b"remote.daemon_id"


def daemon_id(rocks: RocksStore) -> str:
    """This daemon's id in the remote store (``codec``: it scopes the names of
    its sessions' private values): made once, at random, and kept in its own
    catalog (synced before it is used), so it is the same after a restart and
    differs between daemons, one per data directory. A copy of a data
    directory started as a second daemon would share it. Raises Corrupted
    when the stored id is damaged."""
    raw = rocks.get("meta", DAEMON_ID_KEY)
    if raw is not None:
        stored = raw.decode("ascii", errors="replace")
        if not valid_daemon_id(stored):
            raise Corrupted(f"the daemon id in the catalog ({raw!r}) is damaged")
        return stored
    made = new_daemon_id()
    batch = rocks.batch()
    batch.put("meta", DAEMON_ID_KEY, made.encode("ascii"))
    batch.commit(sync=True)
    return made


#: A remote name of an object: its encoded key, and whether it is this daemon's
#: private name of it (``codec``) rather than its shared one.
_Name = tuple[bytes, bool]


class _Sessions(Protocol):
    """What ``RemoteService.private`` asks the session service."""

    def get(self, session: str) -> object | None: ...

    def was_closed(self, session: str) -> bool: ...


@dataclass(slots=True)
class _Op:
    delete: bool
    key: bytes
    size: int
    attempt: int = 0
    #: a delete of this daemon's private value of the key, not its shared one
    private: bool = False


class _Landing:
    """The extents a ``stage`` lands values in, by position in its read:
    ``place`` reserves one (called from the remote tier's threads), ``take``
    hands one that was answered to the stage (without the head a value landed
    whole left in its first bytes), ``drop`` gives one back."""

    def __init__(
        self,
        reserve: Callable[[ObjectKey, int, int], Reservation | None],
        drop: Callable[[Reservation], None],
        trim: Callable[[Reservation, int], Reservation],
    ) -> None:
        self._reserve = reserve
        self._drop = drop
        self._trim = trim
        self._lock = threading.Lock()
        #: position -> (extent, bytes of head room before the payload)
        self._held: dict[int, tuple[Reservation, int]] = {}

    def place(self, index: int, key: ObjectKey, size: int, head: int) -> memoryview | None:
        reservation = self._reserve(key, size, head)
        if reservation is None:
            return None
        with self._lock:
            self._held[index] = (reservation, head)
        return reservation.buffer

    def take(self, index: int) -> Reservation | None:
        with self._lock:
            held = self._held.pop(index, None)
        if held is None:
            return None
        reservation, head = held
        if not head:
            return reservation
        try:
            return self._trim(reservation, head)
        except BaseException:
            self._drop(reservation)
            raise

    def drop(self, index: int) -> None:
        with self._lock:
            held = self._held.pop(index, None)
        if held is not None:
            self._drop(held[0])


class RemoteService:
    def __init__(
        self,
        store: Store,
        objects: ObjectService,
        placement: PlacementService,
        config: RemoteTierConfig,
    ) -> None:
        if store.remote is None:
            raise InvariantViolation("the remote service needs the store's remote tier")
        self.store = store
        self.remote: RemoteTier = store.remote
        self.objects = objects
        self.placement = placement
        self.config = config
        self.catalog = store.catalog
        self.kinds = frozenset(Kind[name] for name in config.kinds)
        #: the session service (``private``): set by the daemon once built
        self.sessions: _Sessions | None = None
        self._ops: deque[_Op] = deque()
        #: keys with a publish waiting in ``_ops`` (a put of one of them again is
        #: carried by that publish, which reads the object when its turn comes)
        self._queued_keys: set[bytes] = set()
        self._queued_bytes = 0
        #: puts that found the queue full: key -> size, queued in order when the
        #: writer has made room (``_refill``)
        self._deferred: dict[bytes, int] = {}
        self._deletes = 0
        #: names whose remote copy must be deleted, kept until the delete is done
        #: (a restarted daemon carries them out: ``start``)
        self.journal = DeleteJournal(store.catalog.rocks)
        #: where the journal's next window starts (``_replay``; None: all queued)
        self._replay_after: bytes | None = None
        #: the journal may hold names whose delete is neither queued nor fenced
        #: (beyond ``MAX_PENDING_DELETES``, or not yet replayed since the start):
        #: reads of a key with no entry consult the journal (``_held_back``)
        #: until a pass over the journal begun after the last such name ends
        self._journal_only = False
        #: such a name was left out during the pass now running: pass again
        self._rescan = False
        #: names (key, private) whose last remote delete failed. The store may
        #: still carry it out (a call given up at its deadline runs on, and a
        #: slow store runs a command it received late), so nothing is uploaded
        #: under the name (no publish or demotion under the shared name, no
        #: demotion under the private one) and reads of the shared name treat
        #: the key as a miss until a later delete, started once each failed call
        #: on it had ended, is confirmed (``_delete``). Each maps to the end
        #: events of failed calls that may still be running.
        self._fenced: dict[_Name, list[threading.Event]] = {}
        #: fenced names whose delete is tried again at ``_retry_at`` (monotonic s)
        self._parked: dict[_Name, None] = {}
        self._retry_at = 0.0
        #: failed delete calls since the store last confirmed one or took a
        #: publish: the pause before the next try doubles with each
        self._failures = 0
        #: publishes of keys whose shared name is fenced (key -> size), queued
        #: when the fence is lifted
        self._after_fence: dict[bytes, int] = {}
        #: names (key, private) whose remote delete is queued or running, with
        #: how many: a read treats a key whose shared name is here as a miss
        #: (else it would fetch the deleted value and adopt it again); the
        #: journal keeps a name a delete is queued for again (``_settled``)
        self._deleting: dict[_Name, int] = {}
        #: keys whose last remote copy recorded in the catalog (a demotion's
        #: upload) is this daemon's private value (``codec``), not the shared
        #: one: reads and deletes of that copy use the private name. Guarded by
        #: the store lock; a key leaves it when a removal, overwrite or eviction
        #: of its version queues the private delete, or a shared copy of a later
        #: version is recorded. At most one key per catalog entry, but for keys
        #: whose entry the store's eviction removed (``Store.forget_stale``).
        self._private_copies: set[bytes] = set()
        #: keys of the publish batch being uploaded now (a delete of one of them
        #: must follow the upload: see ``_removed``)
        self._publishing: set[bytes] = set()
        #: keys of the batch (publish or delete) the writer is carrying out now:
        #: a demotion waits before uploading one of them (``claim``)
        self._writing: set[bytes] = set()
        #: keys a demotion is writing to the store now, from its upload to its
        #: catalog switch (``claim``): the writer holds back ops on them
        self._claimed: set[bytes] = set()
        self._busy = False
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        store.on_remote_removed = self._removed
        store.on_remote_unpublished = lambda keys: self._removed([], keys)
        store.remote_private = self.private_copy
        objects.on_remote_replaced = self._replaced
        objects.mover.remote_writes = self
        if config.share:
            objects.on_commit = self._committed

    @property
    def shares_kv(self) -> bool:
        """Whether KV lookups and reads consult the remote store."""
        return Kind.KV_BLOCK in self.kinds

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Queue the deletes the journal holds (left by a crash, by a delete that
        failed, or by demotions of objects the restart purged; the first
        ``MAX_PENDING_DELETES``, the rest as the queue drains), then start the
        writer. Call before serving: reads treat the keys queued as misses
        until their deletes ran."""
        with self._cond:
            self._replay_after = b""
            self._journal_only = True
        queued = self._replay()
        if queued:
            log.info("%d remote deletes left by the previous run are queued", queued)
        self._thread = threading.Thread(target=self._run, name="tiermem-remote-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.config.op_timeout_s * 2 + 5)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued publish and delete was carried out (or given up);
        True if that happened within the timeout. Failed deletes waiting for
        their next try, and the publishes they hold back, are not waited for."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._ops or self._busy or self._deferred:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    # -- queueing (hooks; called by puts and removals) ----------------------------------
    def _committed(self, meta: ObjectMeta) -> None:
        if meta.key.kind not in self.kinds or self.private(meta.session):
            # a session's object is private to it: the store keeps no owner, and
            # another daemon would adopt it as unowned (readable by anyone in the
            # namespace). An older, unowned version there is deleted by
            # ``_replaced``, or by the queued publish, which finds this version
            # private when its turn comes (``_publish``). An owner tag is
            # published like an unowned put (see ``private``).
            return
        size = meta.size_bytes
        key = meta.key.encode()
        m = self.store.metrics
        with self._cond:
            if key in self._queued_keys or key in self._deferred:
                return  # the waiting publish will upload this version
            if not self.remote.fits(size):
                m.remote_published.labels("skipped").inc()
                self._queue_deletes([key])  # an older version may be there
                return
            if self._deferred or self._queued_bytes + size > int(self.config.publish_queue_bytes):
                # the queue is full: publish it once the writer has made room
                # (in order, after the puts deferred before it)
                if len(self._deferred) < MAX_DEFERRED_PUBLISHES:
                    self._deferred[key] = size
                else:
                    m.remote_published.labels("skipped").inc()
                    self._queue_deletes([key])
                return
            self._queue_publish(_Op(False, key, size))
            self._cond.notify()

    def _queue_publish(self, op: _Op) -> None:
        """Append a publish to the queue (call with _cond)."""
        self._ops.append(op)
        self._queued_keys.add(op.key)
        self._queued_bytes += op.size
        self.store.metrics.remote_publish_queue_bytes.set(self._queued_bytes)

    def _refill(self) -> None:
        """Queue deferred publishes while the queue has room; an empty queue takes
        at least one, whatever its size (call with _cond)."""
        limit = int(self.config.publish_queue_bytes)
        while self._deferred:
            key, size = next(iter(self._deferred.items()))
            if self._ops and self._queued_bytes + size > limit:
                return
            del self._deferred[key]
            if key not in self._queued_keys:
                self._queue_publish(_Op(False, key, size))

    def _removed(self, keys: list[bytes], unpublished: Sequence[bytes] = ()) -> None:
        """Called under the store lock: queue the deletes (cheap, no I/O), of
        the private name for a copy that is this daemon's private value.
        ``unpublished``: removed objects without a remote copy yet; those whose
        publish is queued or uploading now get a delete too (queued after it:
        the upload would otherwise leave the deleted object in the store)."""
        private = [k for k in keys if k in self._private_copies]
        self._private_copies.difference_update(keys)
        self._private_copies.difference_update(unpublished)
        with self._cond:
            racing = [k for k in unpublished if k in self._queued_keys or k in self._publishing]
            mine = set(private)
            self._queue_deletes([*(k for k in keys if k not in mine), *racing])
            self._queue_deletes(private, private=True)

    def _replaced(self, keys: list[bytes]) -> None:
        """Called under the store lock with overwritten objects whose old version
        has a remote copy: delete it unless the new version is published over
        it (a publish that ends up skipped or given up deletes it then). Those
        published over are journaled until the publish lands (``_publish``): a
        crash before it must not leave the old version to be adopted. A copy
        that is this daemon's private value is deleted (nothing is published
        over the private name)."""
        published = self.config.share
        private = [k for k in keys if k in self._private_copies]
        self._private_copies.difference_update(private)
        mine = set(private)
        shared = [k for k in keys if k not in mine]
        doomed = [
            k
            for k in shared
            if not (published and ObjectKey.decode(k).kind in self.kinds) or self._private_key(k)
        ]
        gone = set(doomed)
        with self._cond:
            self._queue_deletes(doomed)
            self._queue_deletes(private, private=True)
            self._journal([k for k in shared if k not in gone])

    def private_copy(self, key: bytes) -> bool:
        """Whether the remote copy the catalog records for ``key`` (served from
        the remote tier, or kept after a promotion) is this daemon's private
        value (read it under the private name). A set lookup: safe without the
        store lock, for an entry found under it."""
        return key in self._private_copies

    def _record_copy(self, key: bytes, *, private: bool) -> None:
        """A remote copy of ``key``'s current version was recorded in the catalog
        (call with the store lock): remember which name holds it."""
        if private:
            self._private_copies.add(key)
        else:
            self._private_copies.discard(key)

    def _private_key(self, key: bytes) -> bool:
        """Whether ``key``'s current version belongs to a session, so it is never
        published (call with the store lock; see ``private``)."""
        entry = self.catalog.find(key)
        return entry is not None and self.private_row(entry.row)

    def private_row(self, row: int) -> bool:
        """Whether the object in index row ``row`` belongs to a session, so it is
        never published (call with the store lock; see ``private``)."""
        return self.private(self.catalog.sessions.name(int(self.catalog.index.cols["sess"][row])))

    def _owned_row(self, row: int) -> bool:
        """Whether the object in index row ``row`` has an owner, a session or a
        plain owner tag (call with the store lock): reads of it are the guard's
        to allow (``_may_read``)."""
        return int(self.catalog.index.cols["sess"][row]) != 0

    def private(self, owner: str) -> bool:
        """Whether objects ``owner`` owns are private to this daemon: never
        published, and written private when demoted to the remote tier
        (``codec.PRIVATE_OWNER``: other daemons treat them as absent). True when
        ``owner`` is a session this daemon opened (open or closing) or remembers
        as closed. Any other id is a plain owner tag (no quota, no isolation, as
        before sessions existed; ``sessions/guard.py``), whose objects are
        shared like unowned ones, as they were before sessions. The session
        service is ``sessions`` (set by the daemon once it is built; None: no
        sessions). Lock-free reads of its tables."""
        sessions = self.sessions
        if not owner or sessions is None:
            return False
        return sessions.get(owner) is not None or sessions.was_closed(owner)

    def _not_published(self, keys: Sequence[bytes]) -> None:
        """Publishes of ``keys`` were given up (the upload failed), found their
        object gone or damaged, or uploaded a version replaced meanwhile (a
        session's put took the key over during the upload): delete what the
        store holds under their names (an older version), unless a later put
        queued them again (that publish replaces it, or ends here in turn)."""
        with self._cond:
            self._queue_deletes(
                [k for k in keys if k not in self._queued_keys and k not in self._deferred]
            )

    def _queue_deletes(
        self, keys: Sequence[bytes], *, private: bool = False, journal: bool = True
    ) -> None:
        """Journal remote deletes of ``keys`` (their shared names, or with
        ``private`` this daemon's private ones) and queue them after everything
        queued so far, up to ``MAX_PENDING_DELETES`` (more stay in the journal
        only, for the next start; call with _cond). Called right after the
        catalog write that makes the deletes necessary: the journal entry follows
        it in the WAL, with the same durability (see ``DeleteJournal``). A
        journal write that fails (a full disk) is logged; the deletes are queued
        all the same. ``journal``: False for names read from the journal."""
        if not keys:
            return
        if journal:
            self._journal(keys, private=private)
        room = max(0, MAX_PENDING_DELETES - self._deletes)
        for key in keys[:room]:
            self._ops.append(_Op(True, key, 0, private=private))
            name = (key, private)
            self._deleting[name] = self._deleting.get(name, 0) + 1
        self._deletes += min(len(keys), room)
        if len(keys) > room:
            self._left_in_journal()
        self._cond.notify()

    def _left_in_journal(self) -> None:
        """Names to delete were left in the journal only (call with _cond): reads
        consult the journal, and the writer passes over it again (from its
        first entry) as the queue drains."""
        self._journal_only = True
        if self._replay_after is None:
            self._replay_after = b""
        else:
            self._rescan = True  # the pass running may be past them

    def _journal(self, keys: Sequence[bytes], *, private: bool = False) -> None:
        """Journal the shared (or ``private``) names of ``keys`` as remote copies
        to delete (call with _cond); a failure (a full disk) is logged."""
        if not keys:
            return
        try:
            self.journal.add(keys, private=private)
        except TiermemError as exc:
            log.warning("%d remote deletes not journaled (%s)", len(keys), exc)

    def deleting(self, key: bytes) -> bool:
        """Whether a remote delete of ``key``'s shared name (the one reads ask
        for) is queued, running, failed and not yet confirmed by a later one,
        or left in the journal to be queued (``_journal_only``)."""
        with self._cond:
            if (key, False) in self._deleting or (key, False) in self._fenced:
                return True
            if not self._journal_only:
                return False
        return self._journaled(key)

    def _journaled(self, key: bytes) -> bool:
        """Whether the journal lists ``key``'s shared name (an unreadable
        journal: True, a miss rather than a deleted value read back)."""
        return self._listed(key, False)

    def _listed(self, key: bytes, private: bool) -> bool:
        """Whether the journal lists ``key``'s shared (or ``private``) name; an
        unreadable journal: True."""
        try:
            return bool(self.journal.marks(key) & bit(private))
        except TiermemError:
            return True

    def _held_back(self, key: bytes) -> bool:
        """Whether what the store holds under ``key``, an object this daemon has
        no entry for, must not be read: a delete of it is queued or running, or
        a publish of it is pending (the object was evicted before its publish,
        which then deletes the older version the store holds). While names may
        be journaled but not queued (``_journal_only``), a key whose shared name
        the journal lists is held back too (one catalog read)."""
        name = (key, False)  # (a key held here is read by its entry, not by this)
        with self._cond:
            if (
                name in self._deleting
                or name in self._fenced
                or key in self._queued_keys
                or key in self._deferred
                or key in self._publishing
            ):
                return True
            if not self._journal_only:
                return False
        return self._journaled(key)

    # -- demotions (the mover uploads directly; see ``Mover.remote_writes``) -----------
    def claim(self, key: bytes, *, private: bool = False) -> bool:
        """Reserve ``key`` for a demotion that uploads it (under this daemon's
        private name if ``private``: a session's object): waits while the writer
        carries out a publish or delete of it (up to ``op_timeout_s``; False
        then: the demotion does not happen now; False too while a failed delete
        under the same name may still land: see ``_fenced``). Until ``release``,
        the writer carries out no op on the key, so the delete check
        (``_delete``) never runs between the upload and the catalog switch that
        records it.

        The name is journaled first (False if that fails): the upload is this
        daemon's copy of an object whose record is volatile (no SSD copy once
        it is served remotely; a session's objects are purged at restart too),
        so a restart purges the record and deletes the copy, which no daemon
        would otherwise delete (nor, for a session's object, adopt or even
        find: its private name is this daemon's). A delete under that name
        that the store carries out takes it off the journal (the object was
        deleted, replaced or evicted)."""
        deadline = time.monotonic() + self.config.op_timeout_s
        with self._cond:
            while key in self._writing or key in self._claimed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            if (key, private) in self._fenced:
                return False
            if self._journal_only and self._listed(key, private):
                return False  # maybe a failed delete's name past MAX_FENCED_NAMES
            try:
                self.journal.add([key], private=private)
            except TiermemError as exc:
                log.warning(
                    "not demoting %s: journal write failed (%s)", ObjectKey.decode(key), exc
                )
                return False
            self._claimed.add(key)
            return True

    def release(self, key: bytes, *, orphaned: bool, private: bool = False) -> None:
        """End a ``claim``. ``orphaned``: the demotion was not recorded (the
        object changed or went meanwhile, the upload failed): what it may have
        uploaded (under the private name if ``private``) is deleted, after
        everything queued so far (dropped if the object's current version has
        a remote copy under that name by then)."""
        with self._cond:
            self._claimed.discard(key)
            if orphaned:
                self._queue_deletes([key], private=private)
            self._cond.notify_all()

    def recorded(self, key: bytes, *, private: bool) -> None:
        """A demotion's upload of ``key`` was recorded in the catalog (call with
        the store lock, at the switch): ``private``, under the private name."""
        self._record_copy(key, private=private)

    def evicted(self, key: bytes, entry: Entry) -> None:
        """``key``'s object (``entry``) was evicted (call with the store lock): a
        shared remote copy stays for the other daemons; a private one is
        deleted, as nobody reads it any more (this daemon reads the shared
        name of a key it holds no entry for)."""
        if key not in self._private_copies:
            return
        self._private_copies.discard(key)
        if entry.remote_copy or entry.tier == Tier.REMOTE:
            with self._cond:
                self._queue_deletes([key], private=True)

    def _next_batch(self) -> list[_Op]:
        """Consecutive ops of one type, within the batch limits, up to the first
        on a claimed key (call with _cond; the first op's key is not claimed)."""
        first = self._ops.popleft()
        batch = [first]
        nbytes = first.size
        while self._ops and len(batch) < self.config.batch_max_objects:
            op = self._ops[0]
            if (
                op.delete != first.delete
                or nbytes + op.size > self.config.batch_max_bytes
                or op.key in self._claimed
            ):
                break
            batch.append(self._ops.popleft())
            nbytes += op.size
        if not first.delete:
            self._queued_keys.difference_update(op.key for op in batch)
        return batch

    def _run(self) -> None:
        while True:
            self._replay()
            with self._cond:
                if self._parked and time.monotonic() >= self._retry_at:
                    self._retry_parked()  # (also while publishes keep the queue busy)
                # (a demotion holds its claim for one upload: its own deadline bounds it)
                while not self._stop and (not self._ops or self._ops[0].key in self._claimed):
                    now = time.monotonic()
                    if self._parked and now >= self._retry_at:
                        self._retry_parked()
                        continue
                    if self._replay_due(now):
                        break
                    self._busy = False
                    self._cond.notify_all()
                    timed = (self._parked or self._replay_after is not None) and (
                        self._retry_at > now
                    )
                    self._cond.wait(self._retry_at - now if timed else None)
                if self._stop:
                    self._busy = False
                    self._cond.notify_all()
                    return
                if not self._ops or self._ops[0].key in self._claimed:
                    continue  # the journal's next window first (``_replay``)
                batch = self._next_batch()
                self._writing = {op.key for op in batch}
                if not batch[0].delete:
                    self._publishing = {op.key for op in batch}
                self._busy = True
            retry: list[_Op] = []
            try:
                if batch[0].delete:
                    self._delete(batch)
                else:
                    retry = self._publish(batch)
            except Exception:
                log.exception("remote writer batch failed")
            finally:
                with self._cond:
                    self._publishing = set()
                    self._writing = set()
                    self._cond.notify_all()  # demotions waiting to claim these keys
                    if batch[0].delete:
                        self._deletes -= len(batch)
                        for op in batch:
                            name = (op.key, op.private)
                            left = self._deleting.get(name, 0) - 1
                            if left > 0:
                                self._deleting[name] = left
                            else:
                                self._deleting.pop(name, None)
                    else:
                        self._queued_bytes -= sum(op.size for op in batch)
                        # a failed upload goes to the back of the queue (bounded tries)
                        for op in retry:
                            if op.key in self._queued_keys:
                                continue  # put again meanwhile: that publish carries it
                            self._deferred.pop(op.key, None)
                            self._queue_publish(op)
                        self._refill()
                        self.store.metrics.remote_publish_queue_bytes.set(self._queued_bytes)
                    if retry and not self._stop:
                        self._cond.wait(PUBLISH_RETRY_PAUSE_S)

    def _replay_due(self, now: float) -> bool:
        """Whether the journal's next window may be queued now (call with _cond;
        see ``_replay``)."""
        return (
            self._replay_after is not None
            and self._deletes <= MAX_PENDING_DELETES // 2
            and now >= self._retry_at
        )

    def _replay(self) -> int:
        """Queue the journal's next window of deletes once the queue has room
        (from ``start``, then from the writer as the queue drains, and not
        before ``_retry_at`` while deletes fail): each journaled name of a
        key, its shared one, this daemon's private one, or both, unless it is
        queued or parked already. A pass runs from the first entry to the
        last; names left in the journal only meanwhile (``_left_in_journal``)
        make the writer pass again, and reads consult the journal until a
        pass ends without any (``_journal_only``). Names journaled meanwhile
        may be queued again: a delete of a key whose current version has a
        remote copy under that name is spared (``_delete``). Returns how
        many were queued."""
        with self._cond:
            after = self._replay_after
            if after is None or not self._replay_due(time.monotonic()):
                return 0
            window = max(1, (MAX_PENDING_DELETES - self._deletes) // 2)  # keys of two names
        read = True
        try:
            entries = self.journal.entries(window, after=after)
        except TiermemError as exc:
            log.error("the journal of remote deletes could not be read: %s", exc)
            entries, read = [], False
        queued = 0
        with self._cond:
            for private in (False, True):
                todo = [
                    key
                    for key, marks in entries
                    if private in names(marks)
                    and (key, private) not in self._deleting
                    and (key, private) not in self._parked
                ]
                self._queue_deletes(todo, private=private, journal=False)
                queued += len(todo)
            if len(entries) >= window:
                self._replay_after = entries[-1][0]
            elif self._rescan:
                self._rescan = False
                self._replay_after = b""
            else:
                self._replay_after = None
                if read:  # (else reads keep consulting the journal)
                    self._journal_only = False
        return queued

    def _settled(self, done: list[_Name], *, deleted: bool = True) -> None:
        """Remove from the journal the names of a delete batch that the store
        carried out (``deleted``), or of a publish batch that landed (shared
        names), except those with a delete queued (again) meanwhile (it removes
        the entry; under _cond, which orders this after any ``_queue_deletes``
        or ``claim`` of the same names). A key's other name stays journaled. A
        failure is logged: the deletes are repeated at the next start."""
        if not done:
            return
        ours = Counter(done)
        with self._cond:
            for private in (False, True):
                keys = [
                    key
                    for (key, p), n in ours.items()
                    if p == private and self._deleting.get((key, p), 0) <= (n if deleted else 0)
                ]
                if not keys:
                    continue
                try:
                    self.journal.remove(keys, private=private)
                except TiermemError as exc:
                    log.warning("%d done remote deletes stay journaled (%s)", len(keys), exc)

    def _retry_parked(self) -> None:
        """Queue the deletes of parked names again (call with _cond); those past
        ``MAX_PENDING_DELETES`` stay parked."""
        room = max(0, MAX_PENDING_DELETES - self._deletes)
        again = [name for name in self._parked if name not in self._deleting][:room]
        for name in again:
            del self._parked[name]
        self._retry_at = time.monotonic() + self._pause()
        for private in (False, True):
            keys = [key for key, p in again if p == private]
            self._queue_deletes(keys, private=private, journal=False)

    def _pause(self) -> float:
        """The pause before failed deletes are tried again (call with _cond):
        ``DELETE_RETRY_PAUSE_S`` doubled for each failure after the first, at
        most ``DELETE_RETRY_MAX_PAUSE_S``."""
        doubled = DELETE_RETRY_PAUSE_S * 2.0 ** min(max(0, self._failures - 1), 30)
        return min(doubled, max(DELETE_RETRY_MAX_PAUSE_S, DELETE_RETRY_PAUSE_S))

    def _answered(self) -> None:
        """The store confirmed a delete or took a publish (call with _cond): the
        failed deletes are tried again within ``DELETE_RETRY_PAUSE_S``."""
        self._failures = 0
        if self._retry_at > time.monotonic() + DELETE_RETRY_PAUSE_S:
            self._retry_at = time.monotonic() + DELETE_RETRY_PAUSE_S
            self._cond.notify_all()

    def _lift(self, name: _Name) -> None:
        """End a name's fence (call with _cond): a publish the shared name's
        fence held back is queued."""
        del self._fenced[name]
        self._parked.pop(name, None)
        key, private = name
        size = None if private else self._after_fence.pop(key, None)
        if size is not None and key not in self._queued_keys and key not in self._deferred:
            self._queue_publish(_Op(False, key, size))
            self._cond.notify_all()

    def _delete(self, ops: list[_Op]) -> None:
        """Carry out a batch of deletes (each of a key's shared name or of this
        daemon's private one) and take the deleted names off the journal. A
        spared name (below) stays journaled: its current copy is a demotion's,
        journaled by ``claim``, or a published one, which a delete at the next
        start only turns into a miss. After a failure the names stay journaled
        and are fenced (``_fenced``: per name, so a failed delete of a private
        copy holds back no publish) and tried again after
        ``_pause()`` (an exponential backoff; past ``MAX_FENCED_NAMES`` fenced
        names, a name stays journaled only, see ``_left_in_journal``): a
        confirmed delete lifts a name's fence if
        every failed call on it had ended when it started (a store serves a
        node's commands in arrival order, so a late one has landed by then);
        otherwise it is tried again."""
        # Each delete was queued for a version older than the one the catalog may
        # name now: a key whose current version has a remote copy under the same
        # name (a demotion uploaded it directly, after the delete was queued)
        # keeps it. No upload of these keys can land between this check and the
        # delete: demotions claim a key from their upload to their catalog
        # switch, and cannot claim one while it is in this batch (``claim``).
        with self.store.lock:
            current = [(self.catalog.find(op.key), op.key in self._private_copies) for op in ops]
        doomed = [
            op
            for op, (e, private) in zip(ops, current, strict=True)
            if e is None or not (e.remote_copy or e.tier == Tier.REMOTE) or private != op.private
        ]
        gone = [(op.key, op.private) for op in doomed]
        spared = {(op.key, op.private) for op in ops}.difference(gone)
        with self._cond:
            for name in spared:
                if name in self._fenced:
                    self._parked[name] = None  # spared (not expected while fenced): later
            clear = {n for n in gone if all(e.is_set() for e in self._fenced.get(n, ()))}
        if not doomed:
            return
        ended = threading.Event()
        try:
            self.remote.delete([op.key for op in doomed], [op.private for op in doomed], ended.set)
        except Unavailable:  # counted and logged by the engine
            with self._cond:
                spilled = False
                for name in gone:
                    if name not in self._fenced and len(self._fenced) >= MAX_FENCED_NAMES:
                        spilled = True  # journaled: reads consult it, a pass retries it
                        continue
                    running = [e for e in self._fenced.get(name, ()) if not e.is_set()]
                    self._fenced[name] = [*running, ended]
                    self._parked[name] = None
                if spilled:
                    self._left_in_journal()
                self._failures += 1
                self._retry_at = time.monotonic() + self._pause()
            return
        self._settled(gone)
        with self._cond:
            self._answered()
            for name in gone:
                if name not in self._fenced:
                    continue
                if name in clear:
                    self._lift(name)
                else:  # an earlier call was still running: it may land after this one
                    self._parked[name] = None
                    self._retry_at = max(self._retry_at, time.monotonic() + DELETE_RETRY_PAUSE_S)

    def _publish(self, ops: list[_Op]) -> list[_Op]:
        """Upload a batch; returns the ops to try again (the upload failed, tries left)."""
        store, catalog = self.store, self.catalog
        m = store.metrics
        # (key, entry, meta, packed value): packed under a short read lease, which
        # is given back before the upload so the copy never pins memory for long
        items: list[tuple[bytes, Entry, ObjectMeta, bytes]] = []
        skipped = 0
        #: keys left unpublished whose older version the store may hold: the object
        #: is gone (evicted before its turn: an eviction keeps the remote name, so
        #: a later read would adopt that version) or its copy here is damaged
        stale: list[bytes] = []
        with self._cond:
            # a failed delete of these may still land: published once it cannot
            fenced = {op.key for op in ops if (op.key, False) in self._fenced}
            for op in ops:
                if op.key not in fenced:
                    continue
                if len(self._after_fence) < MAX_DEFERRED_PUBLISHES:
                    self._after_fence[op.key] = op.size
                else:
                    skipped += 1  # the object stays local; its old version goes
        ops = [op for op in ops if op.key not in fenced]
        by_key = {op.key: op for op in ops}
        for key in by_key:
            with store.lock:
                entry = catalog.find(key)
                if entry is None or entry.remote_copy or entry.tier == Tier.REMOTE:
                    skipped += 1
                    if entry is None:
                        stale.append(key)
                    continue
                meta = catalog.meta(key, entry)
                if self.private(meta.session):
                    # a session put this version after the publish was queued: it
                    # stays private (see ``_committed``); the store may hold the
                    # unowned version it replaced
                    skipped += 1
                    stale.append(key)
                    continue
                # an owner tag is shared like no owner (a value naming a session
                # is private: ``codec.PRIVATE_OWNER``)
                meta = dataclasses.replace(meta, session="")
                value = store.lease_memory(entry) if entry.tier in store.memory else None
            try:
                if value is None:
                    value = ValueRead(store.read_ssd(key, entry))
                items.append((key, entry, meta, self.remote.pack(meta, value.view)))
            except Corrupted as exc:
                skipped += 1
                # the copy read may have gone meanwhile (a demotion releases it, an
                # eviction or overwrite frees it): damage only if it is still there
                with store.lock:
                    now = catalog.find(key)
                    damaged = now is not None and now.same_ssd_copy(entry)
                    if damaged:
                        store.report_damage(key, entry, exc.message)
                if now is None or damaged:
                    stale.append(key)
            finally:
                if value is not None:
                    value.release()
        retry: list[_Op] = []
        try:
            stored = self.remote.put([(meta, packed) for _, _, meta, packed in items])
            if any(stored):
                with self._cond:
                    self._answered()
        except Unavailable:  # counted and logged by the engine
            stored = [False] * len(items)
            for key, _, _, _ in items:
                op = by_key[key]
                if op.attempt + 1 < PUBLISH_ATTEMPTS:
                    retry.append(_Op(False, key, op.size, op.attempt + 1))
        #: keys uploaded whose object was replaced during the upload (say, a
        #: session took the key over): what landed is an older version
        overtaken: list[bytes] = []
        with store.lock:
            for (key, entry, _, _), ok in zip(items, stored, strict=True):
                now = catalog.find(key) if ok else None
                if now is None:
                    # not stored, or removed meanwhile: a delete on purpose queued
                    # the remote delete (``_removed``); an eviction keeps the copy
                    continue
                if (now.checksum, now.size) == (entry.checksum, entry.size) and not (
                    self.private_row(now.row)
                ):
                    catalog.set_remote(now.row, True)
                    self._record_copy(key, private=False)
                else:
                    overtaken.append(key)
        retried = {op.key for op in retry}
        self._not_published(
            [
                *stale,
                *overtaken,
                *(
                    key
                    for (key, _, _, _), ok in zip(items, stored, strict=True)
                    if not ok and key not in retried
                ),
            ]
        )
        # a version replaced by an overwrite is journaled until its successor
        # lands over it (``_replaced``); the overtaken have a delete queued now
        landed = [key for (key, _, _, _), ok in zip(items, stored, strict=True) if ok]
        self._settled([(key, False) for key in landed], deleted=False)
        done = sum(stored)
        if done:
            m.remote_published.labels("stored").inc(done)
        if len(items) - done - len(retry):
            m.remote_published.labels("failed").inc(len(items) - done - len(retry))
        if skipped:
            m.remote_published.labels("skipped").inc(skipped)
        return retry

    # -- lookups ----------------------------------------------------------------------
    def extend_prefix(
        self, keys: Sequence[bytes], rows: npt.NDArray[np.int64], tiers: npt.NDArray[np.uint8]
    ) -> tuple[int, bytes]:
        """Length of the chain's stored prefix counting chunks in the remote store,
        and each leading chunk's tier (REMOTE for those found there). Chunks served
        from the remote tier are checked too: ones the store evicted are holes (and
        their entries are removed). Checked in batches, up to the first hole; while
        the store is unavailable the prefix ends at the first chunk not held locally."""
        out = bytearray(np.asarray(tiers, dtype=np.uint8).tobytes())
        local = (rows >= 0) & (tiers != int(Tier.REMOTE))
        ask = np.flatnonzero(~local)
        step = self.config.batch_max_objects
        for start in range(0, len(ask), step):
            window = ask[start : start + step].tolist()
            # a chunk held here is looked for under the name of its copy; one that
            # is not, under its shared name: another daemon's session's block,
            # private to it, is not found (the read would miss it)
            private = [bool(rows[j] >= 0) and self.private_copy(keys[j]) for j in window]
            try:
                found = self.remote.exists([keys[j] for j in window], private)
            except Unavailable:
                return window[0], bytes(out[: window[0]])
            found = [
                p and (rows[j] >= 0 or not self._held_back(keys[j]))
                for j, p in zip(window, found, strict=True)
            ]
            for j, present in zip(window, found, strict=True):
                if not present:
                    if rows[j] >= 0:
                        self._forget(keys[j])
                    return j, bytes(out[:j])
                out[j] = int(Tier.REMOTE)
        return len(keys), bytes(out)

    def _forget(self, key: bytes) -> None:
        with self.store.lock:
            entry = self.catalog.find(key)
        if entry is not None and entry.tier == Tier.REMOTE:
            self.store.forget_stale(key, entry)

    # -- reads ------------------------------------------------------------------------
    def pull(
        self, keys: Sequence[bytes], touch: bool = True, strict: bool = False
    ) -> dict[bytes, RemoteValue | None]:
        """Fetch the objects among ``keys`` that are not held locally (no catalog
        entry, or served from the remote tier), in parts that are on the wire at
        once (``RemoteTier.read``). Returns what to serve for each: its verified
        value (release it), or None for a miss (not in the store; a stale entry is
        removed). Objects this daemon never had are adopted (stored locally with a
        catalog entry), demoted ones may be promoted, both from the bytes just
        read, part by part while later parts arrive. Keys held locally, and keys
        not fetched because the store is unavailable, are left out: read them the
        ordinary way. Raises Corrupted for a payload that fails its checksum.
        ``touch``: count an access to adopted objects (False when the caller reads
        them locally right after, which counts it). ``strict``: raise Unavailable
        when the store is unavailable for an object this daemon demoted (served
        from the remote tier): the read that follows would only ask the silent
        store again, a second deadline and a second breaker failure."""
        store, catalog = self.store, self.catalog
        with store.lock:
            entries = {k: catalog.find(k) for k in keys}
            mine = {k for k, e in entries.items() if e is not None and k in self._private_copies}
        out: dict[bytes, RemoteValue | None] = {}
        wanted = []
        for k, e in entries.items():
            if e is None and self._held_back(k):
                out[k] = None  # deleted or evicted here; its remote delete has not run yet
            elif e is None or e.tier == Tier.REMOTE:
                wanted.append(k)
        if not wanted:
            return out
        parts = self.remote.read(wanted, [k in mine for k in wanted])
        try:
            for part, values in parts:
                for n, (i, value) in enumerate(zip(part, values, strict=True)):
                    try:
                        out[wanted[i]] = self._take(wanted[i], entries[wanted[i]], value, touch)
                    except BaseException:
                        release_all(values[n + 1 :])
                        raise
        except Unavailable:
            # counted and logged by the engine; what arrived is served
            if strict and any(entries[k] is not None and k not in out for k in wanted):
                release_all(out.values())
                raise
        except BaseException:
            release_all(out.values())
            raise
        finally:
            parts.close()  # parts still on the wire are dropped when they arrive
        return out

    def _take(
        self, key: bytes, entry: Entry | None, value: RemoteValue | Corrupted | None, touch: bool
    ) -> RemoteValue | None:
        """What to serve for one fetched value (see ``pull``); the value is released
        unless it is returned."""
        store = self.store
        if isinstance(value, Corrupted):
            raise value
        if value is None:
            if entry is not None:
                store.forget_stale(key, entry)
            return None
        if entry is None and private_value(value.meta):
            value.release()  # a session's object another daemon demoted: absent here
            return None
        try:
            if entry is None:
                # adopting verifies the copy it makes (and so the payload)
                if not self.adopt(value, touch):
                    self.remote.verify(value, value.meta.checksum, value.meta.size_bytes)
                self._count_read(value.meta.key.kind)
                return value
            if (value.meta.checksum, value.meta.size_bytes) != (entry.checksum, entry.size):
                value.release()  # another daemon's version replaced ours: a miss
                store.forget_stale(key, entry)
                return None
            self.remote.verify(value, entry.checksum, entry.size)
            self._count_read(entry.kind)
            self._promote_from(key, value)
        except BaseException:
            value.release()
            raise
        return value

    def stage(
        self,
        keys: Sequence[ObjectKey],
        reserve: Callable[[ObjectKey, int, int], Reservation | None],
        drop: Callable[[Reservation], None],
        trim: Callable[[Reservation, int], Reservation],
        caller: str | None = None,
    ) -> dict[ObjectKey, tuple[ObjectMeta, Reservation]]:
        """Serve the objects among ``keys`` that this daemon does not hold (no
        catalog entry; kinds it shares) straight from the remote store, in the
        extents ``reserve(key, size, head)`` gives (``head + size`` bytes for a
        payload of ``size``; None: the payload comes another way, e.g. inline,
        judged by ``size`` alone): each value is fetched (parts on the
        wire at once, as ``pull``) and its payload lands in its extent
        (``RemoteTier.read_into``: received there from the socket on Redis;
        transferred there by Mooncake with the value's head, in an extent
        reserved with room for it before the payload, which ``trim(extent,
        head bytes)`` then gives back; copied there when it did not land, or
        with ``land_reads`` off), and is verified there against its checksum. Returns
        {key: (metadata, filled reservation)} for the values verified that way;
        the caller leases the extents and hands each to ``adopt_filled`` when
        done with it. Every other extent ``reserve`` handed out is given to
        ``drop`` (maybe later, from another thread: the extents of a part given
        up on at its deadline are dropped once its read returns). Raises
        Corrupted for a payload that fails its checksum, and what admitting a
        read of each namespace raises (PermissionDenied, the namespace's request
        limits).

        Objects this daemon demoted (served from the remote tier) are brought
        in as ``fill`` does, those a session owns only for a ``caller`` who
        may read them (see ``fill``); values ``reserve`` declines (None: too
        small for an extent, no room) are adopted as ``fill`` does; misses and
        an unavailable store are left to the read that follows, except that an
        unavailable store raises Unavailable for an object this daemon demoted,
        as ``fill`` does."""
        shared = [k for k in keys if k.kind in self.kinds]
        if not shared:
            return {}
        # admitted as reads (authorized, within the namespace's request limits),
        # like the ordinary open of each object it replaces
        with contextlib.ExitStack() as admitted:
            for namespace in {k.namespace for k in shared}:
                admitted.enter_context(self.store.guard.admit(namespace, Role.READ))
            return self._stage(shared, reserve, drop, trim, caller)

    def _stage(
        self,
        shared: list[ObjectKey],
        reserve: Callable[[ObjectKey, int, int], Reservation | None],
        drop: Callable[[Reservation], None],
        trim: Callable[[Reservation, int], Reservation],
        caller: str | None,
    ) -> dict[ObjectKey, tuple[ObjectMeta, Reservation]]:
        with self.store.lock:
            entries = [self.catalog.find(k.encode()) for k in shared]
            known = {k.namespace for k in shared if k.namespace in self.catalog.namespaces}
            owned = [e is not None and self._owned_row(e.row) for e in entries]
        demoted = [
            k.encode()
            for k, e, o in zip(shared, entries, owned, strict=True)
            if e and e.tier == Tier.REMOTE and self._may_read(k.encode(), e, o, caller)
        ]
        missing = [
            k
            for k, e in zip(shared, entries, strict=True)
            if e is None and k.namespace in known and not self._held_back(k.encode())
        ]
        if demoted:  # a silent store fails the request here, once (``pull``)
            self._bring_in(demoted, touch=False, strict=True)
        out: dict[ObjectKey, tuple[ObjectMeta, Reservation]] = {}
        if not missing:
            return out
        landing = _Landing(reserve, drop, trim)
        encoded = [k.encode() for k in missing]
        parts = (
            self.remote.read_into(encoded, landing.place, landing.drop)
            if self.config.land_reads
            else self.remote.read(encoded)
        )
        try:
            for part, values in parts:
                for n, (i, value) in enumerate(zip(part, values, strict=True)):
                    try:
                        staged = self._stage_one(value, landing.take(i), reserve, drop)
                    except BaseException:
                        release_all(values[n + 1 :])
                        for j in part[n + 1 :]:
                            landing.drop(j)
                        raise
                    if staged is not None:
                        out[missing[i]] = staged
        except Unavailable:
            pass  # counted and logged by the engine; what arrived is served
        except BaseException:
            for _meta, reservation in out.values():
                drop(reservation)
            raise
        finally:
            parts.close()  # parts still on the wire are dropped when they arrive
        return out

    def _stage_one(
        self,
        value: ReadValue,
        landed: Reservation | None,
        reserve: Callable[[ObjectKey, int, int], Reservation | None],
        drop: Callable[[Reservation], None],
    ) -> tuple[ObjectMeta, Reservation] | None:
        """One fetched value into its extent (see ``stage``): verified where it
        landed (``landed``), or copied there; releases the value."""
        if isinstance(value, Corrupted):
            raise value
        if value is None:
            return None  # not in the store: the read reports it missing
        if private_value(value.meta):
            # a session's object another daemon demoted: absent here, a miss
            if isinstance(value, LandedValue):
                if landed is not None:
                    drop(landed)
            else:
                value.release()
            return None
        if isinstance(value, LandedValue):
            if landed is None:
                raise InvariantViolation(f"{value.meta.key} landed in no extent")
            try:
                self.remote.check(value.meta, landed.buffer, value.digest)
            except BaseException:
                drop(landed)
                raise
            self._count_read(value.meta.key.kind)
            return value.meta, landed
        try:
            reservation = reserve(value.meta.key, value.meta.size_bytes, 0)
        except BaseException:
            value.release()
            raise
        if reservation is None:  # _take releases the value unless it returns it
            got = self._take(value.meta.key.encode(), None, value, touch=False)
            if got is not None:
                got.release()
            return None
        try:
            self.remote.copy_verified(value, value.meta.checksum, reservation.buffer)
        except BaseException:
            drop(reservation)
            raise
        finally:
            value.release()
        self._count_read(value.meta.key.kind)
        return value.meta, reservation

    def adopt_filled(self, meta: ObjectMeta, reservation: Reservation) -> None:
        """Adopt an object (see ``adopt``) whose verified bytes fill
        ``reservation`` (from ``stage``), which becomes its storage; when it
        cannot be placed (someone stored the key meanwhile, no room), the
        reservation is given back. Never raises: it runs when a lease ends."""
        spec = self._adoption_spec(meta)
        try:
            profile = self.objects.prepare(spec)
        except BaseException as exc:
            self.objects.abort(reservation)
            if not isinstance(exc, TiermemError):
                log.exception("adopting %s failed", meta.key)
            return
        try:
            self.objects.commit_filled(
                spec, profile, reservation, meta.checksum, "remote", sync=False, publish=False
            )
        except TiermemError as exc:  # the commit gave the space back
            log.debug("not adopting %s: %s", meta.key, exc)
            return
        except Exception:
            log.exception("adopting %s failed", meta.key)
            return
        self._adopted(meta, touch=True)

    def adopt_filled_many(self, items: Sequence[tuple[ObjectMeta, Reservation]]) -> None:
        """``adopt_filled`` for the extents of several leases that ended together
        (one Release): committed as one batch (``commit_filled_many``: one guard
        admission per namespace, one catalog write, one hold of the store lock).
        Extents whose key is stored meanwhile (or twice in the batch) are given
        back first; a refusal of the batch (quota, no room) gives back all of
        them. Never raises."""
        if len(items) == 1:
            self.adopt_filled(*items[0])
            return
        puts: list[FilledPut] = []
        with self.store.lock:
            present = {m.key.encode() for m, _r in items if self.catalog.find(m.key.encode())}
        for n, (meta, reservation) in enumerate(items):
            encoded = meta.key.encode()
            try:
                if encoded in present:  # stored meanwhile, or twice in the batch
                    raise AlreadyExists(f"object {meta.key} exists")
                present.add(encoded)
                spec = self._adoption_spec(meta)
                puts.append(FilledPut(spec, self.objects.prepare(spec), reservation, meta.checksum))
            except BaseException as exc:
                self.objects.abort(reservation)
                if isinstance(exc, TiermemError):
                    log.debug("not adopting %s: %s", meta.key, exc)
                    continue
                for put in puts:
                    self.objects.abort(put.reservation)
                for _meta, later in items[n + 1 :]:
                    self.objects.abort(later)
                log.exception("adopting %d objects failed", len(items))
                return
        if not puts:
            return
        try:
            metas = self.objects.commit_filled_many(puts, "remote", publish=False)
        except TiermemError as exc:  # the commit gave the space back
            log.debug("not adopting %d objects: %s", len(puts), exc)
            return
        except Exception:
            log.exception("adopting %d objects failed", len(puts))
            return
        self._adopted_many(metas)

    def fill(self, keys: Sequence[ObjectKey], caller: str | None = None) -> None:
        """Bring the objects among ``keys`` that this daemon does not hold, of the
        kinds it shares, from the remote store into its local tiers before they
        are read locally (the data plane calls this, so a shared-memory or bulk
        read of a block another daemon wrote is one request). Checks first that
        the caller may read each namespace (PermissionDenied, as the read would).
        Misses are left to the read that follows, and so is an unavailable
        store for objects this daemon never had; for one it demoted, Unavailable
        is raised here (the read would ask the silent store again).

        An object a session owns that was demoted to the remote tier is brought
        in only for a ``caller`` who may read it (the session the client acts
        as; "" a trusted tool; None: not known, as on the bulk path). The
        others are left to the read that follows, which checks the caller
        before it fetches anything: a sibling's read must not move the object
        (fetch, promote) before it is refused."""
        shared = [k for k in keys if k.kind in self.kinds]
        if not shared:
            return
        for namespace in {k.namespace for k in shared}:
            self.store.guard.authorize(namespace, Role.READ)
        encoded = [k.encode() for k in shared]
        with self.store.lock:
            entries = [self.catalog.find(k) for k in encoded]
            owned = [e is not None and self._owned_row(e.row) for e in entries]
        wanted = [
            k
            for k, e, o in zip(encoded, entries, owned, strict=True)
            if e is None or self._may_read(k, e, o, caller)
        ]
        self._bring_in(wanted, touch=False, strict=True)

    def _may_read(self, key: bytes, entry: Entry, owned: bool, caller: str | None) -> bool:
        """Whether ``caller`` (see ``fill``) may read the object ``entry``
        describes (``owned``: by a session), so it may be fetched for that
        read now; False leaves the object to the read itself, which refuses it
        or fetches it after its own check. Reads the object's record without
        the store lock (as unlocked reads do): a record gone meanwhile is a
        False."""
        if not owned or caller == "":
            return True
        if caller is None:
            return False
        try:
            self.objects.guard.check_access(self.catalog.meta(key, entry), caller, write=False)
        except TiermemError:
            return False
        return True

    def fetch(self, keys: Sequence[bytes]) -> int:
        """Bring objects this daemon does not hold from the remote store into its
        local tiers (``pull`` in batches, values released at once). Returns how
        many are held locally afterwards; misses and an unavailable store count 0."""
        self._bring_in(keys)
        with self.store.lock:
            held = [self.catalog.find(k) for k in keys]
        return sum(1 for e in held if e is not None and e.tier != Tier.REMOTE)

    def _bring_in(self, keys: Sequence[bytes], touch: bool = True, strict: bool = False) -> None:
        """``pull`` a window of keys at a time, values released at once."""
        step = self.config.batch_max_objects
        for start in range(0, len(keys), step):
            release_all(self.pull(keys[start : start + step], touch, strict).values())

    def _count_read(self, kind: Kind) -> None:
        self.store.metrics.count_read(kind.name, Tier.REMOTE.name, self.store.tier_names())

    def _promote_from(self, key: bytes, value: RemoteValue) -> None:
        """Count a read of an object served from the remote tier and move it up if
        the planner wants, from the bytes just read."""
        with self.store.lock:
            entry = self.catalog.find(key)
            if entry is None or entry.tier != Tier.REMOTE:
                return
            self.catalog.touch(entry.row, key)
        promotion = self.placement.take_promotion(key)
        if promotion is None:
            return
        try:
            self.placement.promote(key, promotion, entry, value.payload)
        except TiermemError:
            log.exception("promotion of %s from the remote tier failed", ObjectKey.decode(key))

    def adopt(self, value: RemoteValue, touch: bool = True) -> bool:
        """Store an object another daemon wrote (found in the remote store) as a
        local CACHE object with a catalog entry marked as having a remote copy,
        verifying the copy against the value's checksum as it is made (Corrupted:
        nothing is stored). True: adopted, and the payload is verified. False
        when it cannot be placed now (no room, its namespace does not exist here,
        someone stored the key meanwhile): nothing was verified. ``touch``: count
        an access (see ``pull``)."""
        meta = value.meta
        key = meta.key
        encoded = key.encode()
        with self.store.lock:
            if key.namespace not in self.catalog.namespaces or self.catalog.find(encoded):
                return False
        spec = self._adoption_spec(meta)
        try:
            profile = self.objects.prepare(spec)
            reservation = self.objects.reserve(meta.size_bytes, profile, key.kind)
        except TiermemError as exc:
            log.debug("not adopting %s: %s", key, exc)
            return False
        try:
            self.remote.copy_verified(value, meta.checksum, reservation.buffer)
        except BaseException:
            self.objects.abort(reservation)
            raise
        try:
            self.objects.commit_filled(
                spec, profile, reservation, meta.checksum, "remote", sync=False, publish=False
            )
        except (CapacityExceeded, TiermemError) as exc:  # the commit gave the space back
            log.debug("not adopting %s: %s", key, exc)
            return False
        self._adopted(meta, touch)
        return True

    @staticmethod
    def _adoption_spec(meta: ObjectMeta) -> PutSpec:
        """The put that adopts another daemon's object: CACHE (this daemon never
        promised to keep it), not pinned, placed by admission."""
        profile = dataclasses.replace(
            meta.profile,
            pin=False,
            preferred_tier=None,
            durability=Durability.CACHE,
            next_access_unix_ms=0,
        )
        return PutSpec(
            key=meta.key,
            size_bytes=meta.size_bytes,
            profile=profile,
            tensor=meta.tensor,
            codec=meta.codec,
            if_absent=True,
        )

    def _adopted_many(self, metas: Sequence[ObjectMeta]) -> None:
        """``_adopted`` (with an access counted) for a batch, under one lock hold."""
        with self.store.lock:
            for meta in metas:
                encoded = meta.key.encode()
                entry = self.catalog.find(encoded)
                if entry is not None and entry.checksum == meta.checksum:
                    self.catalog.set_remote(entry.row, True)
                    self._record_copy(encoded, private=False)
                    self.catalog.touch(entry.row, encoded)
        self.store.metrics.remote_adopted.inc(len(metas))

    def _adopted(self, meta: ObjectMeta, touch: bool) -> None:
        """Mark a just adopted object as having a remote copy (and count an access)."""
        encoded = meta.key.encode()
        with self.store.lock:
            entry = self.catalog.find(encoded)
            if entry is not None and entry.checksum == meta.checksum:
                self.catalog.set_remote(entry.row, True)
                self._record_copy(encoded, private=False)
                if touch:
                    self.catalog.touch(entry.row, encoded)
        self.store.metrics.remote_adopted.inc()
