"""The scratchpad service: append, replay, flush and query agent records.

Write-back (``agent.scratch.mode = "write_back"``, the default)::

  append ──▶ DRAM buffer ──(LOGGED/SYNC: frame written to the group-commit log
     │        │               before the ack; SYNC waits for the group fsync, or
     │        │               for a flush if that fsync fails)
     │        └─ BUFFERED: written to the log by the log thread within
     │           buffered_window_ms (a crash loses at most that window)
     ▼
  flush (records/bytes threshold, key-node record, client, session close,
         timer, recovery, shutdown, a SYNC append whose fsync failed):
     snapshot the buffer, rotate the log ─▶ dedup + merge ─▶ embed once
     ─▶ ONE RocksDB write batch (per session: one compressed batch value;
        keyed records overwrite their entry; the flushed-up-to id) synced
     ─▶ ONE memory-index update ─▶ unlink the rotated log files

Write-through (``"write_through"``): each record is embedded, written in its
own synced RocksDB batch and added to the index on its own, in the caller's
thread: the baseline that write-back is measured against.

Records are readable (Replay) from the moment they are acknowledged; the
semantic Query sees flushed records. An append whose log write fails appends
nothing; a flush whose commit fails leaves its records buffered. Closing a
session drops its buffered and stored records and their index entries
(``drop_session``).
"""

from __future__ import annotations

import errno
import logging
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tiermem.server.config import ScratchConfig
from tiermem.server.embedding.base import Embedder
from tiermem.server.errors import CapacityExceeded, FailedPrecondition, Unavailable
from tiermem.server.metrics import Metrics
from tiermem.server.model import Tier
from tiermem.server.scratch.batching import BatchPlan, plan_batch
from tiermem.server.scratch.log import GroupCommitLog, LogSyncFailed, damage_name, frame
from tiermem.server.scratch.memory_index import MemoryIndex
from tiermem.server.scratch.records import (
    RECORD_OVERHEAD_BYTES,
    Record,
    RecordDurability,
    RecordKind,
    batch_count,
    check_client_tags,
    child_result_tag,
    codec_id,
    decode_batch,
    encode_batch,
    from_stored,
    to_stored,
    validate_record,
    vector_of,
)
from tiermem.server.services.damage import DamageLog
from tiermem.server.sessions.cleanup import Freed, Usage
from tiermem.server.sessions.model import SessionState
from tiermem.server.sessions.service import SessionService
from tiermem.server.storage.rocks import RocksStore
from tiermem.server.threadpriority import lower_this_thread

log = logging.getLogger(__name__)

_ID = struct.Struct(">Q")
_FLUSHED_UPTO = b"scratch.flushed_upto"
#: + session: the highest record id assigned when that session's records were
#: dropped (its close). The group-commit log may still hold them, and a new
#: session can reuse the id: recovery skips the log's records of that session
#: up to this id, then forgets these marks once the old logs are gone.
_DROPPED_UPTO = b"scratch.dropped_upto\x00"
CF = "scratch"
#: How long an append waits for room in a full buffer before RESOURCE_EXHAUSTED.
_BACKPRESSURE_WAIT_S = 30.0
_SYNC_WAIT_S = 30.0
#: How often the log thread reports its write or fsync failing, at most.
_LOG_FAILURE_EVERY_S = 10.0


@dataclass(slots=True)
class NewRecord:
    kind: int
    payload: bytes
    key: str = ""
    tags: tuple[str, ...] = ()
    key_node: bool = False
    ts_ms: int = 0
    durability: RecordDurability = RecordDurability.LOGGED


@dataclass(slots=True)
class ReplayFilter:
    since_ms: int = 0
    until_ms: int = 0
    kinds: frozenset[int] = frozenset()
    tags: frozenset[str] = frozenset()
    key: str = ""
    limit: int = 0
    after_id: int = 0

    def matches(self, r: Record) -> bool:
        if r.id <= self.after_id or r.ts_ms < self.since_ms:
            return False
        if self.until_ms and r.ts_ms >= self.until_ms:
            return False
        if self.kinds and r.kind not in self.kinds:
            return False
        if self.tags and self.tags.isdisjoint(r.tags):
            return False
        return not self.key or r.key == self.key


@dataclass(slots=True)
class FlushReport:
    records: int = 0
    deduplicated: int = 0
    merged: int = 0
    stored_bytes: int = 0


@dataclass(slots=True)
class _SessionScratch:
    buffered_records: int = 0
    buffered_bytes: int = 0
    stored_records: int = 0
    stored_bytes: int = 0


