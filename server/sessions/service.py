"""The session service: open, describe, list and close agent sessions.

Durability: every session record is in RocksDB (column family "sessions",
synced on open and close), so sessions survive a restart. Closing is two
durable steps: the subtree is marked CLOSING, then everything it owns is freed
and the records are deleted in one write batch together with the parent's
ledger entry. A crash in between leaves CLOSING records, which the next start
finishes (``recover``): nothing a closed session owned survives.

A close that fails in between (a cleanup hook or the object delete raises)
leaves its sessions CLOSING in memory too; a later close of them resumes
the cleanup (the hooks free what is left; see ``SessionCleanup``), and so does
the reaper. A resumed close hands the parent the result record and ledger
entry the failed one already made (kept on the child in memory), not new ones.
After a crash that memory is gone: ``finish_interrupted`` looks in the
parent's scratchpad for a result record tagged with the child's id (a tag
only the daemon writes) and written since the child was created (an earlier
session with the same id had closed before this one was opened), and reuses
it rather than adding another.
Each close claims the sessions it cleans up for its duration: a close that
would take in a session another close is cleaning up waits for that one to
end (at most ``_CLOSE_WAIT_S``), so no cleanup runs twice at once.

Locks: the session lock is taken before the store lock, never after; cleanup
hooks and the result sink are called without the session lock.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from tiermem.server.catalog.catalog import Entry
from tiermem.server.config import SessionsConfig
from tiermem.server.errors import (
    AlreadyExists,
    CapacityExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from tiermem.server.metrics import Metrics
from tiermem.server.model import Kind, Tier
from tiermem.server.services.guard import Role
from tiermem.server.services.store import Store
from tiermem.server.sessions.cleanup import CleanupRegistry, Freed
from tiermem.server.sessions.model import (
    CloseReason,
    CloseReport,
    Grant,
    LedgerEntry,
    OpenSpec,
    Session,
    SessionState,
    SessionView,
)
from tiermem.v1 import agent_records_pb2 as agent_pb2
from tiermem.v1 import sessions_pb2

if TYPE_CHECKING:
    from tiermem.server.scratch.records import Record
    from tiermem.server.scratch.service import ReplayFilter

log = logging.getLogger(__name__)

_SEQ = struct.Struct(">Q")
#: Closed session ids remembered (in memory) so late puts naming them are refused.
_CLOSED_MEMORY = 100_000
#: How long a close waits for another close running in its subtree to end.
_CLOSE_WAIT_S = 60.0


class ResultSink(Protocol):
    """Where a closing child's result record goes (the scratchpad)."""

    def append_result(self, parent: str, child: str, payload: bytes) -> int:
        """Append ``payload`` to ``parent``'s scratchpad durably; returns the record id."""
        ...

    def request_flush(self, reason: str) -> None: ...

    def replay(self, session: str, flt: ReplayFilter, caller: str = "") -> list[Record]:
        """Records of ``session`` matching ``flt`` (buffered ones included)."""
        ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class SessionService:
    def __init__(self, config: SessionsConfig, store: Store, metrics: Metrics) -> None:
        self.config = config
        self.store = store
        self.rocks = store.catalog.rocks
        self.metrics = metrics
        self.cleanup = CleanupRegistry()
        self.result_sink: ResultSink | None = None
        self._sessions: dict[str, Session] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.RLock()
        #: Sessions a close is cleaning up now (its subtree); guarded by ``_lock``.
        self._claimed: set[str] = set()
        self._unclaimed = threading.Condition(self._lock)

    # -- queries used by other services (lock-free reads of the dict) -----------
    def authorize(self, session: str, role: Role) -> None:
        """The caller must hold ``role`` on the namespace of ``session`` (sessions
        named by id imply their namespace; unknown ids are left to the call,
        which answers NOT_FOUND)."""
        s = self._sessions.get(session) if session else None
        if s is not None:
            self.store.guard.authorize(s.namespace or "default", role)

    def get(self, session: str) -> Session | None:
        return self._sessions.get(session)

    def known_ids(self) -> set[str]:
        """Every session with a record: open or closing."""
        with self._lock:
            return set(self._sessions)

    def open_ids(self) -> set[str]:
        with self._lock:
            return {s.id for s in self._sessions.values() if s.state == SessionState.OPEN}

    def require_open(self, session: str) -> Session:
        s = self._sessions.get(session)
        if s is None:
            state = "closed" if session in self._closed else "not open"
            raise NotFound(f"session {session!r} is {state}")
        if s.state != SessionState.OPEN:
            raise FailedPrecondition(f"session {session!r} is closing")
        return s

    def was_closed(self, session: str) -> bool:
        """True if ``session`` was closed recently (remembered in memory only)."""
        return session in self._closed

    def touch(self, session: str) -> None:
        s = self._sessions.get(session)
        if s is not None:
            s.heartbeat_ms = _now_ms()

    def ancestors(self, session: str) -> Iterator[Session]:
        s = self._sessions.get(session)
        seen = 0
        while s is not None and s.parent:
            s = self._sessions.get(s.parent)
            seen += 1
            if s is None or seen > self.config.max_depth + 1:
                return
            yield s

    def is_ancestor(self, candidate: str, session: str) -> bool:
        return any(a.id == candidate for a in self.ancestors(session))

    def read_grant(self, caller: str, owner: str, namespace: str, kind: Kind, key: str) -> bool:
        """True if ``caller`` may read ``owner``'s object through a grant."""
        s = self._sessions.get(caller)
        if s is None or not s.grants or not self.is_ancestor(owner, caller):
            return False
        return any(g.covers(namespace, kind, key) for g in s.grants)

    def scratch_prefixes(self, caller: str, session: str) -> list[str] | None:
        """Key prefixes of ``session``'s scratch records ``caller`` may read:
        None = all of them; raises NotFound when it may read none."""
        if not caller or caller == session:
            return None
        s = self._sessions.get(caller)
        if s is not None and self.is_ancestor(session, caller):
            owner = self._sessions.get(session)
            ns = owner.namespace if owner is not None else s.namespace
            prefixes = [
                g.key_prefix for g in s.grants if g.kind == Kind.SCRATCH and g.namespace == ns
            ]
            if prefixes:
                return prefixes
        raise NotFound(f"session {session!r} not found (not visible to session {caller!r})")

    def check_scratch_write(self, caller: str, session: str) -> None:
        if caller and caller != session:
            raise PermissionDenied(
                f"session {caller!r} may not write to the scratchpad of session {session!r}; "
                "a session writes only its own records (grants are read-only)"
            )

    # -- open -------------------------------------------------------------------
    def open(self, spec: OpenSpec, caller: str = "") -> Session:
        spec.validate()
        with self.store.lock:
            self.store.catalog.namespace_id(spec.namespace)
        if len(spec.grants) > self.config.max_grants:
            raise InvalidArgument(
                f"{len(spec.grants)} grants; the limit is {self.config.max_grants}"
            )
        now = _now_ms()
        with self._lock:
            if len(self._sessions) >= self.config.max_open:
                raise CapacityExceeded(
                    f"{len(self._sessions)} sessions are open; the limit is "
                    f"{self.config.max_open} (agent.sessions.max_open)"
                )
            sid = spec.id or f"s-{uuid.uuid4().hex[:16]}"
            if sid in self._sessions:
                raise AlreadyExists(f"session {sid!r} is open already")
            if spec.parent:
                parent = self.require_open(spec.parent)
                if caller and caller != spec.parent:
                    raise PermissionDenied(
                        f"session {caller!r} may not open children of session {spec.parent!r}"
                    )
                depth = 1 + sum(1 for _ in self.ancestors(parent.id))
                if depth > self.config.max_depth:
                    raise InvalidArgument(
                        f"session tree would be {depth} deep; the limit is {self.config.max_depth}"
                    )
            elif caller:
                raise PermissionDenied(
                    f"session {caller!r} may open only child sessions (set parent to itself)"
                )
            session = Session(
                id=sid,
                parent=spec.parent,
                label=spec.label,
                namespace=spec.namespace,
                state=SessionState.OPEN,
                quotas={t: q for t, q in spec.quotas.items() if q > 0},
                created_ms=now,
                expires_ms=now + spec.ttl_s * 1000 if spec.ttl_s else 0,
                lease_s=spec.lease_s,
                grants=list(spec.grants),
                heartbeat_ms=now,
            )
            self.rocks.cf("sessions").put(sid.encode(), _to_record(session).SerializeToString())
            self.rocks.flush()
            self._sessions[sid] = session
            self._closed.pop(sid, None)
            if spec.parent:
                self._sessions[spec.parent].children.add(sid)
        self.metrics.sessions_opened.inc()
        return session

    # -- describe / list ----------------------------------------------------------
    def describe(self, session: str) -> SessionView:
        s = self._sessions.get(session)
        if s is None:
            raise NotFound(f"session {session!r} not found")
        return SessionView(s, self.usage(session))

    def ledger(self, session: str, limit: int = 1000) -> list[LedgerEntry]:
        out: list[LedgerEntry] = []
        prefix = session.encode() + b"\x00"
        for _key, raw in self.rocks.scan("session_ledger", prefix):
            rec = agent_pb2.LedgerRecord()
            rec.ParseFromString(raw)
            e = rec.entry
            out.append(
                LedgerEntry(
                    e.child, e.label, e.bytes, e.tokens, CloseReason(e.reason), e.closed_unix_ms
                )
            )
        out.reverse()
        return out[:limit]

    def tree(self, root: str = "") -> list[SessionView]:
        with self._lock:
            if root:
                if root not in self._sessions:
                    raise NotFound(f"session {root!r} not found")
                tops = [root]
            else:
                tops = sorted(
                    s.id
                    for s in self._sessions.values()
                    if not s.parent or s.parent not in self._sessions
                )
            order: list[tuple[str, int]] = []
            stack = [(t, 0) for t in reversed(tops)]
            while stack:
                sid, depth = stack.pop()
                order.append((sid, depth))
                stack.extend(
                    (c, depth + 1) for c in sorted(self._sessions[sid].children, reverse=True)
                )
        return [
            SessionView(self._sessions[sid], self.usage(sid), depth)
            for sid, depth in order
            if sid in self._sessions
        ]

    def heartbeat(self, session: str) -> int:
        s = self.require_open(session)
        s.heartbeat_ms = _now_ms()
        return s.heartbeat_ms + s.lease_s * 1000 if s.lease_s else 0

    # -- usage --------------------------------------------------------------------
    def object_usage(self, session: str) -> dict[Tier, tuple[int, int]]:
        """Bytes and objects per tier of the objects ``session`` owns (copies count
        on every tier they occupy, as in the tier statistics)."""
        out: dict[Tier, list[int]] = {}
        catalog = self.store.catalog
        with self.store.lock:
            for key in catalog.session_keys(session):
                entry = catalog.find(key)
                if entry is None:
                    continue
                for tier in _copies(entry):
                    acc = out.setdefault(tier, [0, 0])
                    acc[0] += entry.size
                    acc[1] += 1
        return {t: (v[0], v[1]) for t, v in out.items()}

    def usage(self, session: str) -> dict[Tier, tuple[int, int]]:
        total = dict(self.object_usage(session))
        for hook in self.cleanup.hooks():
            for tier, (nbytes, items) in hook.session_usage(session).by_tier.items():
                b, n = total.get(tier, (0, 0))
                total[tier] = (b + nbytes, n + items)
        return total

    def check_quota(
        self, session: Session, charges: dict[Tier, int], credit: dict[Tier, int]
    ) -> None:
        """Raise CapacityExceeded if adding ``charges`` (less ``credit``, a value being
        replaced) would take ``session`` past a quota. Called with the store lock held."""
        wanted = {t: n for t, n in charges.items() if session.quotas.get(t)}
        if not wanted:
            return
        used = self.usage(session.id)
        for tier, nbytes in wanted.items():
            quota = session.quotas[tier]
            after = used.get(tier, (0, 0))[0] - credit.get(tier, 0) + nbytes
            if after > quota:
                self.metrics.session_quota_refusals.labels(tier.name).inc()
                raise CapacityExceeded(
                    f"session {session.id!r} ({session.label or 'no label'}) would hold "
                    f"{after} bytes on {tier.name}; its {tier.name} quota is {quota} bytes. "
                    "Free some of its objects, close its children, or open it with a larger quota"
                )

    # -- close --------------------------------------------------------------------
    def close(
        self,
        session: str,
        result: bytes = b"",
        result_tokens: int = 0,
        reason: CloseReason = CloseReason.CLIENT,
        caller: str = "",
    ) -> CloseReport:
        limit = self.config.max_result_bytes
        if len(result) > limit:
            raise CapacityExceeded(
                f"result is {len(result)} bytes; the limit is {limit} "
                "(agent.sessions.max_result_bytes): hand the parent one line, not the work"
            )
        deadline = time.monotonic() + _CLOSE_WAIT_S
        with self._lock:
            while True:
                top = self._sessions.get(session)
                if top is None:
                    raise NotFound(f"session {session!r} not found")
                if caller and caller != session and not self.is_ancestor(caller, session):
                    raise PermissionDenied(
                        f"session {caller!r} may close only itself and its descendants"
                    )
                if session in self._claimed:
                    raise FailedPrecondition(f"session {session!r} is being closed already")
                subtree = self._post_order(session)
                busy = [s.id for s in subtree if s.id in self._claimed]
                if not busy:
                    break
                # a close of a descendant is running: wait for it to end, then
                # take in what it left (nothing, or a CLOSING session it failed on)
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    raise Unavailable(
                        f"session {busy[0]!r} under {session!r} is being closed by another "
                        f"call that has not ended within {_CLOSE_WAIT_S:.0f} s; retry"
                    )
                self._unclaimed.wait(left_s)
            batch = self.rocks.batch()
            for s in subtree:
                if s.state == SessionState.CLOSING:  # a failed close: its reason stands
                    continue
                s.state = SessionState.CLOSING
                s.close_reason = reason if s is top else CloseReason.PARENT_CLOSED
                batch.put("sessions", s.id.encode(), _to_record(s).SerializeToString())
            batch.commit(sync=True)
            self._claimed.update(s.id for s in subtree)
        return self._finish_claimed(top, subtree, result, result_tokens)

    def _finish_claimed(
        self, top: Session, subtree: list[Session], result: bytes, result_tokens: int
    ) -> CloseReport:
        """``_finish_close`` of a claimed subtree; the claim ends either way, and
        on failure the sessions stay CLOSING for a later close to resume."""
        try:
            return self._finish_close(top, subtree, result, result_tokens)
        finally:
            with self._lock:
                self._claimed.difference_update(s.id for s in subtree)
                self._unclaimed.notify_all()

    def _post_order(self, session: str) -> list[Session]:
        out: list[Session] = []
        stack = [(session, False)]
        while stack:
            sid, expanded = stack.pop()
            s = self._sessions[sid]
            if expanded:
                out.append(s)
                continue
            stack.append((sid, True))
            stack.extend((c, False) for c in sorted(s.children) if c in self._sessions)
        return out

    def _finish_close(
        self, top: Session, subtree: list[Session], result: bytes, result_tokens: int
    ) -> CloseReport:
        report = CloseReport(sessions_closed=len(subtree))
        freed = Freed()
        for s in subtree:  # children first
            for hook in self.cleanup.hooks():
                part = hook.drop_session(s.id)
                freed.add(part)
                report.records_freed += part.items
        objects = self._free_objects([s.id for s in subtree])
        report.objects_freed = objects.items
        freed.add(objects)
        report.freed = dict(freed.bytes_by_tier)
        reason = top.close_reason or CloseReason.CLIENT
        parent = self._sessions.get(top.parent) if top.parent else None
        batch = self.rocks.batch()
        if parent is not None and parent.state == SessionState.OPEN:
            payload = result if reason == CloseReason.CLIENT else _auto_result(top, reason)
            payload = payload[: self.config.max_result_bytes]
            if top.result_record_id is None:  # else an earlier, failed close handed it over
                rid = 0
                if payload and self.result_sink is not None:
                    rid = self.result_sink.append_result(parent.id, top.id, payload)
                top.result_record_id = rid
            report.result_record_id = top.result_record_id
            with self._lock:
                if top.ledger_slot is None:
                    entry = agent_pb2.LedgerRecord(
                        entry=sessions_pb2.LedgerEntry(
                            child=top.id,
                            label=top.label,
                            bytes=len(payload),
                            tokens=result_tokens,
                            reason=int(reason),  # type: ignore[arg-type]
                            closed_unix_ms=_now_ms(),
                        )
                    )
                    top.ledger_slot = (parent.children_closed, entry.SerializeToString())
                    parent.children_closed += 1
                    parent.ledger_bytes += len(payload)
                    parent.ledger_tokens += result_tokens
                    self.metrics.session_ledger_bytes.inc(len(payload))
                seq, entry_bytes = top.ledger_slot
                batch.put(
                    "session_ledger", parent.id.encode() + b"\x00" + _SEQ.pack(seq), entry_bytes
                )
                batch.put("sessions", parent.id.encode(), _to_record(parent).SerializeToString())
        for s in subtree:
            batch.delete("sessions", s.id.encode())
            for key, _ in self.rocks.scan("session_ledger", s.id.encode() + b"\x00"):
                batch.delete("session_ledger", key)
        batch.commit(sync=True)
        with self._lock:
            for s in subtree:
                self._sessions.pop(s.id, None)
                self._closed[s.id] = None
                if s.parent in self._sessions:
                    self._sessions[s.parent].children.discard(s.id)
                self.metrics.sessions_closed.labels((s.close_reason or reason).name).inc()
            while len(self._closed) > _CLOSED_MEMORY:
                self._closed.popitem(last=False)
        for tier, nbytes in report.freed.items():
            self.metrics.session_reclaimed_bytes.labels(tier.name).inc(nbytes)
        if self.result_sink is not None and parent is not None:
            self.result_sink.request_flush("session_close")
        return report

    def _free_objects(self, sessions: list[str]) -> Freed:
        """Delete every object the sessions own, on every tier, in one catalog batch."""
        catalog = self.store.catalog
        freed = Freed()
        with self.store.lock:
            victims: list[tuple[bytes, Entry]] = []
            stale = self.rocks.batch()
            for sid in sessions:
                for key in catalog.session_keys(sid):
                    entry = catalog.find(key)
                    if entry is None:  # index entry of an object already gone
                        stale.delete("by_session", sid.encode() + b"\x00" + key)
                        continue
                    victims.append((key, entry))
                    for tier in _copies(entry):
                        freed.bytes_by_tier[tier] = freed.bytes_by_tier.get(tier, 0) + entry.size
            stale.commit(sync=False)
            self.store.remove_many_locked(victims)
            freed.items = len(victims)
        self.rocks.flush()
        return freed

    # -- expiry and leases -------------------------------------------------------
    def reap_due(self, now_ms: int | None = None) -> int:
        """Close sessions past their TTL or lease; returns how many were closed."""
        now = _now_ms() if now_ms is None else now_ms
        due: list[tuple[str, CloseReason]] = []
        with self._lock:
            for s in self._sessions.values():
                if s.state != SessionState.OPEN:
                    # a close that failed: resumed here, from its topmost session
                    parent = self._sessions.get(s.parent) if s.parent else None
                    stranded = s.id not in self._claimed
                    if stranded and (parent is None or parent.state == SessionState.OPEN):
                        due.append((s.id, s.close_reason or CloseReason.CLIENT))
                    continue
                if s.expires_ms and now >= s.expires_ms:
                    due.append((s.id, CloseReason.EXPIRED))
                elif s.lease_s and now - s.heartbeat_ms >= s.lease_s * 1000:
                    due.append((s.id, CloseReason.ABANDONED))
        closed = 0
        for sid, reason in due:
            try:
                self.close(sid, reason=reason)
                closed += 1
            except (NotFound, FailedPrecondition):
                continue  # closed meanwhile, e.g. with its parent
            except Exception:  # one session's failed close must not hold back the rest
                log.exception("closing session %s (%s) failed; retried next pass", sid, reason.name)
        return closed

    # -- start-up -------------------------------------------------------------------
    def load(self) -> None:
        """Read the session records (call before the scratchpad recovers)."""
        now = _now_ms()
        with self._lock:
            for _key, raw in self.rocks.scan("sessions"):
                rec = agent_pb2.SessionRecord()
                rec.ParseFromString(raw)
                s = _from_record(rec)
                s.heartbeat_ms = now
                self._sessions[s.id] = s
            for s in self._sessions.values():
                parent = self._sessions.get(s.parent) if s.parent else None
                if parent is not None:
                    parent.children.add(s.id)

    def finish_interrupted(self) -> int:
        """Finish closes a crash interrupted, and close orphans; returns sessions closed."""
        with self._lock:
            pending = [
                s
                for s in self._sessions.values()
                if s.state == SessionState.CLOSING or (s.parent and s.parent not in self._sessions)
            ]
        closed = 0
        for s in pending:
            if s.id not in self._sessions:
                continue
            with self._lock:
                subtree = self._post_order(s.id)
                for member in subtree:
                    member.state = SessionState.CLOSING
                    member.close_reason = member.close_reason or CloseReason.PARENT_CLOSED
                self._claimed.update(member.id for member in subtree)
            added = self._result_already_added(s)
            if added is not None:  # the crash came after the result record
                s.result_record_id = added.id
            self._finish_claimed(s, subtree, added.payload if added is not None else b"", 0)
            closed += len(subtree)
        if closed:
            log.info("finished closing %d sessions interrupted by a crash", closed)
        return closed

    def _result_already_added(self, top: Session) -> Record | None:
        """The result record an interrupted close of ``top`` added to its parent's
        scratchpad before the crash, if any (call after the scratchpad recovered).

        Its tags name the child (``child_result_tag``, a tag only the daemon
        writes: client appends of it are refused, so no record the parent or a
        tool wrote is taken for the child's result); records of an earlier
        session with the same id are older than ``top`` (it was closed before
        ``top`` was opened), so only records written since ``top.created_ms``
        count."""
        parent = self._sessions.get(top.parent) if top.parent else None
        if parent is None or parent.state != SessionState.OPEN or self.result_sink is None:
            return None
        # imported here: the scratchpad service imports this module
        from tiermem.server.scratch.records import RecordKind, child_result_tag
        from tiermem.server.scratch.service import ReplayFilter

        flt = ReplayFilter(
            since_ms=top.created_ms,
            kinds=frozenset({int(RecordKind.RESULT)}),
            tags=frozenset({child_result_tag(top.id)}),
        )
        found = self.result_sink.replay(parent.id, flt)
        return found[-1] if found else None

    def open_count(self) -> int:
        return len(self._sessions)