@dataclass(slots=True)
class ScratchStats:
    buffered_records: int = 0
    buffered_bytes: int = 0
    unlogged_records: int = 0
    stored_records: int = 0
    stored_bytes: int = 0
    appended_records: int = 0
    flushes: int = 0
    write_batches: int = 0
    index_updates: int = 0
    deduplicated: int = 0
    merged: int = 0
    flushes_by_reason: dict[str, int] = field(default_factory=dict)
    embedder: str = ""
    mode: str = ""
    index_bytes: int = 0


@dataclass(slots=True)
class _Prepared:
    """A flush's records planned and embedded, not yet committed."""

    plan: BatchPlan
    vectors: np.ndarray[Any, Any]  # of plan.records
    started: float  # perf_counter at the start of the flush


@dataclass(slots=True)
class _Written:
    """A batch committed to RocksDB, with what the index and the counts still need."""

    records: list[Record]  # every record the batch covers (dropped duplicates too)
    plan: BatchPlan
    vectors: np.ndarray[Any, Any]  # of plan.records
    payloads: list[Mapping[str, Any]]  # of plan.records
    replaced_ids: list[int]  # index entries of keyed records overwritten
    stored: dict[str, list[int]]  # session -> [records, bytes] added
    keyed_updates: list[tuple[tuple[str, str], int, int]]  # (session, key), id, bytes
    started: float  # perf_counter at the start of the flush


def _blob_key(session: str, first_id: int) -> bytes:
    return b"b" + session.encode() + b"\x00" + _ID.pack(first_id)


def _keyed_key(session: str, key: str) -> bytes:
    return b"k" + session.encode() + b"\x00" + key.encode()


def _session_of(raw_key: bytes) -> str:
    return raw_key[1:].split(b"\x00", 1)[0].decode()