def _copies(entry: Entry) -> list[Tier]:
    tiers = [entry.tier]
    if entry.persisted and entry.tier != Tier.SSD:
        tiers.append(Tier.SSD)
    return tiers


def _auto_result(session: Session, reason: CloseReason) -> bytes:
    return f"[{reason.name.lower()}] session {session.id} ({session.label}) closed".encode()


def _to_record(s: Session) -> agent_pb2.SessionRecord:
    return agent_pb2.SessionRecord(
        id=s.id,
        parent=s.parent,
        label=s.label,
        namespace=s.namespace,
        state=int(s.state),  # type: ignore[arg-type]
        quotas=[
            sessions_pb2.TierQuota(tier=int(t), bytes=q)  # type: ignore[arg-type]
            for t, q in sorted(s.quotas.items())
        ],
        created_unix_ms=s.created_ms,
        expires_unix_ms=s.expires_ms,
        lease_s=s.lease_s,
        grants=[
            sessions_pb2.Grant(namespace=g.namespace, kind=int(g.kind), key_prefix=g.key_prefix)  # type: ignore[arg-type]
            for g in s.grants
        ],
        ledger_bytes=s.ledger_bytes,
        ledger_tokens=s.ledger_tokens,
        children_closed=s.children_closed,
        close_reason=int(s.close_reason or 0),  # type: ignore[arg-type]
    )


def _from_record(rec: agent_pb2.SessionRecord) -> Session:
    if int(rec.state) not in (int(SessionState.OPEN), int(SessionState.CLOSING)):
        raise InvariantViolation(f"session record {rec.id!r} has state {rec.state}")
    return Session(
        id=rec.id,
        parent=rec.parent,
        label=rec.label,
        namespace=rec.namespace,
        state=SessionState(rec.state),
        quotas={Tier(q.tier): int(q.bytes) for q in rec.quotas},
        created_ms=int(rec.created_unix_ms),
        expires_ms=int(rec.expires_unix_ms),
        lease_s=int(rec.lease_s),
        grants=[Grant(g.namespace, Kind(g.kind), g.key_prefix) for g in rec.grants],
        ledger_bytes=int(rec.ledger_bytes),
        ledger_tokens=int(rec.ledger_tokens),
        children_closed=int(rec.children_closed),
        close_reason=CloseReason(rec.close_reason) if rec.close_reason else None,
    )


__all__ = ["ResultSink", "SessionService"]