class ScratchService:
    name = "scratch"  # as a session-cleanup hook

    def __init__(
        self,
        config: ScratchConfig,
        rocks: RocksStore,
        log_dir: Path,
        sessions: SessionService,
        embedder: Embedder,
        index: MemoryIndex,
        metrics: Metrics,
        damage: DamageLog | None = None,
    ) -> None:
        """``damage``: where damaged log files are registered (default: the
        session service's store's register, the daemon's one)."""
        self.config = config
        self.rocks = rocks
        self.sessions = sessions
        self.embedder = embedder
        self.index = index
        self.metrics = metrics
        self.damage = damage if damage is not None else sessions.store.damage
        self.write_back = config.mode == "write_back"
        self._codec = codec_id(config.compression)
        self._log = GroupCommitLog(log_dir)
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()
        #: Held while a batch is committed and indexed (after its records were
        #: embedded, which can take a MiniLM forward pass of hundreds of ms) and
        #: by ``drop_session``: a session's close waits for a commit, never for
        #: the embedder. Lock order: ``_flush_lock``, ``_commit_lock``, ``_lock``.
        self._commit_lock = threading.Lock()
        #: Sessions dropped while the flush in progress embedded its snapshot:
        #: session -> the last record id dropped (its commit leaves them out).
        #: Guarded by ``_commit_lock``; emptied when that flush ends.
        self._dropped_in_flight: dict[str, int] = {}
        self._buffer: list[Record] = []
        self._unlogged: list[Record] = []
        self._flushing: list[Record] = []
        self._buffer_bytes = 0
        self._buffer_since = 0.0  # monotonic time the oldest buffered record arrived
        self._per_session: dict[str, _SessionScratch] = {}
        self._keyed: dict[tuple[str, str], tuple[int, int]] = {}  # -> (id, stored bytes)
        self._next_id = 1
        self._flushed_upto = 0
        self._stats = ScratchStats(embedder=embedder.name, mode=config.mode)
        self._flush_reason: str | None = None
        self._flush_wake = threading.Event()
        self._log_wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        for name, target in (("scratch-log", self._log_loop), ("scratch-flush", self._flush_loop)):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Flush what is buffered (reason "shutdown"), stop the threads, close the log."""
        self._stop.set()
        self._flush_wake.set()
        self._log_wake.set()
        for t in self._threads:
            t.join(timeout=30)
        self.flush("shutdown")
        try:
            self._log.close()
        except OSError as exc:  # the shutdown flush committed every logged record
            log.warning("scratchpad log: the last fsync at shutdown failed (%s)", exc)

    # -- append ------------------------------------------------------------------------
    def append(self, session: str, records: list[NewRecord], caller: str = "") -> tuple[int, int]:
        """Append records to ``session``; returns (first id, count). Acknowledged
        records are as durable as their ``durability`` says (module docstring)."""
        if not records:
            return 0, 0
        self.sessions.check_scratch_write(caller, session)
        opened = self.sessions.require_open(session)
        cfg = self.config
        for r in records:
            validate_record(r.kind, r.key, r.payload, r.tags, cfg.max_record_bytes, cfg.max_tags)
            check_client_tags(r.tags)
        # records count toward the session's quotas as ``session_usage`` counts
        # them: buffered in DRAM, then stored on SSD with an index entry in DRAM
        # (charged here at the larger of the two)
        nbytes = sum(RECORD_OVERHEAD_BYTES + len(r.payload) + len(r.key) for r in records)
        index = len(records) * self._index_entry_bytes()
        charges = {Tier.DRAM: max(nbytes, index), Tier.SSD: nbytes}
        self.sessions.check_quota(opened, charges, {})
        self.sessions.touch(session)
        return self._append_checked(session, records)

    def append_result(self, parent: str, child: str, payload: bytes) -> int:
        """A closing child's result (the session service's ResultSink)."""
        first, _ = self._append_checked(
            parent,
            [
                NewRecord(
                    RecordKind.RESULT,
                    payload,
                    tags=("result", child_result_tag(child)),
                    durability=RecordDurability.LOGGED,
                )
            ],
        )
        return first

    def _append_checked(self, session: str, records: list[NewRecord]) -> tuple[int, int]:
        now = int(time.time() * 1000)
        if not self.write_back:
            return self._append_write_through(session, records, now)
        with self._lock:
            self._wait_for_room()
            self._still_open(session)
            first = self._next_id
            # The ids are taken even if the log write below fails: an id never
            # names two records, so a failed append leaves a gap.
            self._next_id += len(records)
            batch = [
                Record(
                    id=first + i,
                    session=session,
                    ts_ms=r.ts_ms or now,
                    kind=int(r.kind),
                    key=r.key,
                    payload=r.payload,
                    tags=tuple(r.tags),
                    key_node=r.key_node,
                    durability=r.durability,
                )
                for i, r in enumerate(records)
            ]
            logged = [to_stored(r) for r in batch if r.durability != RecordDurability.BUFFERED]
            sync = any(r.durability == RecordDurability.SYNC for r in batch)
            # The log frame is written before the records enter the buffer, under
            # the same lock: an append whose write fails (the log cuts a partial
            # frame off) leaves nothing a reader or a flush could see.
            try:
                position = self._log.write(frame(logged)) if logged else None
            except OSError as exc:
                raise _log_write_error(exc, len(records)) from exc
            if not self._buffer:
                self._buffer_since = time.monotonic()
            self._buffer.extend(batch)
            st = self._per_session.setdefault(session, _SessionScratch())
            for rec in batch:
                size = rec.size
                self._buffer_bytes += size
                st.buffered_records += 1
                st.buffered_bytes += size
                if rec.durability == RecordDurability.BUFFERED:
                    self._unlogged.append(rec)
            key_node = any(r.key_node for r in batch)
            self._stats.appended_records += len(records)
            reason = None
            if key_node:
                reason = "key_node"
            elif len(self._buffer) >= self.config.flush_records:
                reason = "records"
            elif self._buffer_bytes >= self.config.flush_bytes:
                reason = "bytes"
        self.metrics.scratch_appended.inc(len(records))
        if reason is not None:
            self.request_flush(reason)
        if sync and position is not None:
            self._log_wake.set()
            try:
                synced = self._log.wait_synced(*position, _SYNC_WAIT_S)
                why = f"the scratchpad log did not fsync within {_SYNC_WAIT_S:.0f} s"
            except LogSyncFailed as exc:
                synced, why = False, str(exc)
            if not synced:
                self._sync_by_flush(first, len(records), why)
        return first, len(records)

    def _sync_by_flush(self, first: int, count: int, why: str) -> None:
        """A SYNC append whose log frame was not fsynced (``why``): its records
        are buffered and readable already, so they are made durable by a flush
        (a synced RocksDB batch) instead, which keeps the SYNC promise. If that
        fails too, the client is told they were appended: an error that invites
        a retry (UNAVAILABLE, which the client retries on its own) would store
        them twice. They stay buffered, and the next flush that succeeds writes
        them."""
        log.warning("%s; flushing to make a SYNC append durable", why)
        try:
            self.flush("sync_fallback")
        except Exception as exc:
            ids = f"{first}" if count == 1 else f"{first}-{first + count - 1}"
            raise FailedPrecondition(
                f"{why}, and the flush that would have made the records durable instead "
                f"failed too ({exc}): the {count} records (ids {ids}) were appended and are "
                "readable, and the next flush that succeeds writes them, but until then they "
                "may not survive a power loss. Do not append them again"
            ) from exc

    def _still_open(self, session: str) -> None:
        """Re-check under the lock: a close marks the session CLOSING before it
        drops the session's records under this lock, so nothing slips in between."""
        s = self.sessions.get(session)
        if s is None or s.state != SessionState.OPEN:
            raise FailedPrecondition(f"session {session!r} is closing or closed")

    def _wait_for_room(self) -> None:
        """Backpressure (call with the lock held): wait while the buffer is full."""
        deadline = time.monotonic() + _BACKPRESSURE_WAIT_S
        while self._buffer_bytes >= self.config.max_buffer_bytes:
            self._flush_reason = self._flush_reason or "bytes"
            self._flush_wake.set()
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                raise CapacityExceeded(
                    f"the scratchpad buffer holds {self._buffer_bytes} bytes "
                    f"(agent.scratch.max_buffer_bytes = {self.config.max_buffer_bytes}) and "
                    "flushing did not make room in time; retry later"
                )
            self._space.wait(min(left, 0.5))

    def _append_write_through(
        self, session: str, records: list[NewRecord], now: int
    ) -> tuple[int, int]:
        # The commit lock is held from the check that the session is open to the
        # commit: a close drops the session's records under it, so it runs
        # before the check (refused) or after the commit (dropped); in between,
        # a record was stored for a closed session and never freed.
        with self._flush_lock, self._commit_lock:
            with self._lock:
                self._still_open(session)
                first = self._next_id
                batch = [
                    Record(
                        id=first + i,
                        session=session,
                        ts_ms=r.ts_ms or now,
                        kind=int(r.kind),
                        key=r.key,
                        payload=r.payload,
                        tags=tuple(r.tags),
                        key_node=r.key_node,
                        durability=RecordDurability.SYNC,
                    )
                    for i, r in enumerate(records)
                ]
                self._next_id += len(records)
                self._stats.appended_records += len(records)
                self._per_session.setdefault(session, _SessionScratch())
            for rec in batch:
                self._commit([rec], "write_through")
        self.metrics.scratch_appended.inc(len(records))
        return first, len(records)

    # -- flush -------------------------------------------------------------------------
    def buffered(self) -> tuple[int, int]:
        """(records, payload bytes) waiting in the write-back buffer."""
        return len(self._buffer), self._buffer_bytes

    def request_flush(self, reason: str) -> None:
        """Ask the flusher thread for a flush (asynchronous)."""
        if reason == "session_close" and not self.config.flush_on_session_close:
            return
        with self._lock:
            if self._flush_reason is None:
                self._flush_reason = reason
        self._flush_wake.set()

    def flush(self, reason: str = "client") -> FlushReport:
        """Write everything buffered now; returns what was written."""
        if not self.write_back:
            return FlushReport()
        with self._flush_lock:
            with self._lock:
                self._flush_reason = None
                if not self._buffer:
                    return FlushReport()
                if self._unlogged:  # keep every snapshot record in the rotated log
                    self._log.write(frame([to_stored(r) for r in self._unlogged]))
                    self._unlogged = []
                # rotate before taking the buffer: a rotation that fails (the next
                # file cannot be opened) must leave the records where readers and
                # the next flush find them
                self._log.rotate()
                current_log = self._log.current_seq
                snapshot, self._buffer, self._buffer_bytes = self._buffer, [], 0
                self._flushing = snapshot
                self._space.notify_all()
            try:
                # embedded without the commit lock: a close meanwhile drops its
                # session's records from this batch instead of waiting
                prepared = self._prepare(snapshot)
            except BaseException:
                with self._commit_lock:
                    self._put_back(snapshot)
                raise
            with self._commit_lock:
                try:
                    written = self._write(snapshot, prepared)
                except BaseException:
                    self._put_back(snapshot)
                    raise
                with self._lock:  # committed: replay finds them in RocksDB now
                    self._flushing = []
                    self._dropped_in_flight = {}
                report = self._account(written, reason)
            self._log.remove_before(current_log)
            return report

    def _put_back(self, snapshot: list[Record]) -> None:
        """A flush that committed nothing: its records go back in front of the
        buffer (their ids are below every later append's) in the same step that
        takes them off the flushing list, so a reader sees them throughout; the
        rotated log files keep them until a flush commits them. The timer
        retries after flush_interval_s. Records of sessions closed meanwhile
        stay dropped. Commit lock held."""
        dropped = self._dropped_in_flight
        back = [r for r in snapshot if r.id > dropped.get(r.session, 0)]
        with self._lock:
            self._flushing = []
            self._dropped_in_flight = {}
            self._buffer[:0] = back
            self._buffer_bytes += sum(r.size for r in back)
            self._buffer_since = time.monotonic()

    def _commit(self, records: list[Record], reason: str) -> FlushReport:
        """Dedup/merge, embed, ONE synced RocksDB batch, ONE index update (commit lock held)."""
        return self._account(self._write(records, self._prepare(records)), reason)

    def _prepare(self, records: list[Record]) -> _Prepared:
        """Dedup/merge and embed (the slow part of a flush; no lock of ours held)."""
        started = time.perf_counter()
        plan = plan_batch(records)
        vectors = (
            self.embedder.embed([r.text() for r in plan.records])
            if plan.records
            else np.zeros((0, self.embedder.dim), np.float32)
        )
        return _Prepared(plan, vectors, started)

    def _write(self, records: list[Record], prepared: _Prepared) -> _Written:
        """ONE synced RocksDB batch of the prepared records, less those of sessions
        dropped since they were prepared (commit lock held). Changes no state of
        the service: when it raises, the records can be written again.
        (If the commit reached RocksDB before it raised, a failed WAL sync, the
        retry overwrites the same keys: a session's batch is keyed by its lowest
        id, which a retry starts with, and keyed records by their key.)"""
        plan, vectors, started = prepared.plan, prepared.vectors, prepared.started
        dropped = self._dropped_in_flight
        if dropped:  # dedup and merges stay within a session: the rest is consistent
            keep = [i for i, r in enumerate(plan.records) if r.id > dropped.get(r.session, 0)]
            plan = replace(plan, records=[plan.records[i] for i in keep])
            vectors = vectors[keep]
        kept = plan.records
        half = vectors.astype(np.float16)
        row_bytes = half.shape[1] * 2
        packed = half.tobytes()
        vec = [packed[i * row_bytes : (i + 1) * row_bytes] for i in range(len(kept))]
        batch = self.rocks.batch()
        groups: dict[str, list[int]] = {}
        payloads: list[Mapping[str, Any]] = []
        replaced_ids: list[int] = []
        stored: dict[str, list[int]] = {}  # session -> [records, bytes]
        keyed_updates: list[tuple[tuple[str, str], int, int]] = []
        for i, r in enumerate(kept):
            if r.key:
                value = encode_batch([to_stored(r, vec[i])], self._codec)
                raw_key = _keyed_key(r.session, r.key)
                batch.put(CF, raw_key, value)
                old = self._keyed.get((r.session, r.key))
                acc = stored.setdefault(r.session, [0, 0])
                if old is not None:
                    replaced_ids.append(old[0])
                    acc[1] -= old[1]
                else:
                    acc[0] += 1
                acc[1] += len(value)
                keyed_updates.append(((r.session, r.key), r.id, len(value)))
                payloads.append(_payload(r, raw_key))
            else:
                groups.setdefault(r.session, []).append(i)
                payloads.append({})  # filled below, once the batch key is known
        for session, idxs in groups.items():
            raw_key = _blob_key(session, kept[idxs[0]].id)
            value = encode_batch([to_stored(kept[i], vec[i]) for i in idxs], self._codec)
            batch.put(CF, raw_key, value)
            acc = stored.setdefault(session, [0, 0])
            acc[0] += len(idxs)
            acc[1] += len(value)
            for i in idxs:
                payloads[i] = _payload(kept[i], raw_key)
        flushed_upto = max([self._flushed_upto, *(r.id for r in records)])
        batch.put("meta", _FLUSHED_UPTO, _ID.pack(flushed_upto))
        batch.commit(sync=True)
        self._flushed_upto = flushed_upto  # only now: a failed commit moved nothing
        return _Written(
            records, plan, vectors, payloads, replaced_ids, stored, keyed_updates, started
        )

    def _account(self, w: _Written, reason: str) -> FlushReport:
        """After a commit: the keyed entries and counts, then ONE index update."""
        plan, kept = w.plan, w.plan.records
        stored_bytes = sum(v[1] for v in w.stored.values())
        with self._lock:
            for key, rid, nbytes in w.keyed_updates:
                self._keyed[key] = (rid, nbytes)
            for r in w.records:
                st = self._per_session.get(r.session)
                if st is not None and st.buffered_records:
                    st.buffered_records -= 1
                    st.buffered_bytes -= r.size
            for session, (n, nbytes) in w.stored.items():
                st = self._per_session.setdefault(session, _SessionScratch())
                st.stored_records += n
                st.stored_bytes += nbytes
            s = self._stats
            s.flushes += 1
            s.write_batches += 1
            s.index_updates += 1 if kept else 0
            s.deduplicated += plan.deduplicated
            s.merged += plan.merged
            s.flushes_by_reason[reason] = s.flushes_by_reason.get(reason, 0) + 1
        if kept:
            ids = np.fromiter((r.id for r in kept), dtype=np.int64, count=len(kept))
            self.index.add_batch(ids, w.vectors, w.payloads)
            if w.replaced_ids:
                self.index.remove(w.replaced_ids)
        m = self.metrics
        m.writeback_flushes.labels(reason).inc()
        m.writeback_flushed_records.inc(len(kept))
        m.scratch_write_batches.inc()
        if kept:
            m.scratch_index_updates.inc()
        m.writeback_deduplicated.inc(plan.deduplicated)
        m.writeback_merged.inc(plan.merged)
        m.writeback_flush_seconds.observe(time.perf_counter() - w.started)
        return FlushReport(len(kept), plan.deduplicated, plan.merged, max(stored_bytes, 0))

    # -- background threads --------------------------------------------------------
    def _log_loop(self) -> None:
        interval_s = min(self.config.buffered_window_ms, self.config.log_fsync_interval_ms) / 1000
        logged_at = -_LOG_FAILURE_EVERY_S  # a failing disk fails every round: log some
        failed = 0
        while not self._stop.is_set():
            self._log_wake.wait(interval_s)
            self._log_wake.clear()
            try:
                self.write_unlogged()
                self._log.sync()
            except Exception:
                failed += 1
                if time.monotonic() - logged_at >= _LOG_FAILURE_EVERY_S:
                    logged_at = time.monotonic()
                    log.exception(
                        "scratchpad log write or fsync failed (%d times since the last report; "
                        "reported at most every %.0f s)", failed, _LOG_FAILURE_EVERY_S,
                    )  # fmt: skip
                    failed = 0

    def write_unlogged(self) -> None:
        """Write BUFFERED records to the log (the log thread does this every window)."""
        with self._lock:
            if self._unlogged:
                self._log.write(frame([to_stored(r) for r in self._unlogged]))
                self._unlogged = []

    def _flush_loop(self) -> None:
        # background work: the embedder's forward passes must not queue the handlers
        lower_this_thread(self.config.flush_thread_nice, "the scratchpad flush thread")
        interval_s = self.config.flush_interval_s
        while not self._stop.is_set():
            self._flush_wake.wait(min(interval_s, 0.25))
            self._flush_wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                reason = self._flush_reason
                due = time.monotonic() - self._buffer_since >= interval_s
                if reason is None and self._buffer and due:
                    reason = "timer"
            if reason is not None:
                try:
                    self.flush(reason)
                except Exception:
                    log.exception("scratchpad flush (%s) failed; records stay buffered", reason)

    # -- read --------------------------------------------------------------------------
    def replay(self, session: str, flt: ReplayFilter, caller: str = "") -> list[Record]:
        """Records of ``session`` matching ``flt`` in id order (buffered ones included)."""
        prefixes = self.sessions.scratch_prefixes(caller, session)
        self.sessions.require_open(session)
        if not caller or caller == session:  # its own reads renew its lease, as writes do
            self.sessions.touch(session)
        # What is buffered is taken before RocksDB is read: a flush that commits
        # between the two reads moves records from the buffer to RocksDB, and
        # read the other way round they were in neither (a record in both is
        # the same record).
        with self._lock:
            pending = [r for r in (*self._flushing, *self._buffer) if r.session == session]
        found: dict[int, Record] = {}
        if flt.key:
            raw = self.rocks.get(CF, _keyed_key(session, flt.key))
            values = [(b"k", raw)] if raw is not None else []
        else:
            prefix = session.encode() + b"\x00"
            values = [(b"b", v) for _, v in self.rocks.scan(CF, b"b" + prefix)]
            values += [(b"k", v) for _, v in self.rocks.scan(CF, b"k" + prefix)]
        for _tag, value in values:
            for msg in decode_batch(value, f"of session {session!r}"):
                r = from_stored(msg)
                found[r.id] = r
        for r in pending:
            found.setdefault(r.id, r)
        latest: dict[str, Record] = {}
        out: list[Record] = []
        for r in sorted(found.values(), key=lambda r: r.id):
            if r.key:
                latest[r.key] = r  # keyed records: only the newest version counts
            else:
                out.append(r)
        out.extend(latest.values())
        out.sort(key=lambda r: r.id)
        result = [
            r for r in out if flt.matches(r) and (prefixes is None or _granted(r.key, prefixes))
        ]
        return result[: flt.limit] if flt.limit else result

    def query(
        self,
        session: str,
        text: str,
        k: int,
        kinds: Iterable[int] = (),
        tags: Iterable[str] = (),
        caller: str = "",
    ) -> list[tuple[Record, float]]:
        """The ``k`` flushed records of ``session`` closest in meaning to ``text``."""
        prefixes = self.sessions.scratch_prefixes(caller, session)
        self.sessions.require_open(session)
        if not caller or caller == session:  # its own reads renew its lease, as writes do
            self.sessions.touch(session)
        k = min(max(k, 1), 1000)
        vector = self.embedder.embed([text])[0]
        flt: dict[str, Any] = {"session": session, "kinds": set(kinds), "tags": set(tags)}
        if prefixes is not None:
            # the grants narrow the search itself: filtering the k nearest of
            # all the session's records afterwards left fewer than k when its
            # private notes were nearer
            flt["key_prefixes"] = tuple(prefixes)
        hits = self.index.search(vector, k, flt)
        values: dict[bytes, dict[int, Record]] = {}
        out: list[tuple[Record, float]] = []
        for hit in hits:
            loc = hit.payload.get("loc")
            if not isinstance(loc, bytes):
                continue
            if loc not in values:
                raw = self.rocks.get(CF, loc)
                values[loc] = (
                    {}
                    if raw is None
                    else {
                        int(m.id): from_stored(m)
                        for m in decode_batch(raw, f"of session {session!r}")
                    }
                )
            rec = values[loc].get(hit.id)
            if rec is None:
                continue
            if prefixes is not None and not _granted(rec.key, prefixes):
                continue  # the index filtered already; the stored record decides
            out.append((rec, hit.score))
            if len(out) >= k:
                break
        return out

    # -- session cleanup hook ------------------------------------------------------------
    def drop_session(self, session: str) -> Freed:
        """Free the session's buffered and stored records and their index entries.
        Waits for a commit in progress, not for a flush's embedding: records of
        the session that flush holds are left out of its commit."""
        with self._commit_lock:
            with self._lock:
                kept = [r for r in self._buffer if r.session != session]
                dropped = [r for r in self._buffer if r.session == session]
                self._buffer = kept
                self._buffer_bytes -= sum(r.size for r in dropped)
                dropped += [r for r in self._flushing if r.session == session]
                self._unlogged = [r for r in self._unlogged if r.session != session]
                st = self._per_session.pop(session, _SessionScratch())
                for key in [k for k in self._keyed if k[0] == session]:
                    del self._keyed[key]
                self._space.notify_all()
                dropped_upto = self._next_id - 1
                if self._flushing:
                    self._dropped_in_flight[session] = dropped_upto
            prefix = session.encode() + b"\x00"
            batch = self.rocks.batch()
            batch.put("meta", _DROPPED_UPTO + session.encode(), _ID.pack(dropped_upto))
            ids: list[int] = []
            for tag in (b"b", b"k"):
                for raw_key, value in self.rocks.scan(CF, tag + prefix):
                    batch.delete(CF, raw_key)
                    ids.extend(int(m.id) for m in decode_batch(value, f"of session {session!r}"))
            batch.commit(sync=False)
            if ids:
                self.index.remove(ids)
        freed_dram = sum(r.size for r in dropped) + len(ids) * self._index_entry_bytes()
        return Freed(
            {Tier.DRAM: freed_dram, Tier.SSD: st.stored_bytes},
            len(dropped) + st.stored_records,
        )

    def session_usage(self, session: str) -> Usage:
        st = self._per_session.get(session)
        if st is None:
            return Usage()
        index = st.stored_records * self._index_entry_bytes()
        return Usage(
            {
                Tier.DRAM: (st.buffered_bytes + index, st.buffered_records),
                Tier.SSD: (st.stored_bytes, st.stored_records),
            }
        )

    def _index_entry_bytes(self) -> int:
        return self.embedder.dim * 4 + 8 + 240

    # -- stats -----------------------------------------------------------------------------
    def stats(self) -> ScratchStats:
        with self._lock:
            s = self._stats
            return ScratchStats(
                buffered_records=len(self._buffer) + len(self._flushing),
                buffered_bytes=self._buffer_bytes + sum(r.size for r in self._flushing),
                unlogged_records=len(self._unlogged),
                stored_records=sum(v.stored_records for v in self._per_session.values()),
                stored_bytes=sum(v.stored_bytes for v in self._per_session.values()),
                appended_records=s.appended_records,
                flushes=s.flushes,
                write_batches=s.write_batches,
                index_updates=s.index_updates,
                deduplicated=s.deduplicated,
                merged=s.merged,
                flushes_by_reason=dict(s.flushes_by_reason),
                embedder=s.embedder,
                mode=s.mode,
                index_bytes=self.index.size_bytes(),
            )

    # -- start-up --------------------------------------------------------------------------
    def recover(self, known_sessions: set[str], open_sessions: set[str]) -> int:
        """Load stored records into the index, replay the log into the buffer, and
        flush it. Records of sessions that are gone are deleted. Returns the
        records recovered from the log."""
        raw = self.rocks.get("meta", _FLUSHED_UPTO)
        self._flushed_upto = _ID.unpack(raw)[0] if raw else 0
        top = self._flushed_upto
        orphans = self.rocks.batch()
        ids: list[int] = []
        vectors: list[np.ndarray[Any, Any]] = []
        payloads: list[Mapping[str, Any]] = []
        for raw_key, value in self.rocks.scan(CF):
            session = _session_of(raw_key)
            if session not in known_sessions:
                orphans.delete(CF, raw_key)
                continue
            st = self._per_session.setdefault(session, _SessionScratch())
            st.stored_records += batch_count(value)
            st.stored_bytes += len(value)
            for msg in decode_batch(value, f"of session {session!r}"):
                r = from_stored(msg)
                top = max(top, r.id)
                if raw_key[:1] == b"k":
                    self._keyed[(session, r.key)] = (r.id, len(value))
                vec = vector_of(msg)
                if vec is not None and len(vec) == self.embedder.dim:
                    ids.append(r.id)
                    vectors.append(vec)
                    payloads.append(_payload(r, raw_key))
        orphans.commit(sync=True)
        if ids:
            self.index.add_batch(np.asarray(ids, np.int64), np.stack(vectors), payloads)
        dropped = {
            raw_key[len(_DROPPED_UPTO) :].decode(): _ID.unpack(value)[0]
            for raw_key, value in self.rocks.scan("meta", _DROPPED_UPTO)
        }
        replayed = 0
        old_logs = self._log.existing()
        damaged: dict[Path, list[str]] = {}
        for seq, path in old_logs:
            if seq >= self._log.current_seq:
                continue
            found = damaged.setdefault(path, [])
            for msg in GroupCommitLog.replay(path, found):
                top = max(top, int(msg.id))
                if msg.id <= self._flushed_upto or msg.session not in open_sessions:
                    continue
                if msg.id <= dropped.get(msg.session, 0):  # dropped by a close
                    continue
                r = from_stored(msg)
                r.flushed = False
                self._buffer.append(r)
                self._buffer_bytes += r.size
                st = self._per_session.setdefault(r.session, _SessionScratch())
                st.buffered_records += 1
                st.buffered_bytes += r.size
                replayed += 1
        self._buffer.sort(key=lambda r: r.id)
        self._next_id = top + 1
        self._keep_damaged_logs({path: found for path, found in damaged.items() if found})
        if self._buffer:
            self._buffer_since = time.monotonic()
            self.flush("recovery")
        self._log.remove_before(self._log.current_seq)
        if dropped:  # the logs they were for are gone
            forget = self.rocks.batch()
            for session in dropped:
                forget.delete("meta", _DROPPED_UPTO + session.encode())
            forget.commit(sync=False)
        if replayed:
            log.info("scratchpad: %d logged records recovered and flushed", replayed)
        return replayed

    def _keep_damaged_logs(self, damaged: dict[Path, list[str]]) -> None:
        """Register log files with damaged frames and keep them aside (before the
        recovery flush removes them); files kept at an earlier start are
        registered again, until an operator deletes them."""
        for path, found in damaged.items():
            kept = self._log.keep_aside(path)
            self.damage.add_named(
                damage_name(kept), "scratch_log",
                f"scratchpad log {path.name}: {'; '.join(found)}; the records of the frames "
                f"that checked out are recovered; the file is kept as {kept.name}",
            )  # fmt: skip
        for kept in self._log.kept_aside():
            self.damage.add_named(
                damage_name(kept), "scratch_log",
                f"scratchpad log {kept.name} was kept aside at an earlier start (a damaged "
                f"frame; acknowledged records in it may be lost): delete it once inspected",
            )  # fmt: skip


def _log_write_error(exc: OSError, count: int) -> CapacityExceeded | Unavailable:
    """What the client of an append whose log write failed is told: none of its
    ``count`` records was appended, so a retry appends them once."""
    what = (
        f"the scratchpad log write failed ({exc.strerror or exc}); none of the {count} "
        "records was appended"
    )
    if exc.errno == errno.ENOSPC:
        return CapacityExceeded(f"{what}: the disk is full. Free space, then retry")
    return Unavailable(f"{what}; retry")


def _payload(r: Record, loc: bytes) -> dict[str, Any]:
    return {
        "session": r.session,
        "kind": r.kind,
        "tags": frozenset(r.tags),
        "key": r.key,  # for the ``key_prefixes`` filter (grants)
        "loc": loc,
    }


__all__ = [
    "FlushReport",
    "NewRecord",
    "ReplayFilter",
    "ScratchService",
    "ScratchStats",
]


def _granted(key: str, prefixes: Sequence[str]) -> bool:
    """Whether a record with ``key`` is shared by a SCRATCH grant of ``prefixes``:
    grants share keyed records only (an empty prefix shares every keyed one,
    never the unkeyed records, which are the session's own notes)."""
    return bool(key) and any(key.startswith(p) for p in prefixes)
