"""The blob service: transport-free rules of BlobService (``proto/tiermem/v1/blobs.proto``).

A blob is ``(namespace, key)`` → content + metadata + embeddings. Contents are
addressed by SHA-256 and stored once (``server/blobs/catalog.py`` counts the
references). The pieces are in ``server/blobs``; this module ties them:

* **upload** — ``begin_upload`` validates the announcement (limits, owner,
  embedding spaces, capacity) and either finishes at once (the whole blob came
  inline, or its hash names content this namespace already stores) or opens a
  resumable upload; bytes arrive by the gRPC stream (``upload_stream``) or the
  bulk TCP channel (``begin_bulk_upload``); ``finish`` checks the client's
  SHA-256 against the one computed while receiving, then ``_commit`` stores:
  new bytes are adopted by the payload store (or kept inline when small),
  known bytes only gain a reference; one synced RocksDB batch makes it visible;
* **download** — ``open_download`` / ``download`` read a block-aligned range,
  from the DRAM hot cache when the blob is cached there, else from the payload
  with every block verified (DATA_LOSS, never data, on a mismatch); fast
  paths: a shared-memory lease on the cached copy, or a bulk ticket;
* **search** — embeddings (the client's, or the daemon's text embedder's for
  text blobs) live in LanceDB tables with the blob's metadata, kept in step
  with the records through a journal; ``search`` is one filtered vector query;
* **sessions** — a blob put by a session is owned by it; ``drop_session``
  deletes what a closing session owns (its references, so shared contents stay).

Every check of namespace and caller goes through ``_admit`` (one place to route
through an access guard).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tiermem.server.blobs.blocks import aligned_range, sums_slice
from tiermem.server.blobs.cache import HotCache, cache_key
from tiermem.server.blobs.catalog import BlobCatalog, Change, Freed, blob_key, now_ms
from tiermem.server.blobs.embedder import blob_embedder, no_embedder_message
from tiermem.server.blobs.hashing import SHA256_BYTES, digest_of
from tiermem.server.blobs.index import SearchIndex, where_clause
from tiermem.server.blobs.lance_payloads import LancePayloads
from tiermem.server.blobs.model import (
    BlobInfo,
    BlobSpec,
    DownloadPlan,
    Filter,
    LocalFile,
    ShmGrant,
    StreamGrant,
    UploadRing,
    checked_spec,
    info_from_record,
    space_name,
    spec_from_proto,
    spec_to_proto,
    vector,
)
from tiermem.server.blobs.payloads import FilePayloads, PayloadReader, PayloadStore
from tiermem.server.blobs.reader import MemoryPayload, VerifiedReader
from tiermem.server.blobs.uploads import Upload, UploadTable
from tiermem.server.config import BlobsConfig
from tiermem.server.dataplane.transfers import Channel, Ticket
from tiermem.server.embedding.base import Embedder
from tiermem.server.errors import (
    AlreadyExists,
    CapacityExceeded,
    Corrupted,
    FailedPrecondition,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    OutOfRange,
    PermissionDenied,
)
from tiermem.server.metrics import Metrics
from tiermem.server.model import Kind, ObjectKey, ObjectMeta, Profile, Tier, validate_namespace
from tiermem.server.services.guard import Role
from tiermem.server.services.guard import Ticket as Admission
from tiermem.server.services.objects import ObjectService
from tiermem.server.services.periodic import Periodic
from tiermem.server.sessions import cleanup
from tiermem.v1 import blob_records_pb2 as rec_pb

if TYPE_CHECKING:
    from tiermem.server.dataplane.plane import DataPlane
    from tiermem.server.dataplane.shm import StagedExtent
    from tiermem.server.sessions.service import SessionService

log = logging.getLogger(__name__)

#: Blob records looked at by one ListBlobs call at most (a sparse filter
#: returns a short page with a token to continue).
LIST_SCAN_MAX = 20_000
#: Journal entries written to the search tables per pass.
INDEX_BATCH = 2000
BULK_BUFFER_BYTES = 4 << 20
#: Slots of a same-host upload's ring (each ``read_unit_bytes``): the client
#: fills some while the daemon writes and hashes the others.
SHM_UPLOAD_SLOTS = 4
#: Freed payloads kept for a catalog sync to succeed (``_defer_free``); beyond
#: this, the oldest are left to the start-up sweep.
UNSYNCED_FREES_MAX = 10_000


@dataclass(frozen=True, slots=True)
class UploadState:
    """Where an upload stands, or the blob it stored."""

    upload_id: str
    size_bytes: int
    acknowledged_offset: int
    block_bytes: int
    expires_unix_ms: int = 0
    blob: BlobInfo | None = None
    deduplicated: bool = False


@dataclass(frozen=True, slots=True)
class SearchHit:
    info: BlobInfo
    distance: float
    space: str


@dataclass(frozen=True, slots=True)
class BlobStats:
    blobs: int
    logical_bytes: int
    contents: int
    stored_bytes: int
    uploads_active: int
    index_pending: int
    payload_store: str
    lance_uri: str
    cached_bytes: int
    inline_upload_max_bytes: int
    max_blob_bytes: int
    text_space: str
    spaces: tuple[str, ...]
    block_bytes: int


class BlobService:
    def __init__(
        self,
        config: BlobsConfig,
        objects: ObjectService,
        data_dir: Path,
        metrics: Metrics,
        *,
        list_page_max: int = 1000,
        embedder: Embedder | None = None,
        sessions: SessionService | None = None,
    ) -> None:
        self.config = config
        self.objects = objects
        self.store = objects.store
        self.metrics = metrics
        self.sessions = sessions
        self.embedder = blob_embedder(config.text_embedder, embedder)
        self.text_space = f"text.{self.embedder.name}" if self.embedder is not None else ""
        self._list_page_max = list_page_max
        self.root = data_dir / "blobs"
        self.root.mkdir(parents=True, exist_ok=True)
        self.block_bytes = int(config.block_bytes)
        self.catalog = BlobCatalog(self.store.catalog.rocks)
        self._lock = threading.RLock()  # reference counts, payload adoption and deletion
        self._index_lock = threading.Lock()
        #: Checking ``blobs.max_stored_bytes`` and counting the bytes checked are
        #: one step under this lock (``_check_capacity``), so two puts beginning
        #: at once cannot both pass on usage without the other's bytes. Taken
        #: alone or inside ``_lock``; nothing holding it takes another lock but
        #: the upload table's.
        self._capacity_lock = threading.Lock()
        #: New bytes of inline puts between their capacity check and their
        #: commit (then ``catalog.totals.stored_bytes`` counts them); under
        #: ``_capacity_lock``.
        self._reserved_bytes = 0
        self.lance_uri = config.lance_uri or str(self.root / "lance")
        self._remote = "://" in self.lance_uri
        self.files = FilePayloads(self.root / "payloads")
        self.lance: LancePayloads | None = None
        self.payloads: PayloadStore = self.files
        self.index: SearchIndex | None = None
        self._spaces: dict[str, int] = {}
        #: Payloads freed by applied changes whose catalog sync failed, by hash:
        #: removed once a later sync succeeds (``_free_synced``; under ``_lock``).
        self._unsynced_frees: dict[bytes, Freed] = {}
        self.uploads = UploadTable(
            self.root / "uploads",
            block_bytes=self.block_bytes,
            head_max_bytes=int(config.text_embed_max_bytes),
            checkpoint_bytes=int(config.checkpoint_bytes),
            ttl_s=config.upload_ttl_s,
            max_uploads=config.max_uploads,
            persist=lambda rec, sync: self.catalog.put_upload(rec, sync=sync),
            forget=self.catalog.delete_upload,
        )
        self.cache = HotCache(objects, config)
        self.guard = self.store.guard
        self.guard.add_usage_source(self.namespace_usage)
        self.dataplane: DataPlane | None = None
        self._changes = 0
        self._threads: list[Periodic] = []

    # -- lifecycle ----------------------------------------------------------------------
    def open(self) -> None:
        """Connect LanceDB, take back uploads in progress, remove what a crash left
        behind (payloads and staging files nothing references), start the indexer."""
        import lancedb

        if not self._remote:
            Path(self.lance_uri).mkdir(parents=True, exist_ok=True)
        db = lancedb.connect(self.lance_uri, storage_options=dict(self.config.storage_options))
        local = None if self._remote else Path(self.lance_uri)
        self.lance = LancePayloads(db, local)
        choice = self.config.payload_store
        if choice == "lance" or (choice == "auto" and self._remote):
            self.payloads = self.lance
        self._spaces = self.catalog.spaces()
        self.index = SearchIndex(db, self._spaces)
        self._recover_uploads()
        self._collect_garbage()
        with self.store.lock:
            namespaces = list(self.store.catalog.namespaces)
        if swept := self.cache.sweep(namespaces):
            log.info("deleted %d blob cache copies left by the previous run", swept)
        self._publish_gauges()
        self._threads = [
            Periodic("tiermem-blob-index", self.config.index_interval_s, self.flush_index),
            Periodic("tiermem-blob-maintain", self.config.maintain_interval_s, self.maintain),
        ]
        for thread in self._threads:
            thread.start()

    def attach_dataplane(self, dataplane: DataPlane) -> None:
        """The data plane the fast paths use (shared-memory leases, bulk tickets)."""
        self.dataplane = dataplane

    def close(self) -> None:
        for thread in self._threads:
            thread.stop()
        self._threads = []
        if self.index is not None:
            try:
                self.flush_index()
            except Exception:  # the journal keeps what was not written
                log.exception("writing the blob search tables at shutdown failed")
        self.uploads.close()

    def _recover_uploads(self) -> None:
        for record in self.catalog.uploads():
            if not self.uploads.restore(record):
                log.warning("upload %s lost its staging file; forgotten", record.upload_id)
                self.catalog.delete_upload(record.upload_id)
        known = self.uploads.staging_names()
        for path in self.uploads.directory.iterdir():
            if path.name not in known:
                path.unlink(missing_ok=True)

    def _collect_garbage(self) -> None:
        """Payloads nothing references (a crash between a commit that freed them
        and their removal, or between an adoption and its commit) are removed:
        the catalog read at start-up is what survived, so a payload no content
        record of its store names belongs to no blob."""
        swept = 0
        for store, kind in ((self.files, rec_pb.ContentRecord.FILES),) + (
            ((self.lance, rec_pb.ContentRecord.LANCE),) if self.lance is not None else ()
        ):
            for sha in list(store.hashes()):
                content = self.catalog.content(sha)
                if content is None or content.store != kind:
                    store.delete(sha)
                    swept += 1
        if swept:
            log.info("deleted %d blob payloads no record references (left by the previous run)",
                     swept)  # fmt: skip
        for sha in list(self.catalog.content_hashes()):
            content = self.catalog.content(sha)
            if content is not None and content.refs <= 0:
                self.catalog.drop_content(sha)

    # -- access: the one place namespace and caller checks happen ----------------------
    def _admit(
        self,
        namespace: str,
        caller: str,
        record: rec_pb.BlobRecord | None = None,
        *,
        write: bool = False,
    ) -> None:
        """Raise unless the principal holds the role (READ, or WRITE with ``write``)
        on ``namespace`` and ``caller`` (a session, "" = a trusted tool) may use it —
        and, given ``record``, read it (or change it, ``write``)."""
        validate_namespace(namespace)
        self.guard.authorize(namespace, Role.WRITE if write else Role.READ)
        with self.store.lock:
            self.store.catalog.namespace_id(namespace)
        if record is None or not caller:
            return
        meta = ObjectMeta(
            key=ObjectKey(record.namespace, Kind.BLOB, record.key),
            size_bytes=int(record.size_bytes),
            checksum=0,
            profile=Profile(),
            tier=Tier.SSD,
            session=record.session,
        )
        self.objects.guard.check_access(meta, caller, write)

    def _reading(self, namespace: str) -> Admission:
        """The guard's admission of a read on ``namespace`` (per-namespace RPC limits)."""
        validate_namespace(namespace)
        return self.guard.admit(namespace, Role.READ)

    def _writing(self, spec: BlobSpec, held_bytes: int) -> Admission:
        """The guard's admission of a put: namespace quotas (blobs count with the
        objects), session quotas, and ``held_bytes`` against the in-flight budget."""
        validate_namespace(spec.namespace)
        old = self.catalog.blob(blob_key(spec.namespace, spec.key))
        self._check_session_quota(spec, old)
        return self.guard.admit(
            spec.namespace,
            Role.WRITE,
            put_bytes=spec.size_bytes,
            replaced_bytes=int(old.size_bytes) if old is not None else 0,
            new_objects=0 if old is not None else 1,
            session=spec.session,
            held_bytes=held_bytes,
        )

    def _check_session_quota(self, spec: BlobSpec, old: rec_pb.BlobRecord | None) -> None:
        """Raise CapacityExceeded if the blob would take its owner session past its
        SSD quota (a blob's payload is on SSD; ``session_usage`` counts it there,
        at its logical size, as an object's bytes count). Replacing a blob the
        session owns is charged the difference. Owner tags that are not sessions
        have no quota."""
        sessions = self.sessions
        session = sessions.get(spec.session) if sessions is not None and spec.session else None
        if sessions is None or session is None:
            return
        credit: dict[Tier, int] = {}
        if old is not None and old.session == spec.session:
            credit[Tier.SSD] = int(old.size_bytes)
        sessions.check_quota(session, {Tier.SSD: spec.size_bytes}, credit)

    def namespace_usage(self, namespace: str) -> tuple[int, int]:
        """(objects, bytes) the namespace's blobs add to its quotas' count: the
        blobs, each once at its logical size, less their cached DRAM copies,
        which the object catalog counts as objects of the namespace already."""
        blobs, nbytes = self.catalog.namespace_usage(namespace)
        copies, copy_bytes = self.cache.copies(namespace)
        return blobs - copies, nbytes - copy_bytes

    def session_usage(self, session: str) -> cleanup.Usage:
        """What ``session``'s blobs hold: their logical bytes, on SSD (the session
        service adds it to the session's usage and quotas)."""
        blobs, nbytes = self.catalog.session_usage(session)
        return cleanup.Usage({Tier.SSD: (nbytes, blobs)} if blobs else {})

    def _upload(self, upload_id: str, caller: str) -> Upload:
        """An upload in progress, once the principal may write its namespace."""
        upload = self.uploads.get(upload_id, caller)
        self.guard.authorize(upload.header.ref.namespace, Role.WRITE)
        return upload

    def _owner(self, spec: BlobSpec, caller: str) -> BlobSpec:
        """The session that will own the blob: a session caller puts only as itself."""
        session = spec.session
        if caller:
            if session and session != caller:
                raise PermissionDenied(
                    f"session {caller!r} may put blobs only as itself, not as {session!r}"
                )
            session = caller
        sessions = self.sessions
        if (
            session
            and sessions is not None
            and (sessions.get(session) is not None or sessions.was_closed(session))
        ):
            sessions.require_open(session)
            # the caller must be granted the owner session's namespace, as for
            # object puts: else a token of one namespace could charge another's
            # session, and that session's close would delete the blob
            sessions.authorize(session, Role.WRITE)
            sessions.touch(session)
        return spec if session == spec.session else dataclasses.replace(spec, session=session)

    def _check_replace(self, spec: BlobSpec, caller: str) -> rec_pb.BlobRecord | None:
        old = self.catalog.blob(blob_key(spec.namespace, spec.key))
        if old is None:
            return None
        if spec.if_absent:
            raise AlreadyExists(f"blob {spec.namespace}/{spec.key} exists (if_absent was set)")
        if old.session and old.session != spec.session:
            self._admit(spec.namespace, caller, old, write=True)
            raise PermissionDenied(
                f"blob {spec.namespace}/{spec.key} is owned by another session; choose another key"
            )
        return old

    # -- upload -------------------------------------------------------------------------
    def begin_upload(self, spec: BlobSpec, caller: str, data: bytes | None = None) -> UploadState:
        """Announce an upload; finishes at once for inline data or a known content."""
        spec = self._prepare(spec, caller)
        with self._writing(spec, len(data) if data is not None else 0):
            return self._begin(spec, caller, data)

    def _begin(self, spec: BlobSpec, caller: str, data: bytes | None) -> UploadState:
        if data is not None:
            if len(data) != spec.size_bytes:
                raise InvalidArgument(
                    f"data has {len(data)} bytes but size_bytes is {spec.size_bytes}"
                )
            limit = int(self.config.inline_upload_max_bytes)
            if len(data) > limit:
                raise InvalidArgument(
                    f"inline data of {len(data)} bytes exceeds {limit} "
                    "(blobs.inline_upload_max_bytes); stream it with Upload"
                )
            sha, sums = digest_of(data, self.block_bytes)
            self._check_hash(spec, sha, spec.sha256, "")
            self.metrics.blob_bytes.labels("grpc", "in").inc(len(data))
            return self._commit(spec, sha, sums, data, caller)
        if spec.sha256:
            content = self.catalog.content(spec.sha256)
            if (
                content is not None
                and not content.damaged
                and content.size_bytes == spec.size_bytes
                and content.namespace_refs.get(spec.namespace, 0) > 0
            ):
                return self._commit(spec, spec.sha256, bytes(content.block_xxh3), None, caller)
        with self._capacity_lock:  # checked and counted (as pending bytes) as one step
            self._check_capacity(spec.size_bytes)
            upload = self.uploads.begin(spec_to_proto(spec), caller)
        self.metrics.blob_uploads_active.set(len(self.uploads))
        return self._state(upload)

    def _prepare(self, spec: BlobSpec, caller: str) -> BlobSpec:
        spec = checked_spec(spec, self.config)
        self._admit(spec.namespace, caller, write=True)
        spec = self._owner(spec, caller)
        self._check_replace(spec, caller)
        self._check_spaces(spec.embeddings)
        return spec

    def _check_capacity(self, size: int) -> None:
        """Raise CapacityExceeded unless ``size`` more bytes fit under
        ``blobs.max_stored_bytes``, counting stored content, uploads in progress and
        inline puts not yet committed. Call under ``_capacity_lock`` and count the
        bytes (an upload's begin, ``_reserved_bytes``) before releasing it."""
        limit = int(self.config.max_stored_bytes)
        used = self.catalog.totals.stored_bytes + self.uploads.pending_bytes + self._reserved_bytes
        if used + size > limit:
            raise CapacityExceeded(
                f"the blob store holds {used} bytes (stored plus puts in progress); "
                f"{size} more would exceed blobs.max_stored_bytes={limit}"
            )

    def _check_spaces(self, embeddings: Sequence[tuple[str, np.ndarray[Any, Any]]]) -> None:
        new = 0
        for space, values in embeddings:
            dim = self._spaces.get(space)
            if dim is None:
                new += 1
            elif dim != len(values):
                raise InvalidArgument(
                    f"embedding space {space!r} holds {dim}-dimensional vectors, not {len(values)}"
                )
        if new and len(self._spaces) + new > self.config.max_spaces:
            raise CapacityExceeded(
                f"{len(self._spaces)} embedding spaces exist; the limit is "
                f"{self.config.max_spaces} (blobs.max_spaces)"
            )

    def _state(self, upload: Upload) -> UploadState:
        return UploadState(
            upload.upload_id,
            upload.size,
            upload.durable,
            self.block_bytes,
            self.uploads.expires_ms(upload),
        )

    def upload_status(self, upload_id: str, caller: str) -> UploadState:
        self._upload(upload_id, caller)
        return self._state(self.uploads.settled(upload_id, caller))

    def upload_stream(
        self, upload_id: str, offset: int, chunks: Iterator[bytes], caller: str
    ) -> UploadState:
        """Write a stream of chunks from ``offset``; durable when this returns."""
        self._upload(upload_id, caller)
        with self.uploads.writing(upload_id, caller) as upload:
            self.uploads.resume_at(upload, offset)
            n = 0
            try:
                for chunk in chunks:
                    self.uploads.write(upload, memoryview(chunk))
                    n += len(chunk)
            finally:
                self.metrics.blob_bytes.labels("grpc", "in").inc(n)
        return self._state(upload)

    def begin_bulk_upload(self, owner: str, upload_id: str, offset: int, caller: str) -> Ticket:
        """A bulk ticket to send bytes [offset, size) of an upload over TCP."""
        dataplane = self._bulk_plane()
        upload = self._upload(upload_id, caller)
        self.uploads.check_offset(upload, offset)
        nbytes = upload.size - offset

        def run(channel: Channel) -> None:
            with self.uploads.writing(upload_id, caller) as up:
                self.uploads.resume_at(up, offset)
                start = up.received
                try:
                    self.uploads.receive(up, channel, nbytes, BULK_BUFFER_BYTES)
                finally:
                    self.metrics.blob_bytes.labels("bulk", "in").inc(up.received - start)

        return dataplane.transfers.issue_stream(owner, "stream_in", nbytes, run, lambda: None)

    def shm_upload(
        self, owner: str, upload_id: str, offset: int, units: Iterator[tuple[int, int]],
        caller: str,
    ) -> Iterator[UploadRing | int]:  # fmt: skip
        """A same-host upload through a ring of slots in the arena: yields the ring
        (leased to ``owner``), then each slot once the bytes a unit put in it
        (``units``: (slot, length), in order) are written to the staging file.
        When ``units`` ends, the bytes are made durable before this returns."""
        dataplane = self.dataplane
        shm = dataplane.shm if dataplane is not None else None
        info = shm.info() if shm is not None else None
        if shm is None or info is None:
            raise FailedPrecondition(
                "this daemon has no shared-memory arena; use the bulk channel or the gRPC stream"
            )
        upload = self._upload(upload_id, caller)
        self.uploads.check_offset(upload, offset)
        slot_bytes = min(int(self.config.read_unit_bytes), _page_round(upload.size - offset))
        slots = max(1, min(SHM_UPLOAD_SLOTS, -(-(upload.size - offset) // max(slot_bytes, 1))))
        ttl_s = shm.ttl_s(0)
        extent = shm.stage_streamed(owner, slots * slot_bytes, Kind.BLOB, ttl_s)
        lease = extent.lease
        if lease is None or not extent.begin():
            raise InvariantViolation("a fresh upload ring has no lease")
        try:
            with self.uploads.writing(upload_id, caller) as up:
                self.uploads.resume_at(up, offset)
                start = up.received
                up.map_file()
                try:
                    grant = ShmGrant(
                        lease.lease_id, info.arena_id, lease.offset, lease.length,
                        int(ttl_s * 1000),
                    )  # fmt: skip
                    yield UploadRing(grant, slots, slot_bytes)
                    yield from self._take_units(up, extent.buffer, slots, slot_bytes, units)
                finally:
                    self.metrics.blob_bytes.labels("shm", "in").inc(up.received - start)
        finally:
            upload.unmap_file()  # the stages are stopped: nothing views it any more
            extent.done()
            shm.release(owner, [lease.lease_id])

    def _take_units(
        self, upload: Upload, ring: memoryview, slots: int, slot_bytes: int,
        units: Iterator[tuple[int, int]],
    ) -> Iterator[int]:  # fmt: skip
        """Hand each unit to the upload's writer as it arrives (a thread reads the
        client's messages) and yield its slot once written."""
        freed: queue.Queue[int | BaseException | None] = queue.Queue()
        busy = [False] * slots

        def written(slot: int) -> None:
            busy[slot] = False
            freed.put(slot)

        def take() -> None:
            try:
                for slot, length in units:
                    if not 0 <= slot < slots:
                        raise InvalidArgument(f"slot {slot} is not one of the ring's {slots}")
                    if not 0 < length <= slot_bytes:
                        raise InvalidArgument(
                            f"a unit of {length} bytes does not fit a slot of {slot_bytes}"
                        )
                    if busy[slot]:
                        raise InvalidArgument(
                            f"slot {slot} was sent again before the daemon freed it"
                        )
                    busy[slot] = True
                    at = slot * slot_bytes
                    self.uploads.write_shared(
                        upload, ring[at : at + length], functools.partial(written, slot)
                    )
                freed.put(None)
            except BaseException as exc:  # re-raised on the stream's thread
                freed.put(exc)

        reader = threading.Thread(target=take, name="tiermem-shm-upload", daemon=True)
        reader.start()
        try:
            while (item := freed.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            reader.join()

    def _bulk_plane(self) -> DataPlane:
        dataplane = self.dataplane
        if dataplane is None or not dataplane.transfers.address:
            raise FailedPrecondition("the bulk channel is off on this daemon; use the gRPC stream")
        return dataplane

    def abort_upload(self, upload_id: str, caller: str) -> bool:
        self._upload(upload_id, caller)
        aborted = self.uploads.abort(upload_id, caller)
        self.metrics.blob_uploads_active.set(len(self.uploads))
        return aborted

    def finish(self, upload_id: str, sha256: bytes, caller: str) -> UploadState:
        """Check the client's SHA-256 against the received bytes and store the blob."""
        if len(sha256) != SHA256_BYTES:
            raise InvalidArgument(
                f"sha256 must be {SHA256_BYTES} bytes (the hash of the whole blob), "
                f"got {len(sha256)}"
            )
        self._upload(upload_id, caller)
        with self.uploads.writing(upload_id, caller) as upload:
            if upload.received != upload.size:
                raise FailedPrecondition(
                    f"upload {upload_id} has {upload.received} of {upload.size} bytes; "
                    "send the rest before finishing"
                )
            digest, sums = upload.hashed().finish()
            spec = checked_spec(spec_from_proto(upload.header), self.config)
            try:
                self._check_hash(spec, digest, sha256, upload_id)
            except Corrupted:
                self.uploads.finish(upload, "discarded (its bytes did not match the hash)")
                raise
            upload.open()
            os.fdatasync(upload.fd)
            upload.close()
            head = bytes(upload.head)
            # A refused admission ("retry later", a quota) leaves the upload whole:
            # finishing it again later needs none of its bytes again. Only a
            # failure of the commit itself ends it.
            with self._writing(spec, 0):
                try:
                    state = self._commit(
                        spec, digest, sums, upload.path, upload.caller, upload_id, head
                    )
                except BaseException:
                    self.uploads.finish(upload, "failed")
                    raise
            self.uploads.finish(upload, "finished")
        self.metrics.blob_uploads_active.set(len(self.uploads))
        return state

    def _check_hash(self, spec: BlobSpec, digest: bytes, client: bytes, upload_id: str) -> None:
        for claimed in (client, spec.sha256):
            if claimed and claimed != digest:
                self.metrics.checksum_failures.labels("upload").inc()
                self.metrics.blob_ops.labels("put", "failed").inc()
                what = f"upload {upload_id}" if upload_id else f"blob {spec.namespace}/{spec.key}"
                raise Corrupted(
                    f"{what}: the client's sha256 {claimed.hex()} does not match the received "
                    f"bytes ({digest.hex()}); nothing was stored"
                )

    # -- commit ---------------------------------------------------------------------------
    def _commit(
        self,
        spec: BlobSpec,
        sha: bytes,
        sums: bytes,
        source: bytes | Path | None,
        caller: str,
        upload_id: str = "",
        head: bytes = b"",
    ) -> UploadState:
        """Store the blob: adopt new bytes (or count a reference to known ones),
        then one synced batch. ``source`` is the whole content (bytes or an fsynced
        staging file), or None when the client named a stored content by hash."""
        embeddings = self._with_text_embedding(spec, sha, source, head)
        with self._lock:
            spec = self._owner(spec, caller)
            old = self._check_replace(spec, caller)
            self._check_session_quota(spec, old)  # before any byte is adopted
            reserved = 0
            if isinstance(source, bytes) and not upload_id:
                # an inline put's bytes were never announced (an upload's were, at
                # its begin): new content is checked against the store's limit here
                # and counted until the commit counts it as stored
                known = self.catalog.content(sha)
                if known is None or known.damaged:
                    with self._capacity_lock:
                        self._check_capacity(len(source))
                        self._reserved_bytes += len(source)
                    reserved = len(source)
            created: list[str] = []
            try:
                self._create_spaces(embeddings, created)
                record, change, deduplicated = self._apply(
                    spec, sha, sums, source, upload_id, embeddings, old
                )
            except BaseException:
                # nothing was applied: no record names the bytes it adopted or
                # the spaces it registered. Each cleanup runs whatever the other
                # did; a failure of one is logged, and the put's own error is
                # what the caller gets.
                try:
                    self._discard_adopted(sha)
                except Exception:
                    log.exception(
                        "removing the payload %s of a failed blob put failed; it stays",
                        sha.hex(),
                    )
                try:
                    self._drop_spaces(created)
                except Exception:
                    log.exception("dropping the embedding spaces of a failed blob put failed")
                raise
            finally:
                if reserved:  # applied (the catalog counts it as stored) or refused
                    with self._capacity_lock:
                        self._reserved_bytes -= reserved
            self._synced(change)
            refs = self._refs(sha)
        self._changed()
        self.metrics.blob_ops.labels("put", "deduplicated" if deduplicated else "stored").inc()
        info = info_from_record(record, self.block_bytes, refs)
        return UploadState("", spec.size_bytes, spec.size_bytes, self.block_bytes, 0, info,
                           deduplicated)  # fmt: skip

    def _apply(
        self,
        spec: BlobSpec,
        sha: bytes,
        sums: bytes,
        source: bytes | Path | None,
        upload_id: str,
        embeddings: Sequence[tuple[str, np.ndarray[Any, Any]]],
        old: rec_pb.BlobRecord | None,
    ) -> tuple[rec_pb.BlobRecord, Change, bool]:
        """Adopt the bytes and apply the blob's batch, unsynced (call with the
        lock held): (record, what it replaced, deduplicated). Raises with
        nothing applied."""
        deduplicated = False
        content = self.catalog.content(sha)
        new_content = None
        inline = None
        if content is None or content.damaged:
            if source is None:
                raise FailedPrecondition(
                    f"content {sha.hex()} is no longer stored; upload the bytes"
                )
            new_content, inline = self._store_content(sha, sums, spec.size_bytes, source)
            if content is not None:  # a repair: same references, fresh bytes
                new_content.refs = content.refs
                new_content.namespace_refs.update(content.namespace_refs)
                self.catalog.update_content(sha, new_content, inline)
                log.warning("content %s was damaged and is repaired by a new upload", sha.hex())
                new_content = None
        else:
            deduplicated = True
            if isinstance(source, Path):
                source.unlink(missing_ok=True)
        record = rec_pb.BlobRecord(
            namespace=spec.namespace,
            key=spec.key,
            sha256=sha,
            size_bytes=spec.size_bytes,
            media_type=spec.media_type,
            tags=list(spec.tags),
            session=spec.session,
            created_unix_ms=now_ms(),
            embeddings=[
                rec_pb.StoredEmbedding(space=s, values=v.astype("<f4").tobytes())
                for s, v in embeddings
            ],
            version=(old.version + 1) if old is not None else 1,
            uid=self.catalog.next_uid(),
        )
        # The session's quota again, and the commit, under the store lock:
        # object puts check a session's quota and commit under it, so a blob
        # put and an object put of one session cannot each pass its check
        # on usage without the other's bytes. The batch is applied under
        # the lock and synced after it, as object puts are. Lock order: the
        # blob lock, then the store lock (as ``_after_unref``); nothing
        # holding the store lock takes the blob lock.
        with self.store.lock:
            self._check_session_quota(spec, old)
            change = self.catalog.commit(
                record, new_content=new_content, inline=inline, upload_id=upload_id,
                sync=False,
            )  # fmt: skip
        return record, change, deduplicated

    def _store_content(
        self, sha: bytes, sums: bytes, size: int, source: bytes | Path
    ) -> tuple[rec_pb.ContentRecord, bytes | None]:
        """Put new bytes where they live (call with the lock held)."""
        record = rec_pb.ContentRecord(
            size_bytes=size,
            refs=0,
            block_bytes=self.block_bytes,
            block_xxh3=sums,
            created_unix_ms=now_ms(),
        )
        if size <= int(self.config.inline_max_bytes):
            record.store = rec_pb.ContentRecord.INLINE
            data = source if isinstance(source, bytes) else source.read_bytes()
            if isinstance(source, Path):
                source.unlink(missing_ok=True)
            return record, data
        if isinstance(source, bytes):
            staging = self.uploads.directory / f"inline-{sha.hex()}.part"
            _write_file(staging, source)
            source = staging
        self.payloads.adopt(sha, source, size)
        lance = self.payloads is self.lance
        record.store = rec_pb.ContentRecord.LANCE if lance else rec_pb.ContentRecord.FILES
        return record, None

    def _discard_adopted(self, sha: bytes) -> None:
        """Remove a payload ``_store_content`` may have adopted for a put that
        failed with nothing applied (refused at commit, a failed catalog write),
        unless a record may name it: its content record exists (the bytes were
        known, or repaired in place), or a freed payload of that hash waits for
        a sync (the record freeing it may not be durable). Call with the lock
        held."""
        if self.catalog.content(sha) is not None or sha in self._unsynced_frees:
            return
        self.payloads.delete(sha)

    def _synced(self, change: Change) -> None:
        """Sync the catalog after ``change`` was applied, then remove what it freed
        (call with the lock held). When the sync fails, the freed payload is kept
        (a power loss could bring back the record that names it) until a later
        sync succeeds; the error is raised."""
        try:
            self.catalog.sync()
        except BaseException:
            self._after_unref(change.old, None)
            if change.freed is not None:
                self._defer_free(change.freed)
            raise
        self._after_unref(change.old, change.freed)
        self._free_synced()

    def _defer_free(self, freed: Freed) -> None:
        frees = self._unsynced_frees
        frees.pop(freed.sha256, None)
        frees[freed.sha256] = freed
        while len(frees) > UNSYNCED_FREES_MAX:
            sha = next(iter(frees))
            del frees[sha]
            log.warning("blob payload %s waits for the start-up sweep (too many unsynced frees)",
                        sha.hex())  # fmt: skip

    def _free_synced(self) -> None:
        """Remove the payloads freed before a sync that failed, now that a later
        one succeeded (call with the lock held, after that sync). One whose
        content was stored again meanwhile is named by a record: it stays."""
        frees, self._unsynced_frees = self._unsynced_frees, {}
        for sha, freed in frees.items():
            if self.catalog.content(sha) is None:
                self._after_unref(None, freed)

    def _after_unref(self, old: rec_pb.BlobRecord | None, freed: Freed | None) -> None:
        """Remove a freed content's payload, and cached copies a namespace no
        longer references (call with the lock held)."""
        if freed is not None:
            store = self._store_of(freed.content)
            if store is not None:
                store.delete(freed.sha256)
        if old is not None:
            content = self.catalog.content(old.sha256)
            if content is None or content.namespace_refs.get(old.namespace, 0) <= 0:
                self.cache.drop(old.namespace, old.sha256)

    def _refs(self, sha: bytes) -> int:
        content = self.catalog.content(sha)
        return int(content.refs) if content is not None else 0

    def _store_of(self, content: rec_pb.ContentRecord) -> PayloadStore | None:
        if content.store == rec_pb.ContentRecord.FILES:
            return self.files
        if content.store == rec_pb.ContentRecord.LANCE:
            return self.lance
        return None

    def _create_spaces(
        self, embeddings: Sequence[tuple[str, np.ndarray[Any, Any]]], created: list[str]
    ) -> None:
        """Register the spaces of ``embeddings`` not registered yet, each added to
        ``created`` before it is (call with the lock held)."""
        self._check_spaces(embeddings)
        for space, values in embeddings:
            if space not in self._spaces:
                created.append(space)
                self.catalog.put_space(space, len(values))
                self._spaces[space] = len(values)
                if self.index is not None:
                    self.index.ensure_space(space, len(values))

    def _drop_spaces(self, names: Sequence[str]) -> None:
        """Unregister spaces a put registered and then failed to commit (call with
        the lock held, the lock it registered them under: no blob record can name
        them, since records are written under it too, and this put's was not).
        The table goes before the record: a crash between leaves a record whose
        empty table is made again at start-up, never a table without a record.
        A failure is logged, not raised (the put's own error is)."""
        for name in names:
            try:
                if self.index is not None:
                    self.index.drop_space(name)
            except Exception:
                log.exception("dropping the table of embedding space %r failed; it stays", name)
                continue
            self._spaces.pop(name, None)
            try:
                self.catalog.drop_space(name)
            except Exception:  # its record stays: the next start makes its table again
                log.exception("forgetting embedding space %r failed", name)

    def _with_text_embedding(
        self, spec: BlobSpec, sha: bytes, source: bytes | Path | None, head: bytes
    ) -> list[tuple[str, np.ndarray[Any, Any]]]:
        embeddings = list(spec.embeddings)
        if (
            self.embedder is None
            or not spec.is_text
            or spec.skip_text_embedding
            or any(space == self.text_space for space, _ in embeddings)
            or spec.size_bytes == 0
        ):
            return embeddings
        limit = int(self.config.text_embed_max_bytes)
        if isinstance(source, bytes):
            head = source[:limit]
        elif source is None:
            head = self._read_head(sha, limit)
        text = head[:limit].decode("utf-8", "replace").strip()
        if text:
            embeddings.append((self.text_space, self.embedder.embed([text])[0]))
        return embeddings

    def _read_head(self, sha: bytes, limit: int) -> bytes:
        content = self.catalog.content(sha)
        if content is None:
            return b""
        reader = self._payload(sha, content, "text embedding")
        try:
            buf = bytearray(min(limit, int(content.size_bytes)))
            reader.readinto(0, memoryview(buf))
            return bytes(buf)
        finally:
            reader.close()

    # -- download -------------------------------------------------------------------------
    def _find(self, namespace: str, key: str, caller: str) -> rec_pb.BlobRecord:
        with self._reading(namespace):
            self._admit(namespace, caller)
            record = self.catalog.blob(blob_key(namespace, key))
            if record is None:
                raise NotFound(f"blob {namespace}/{key} not found")
            self._admit(namespace, caller, record)
            return record

    def _content(self, record: rec_pb.BlobRecord) -> rec_pb.ContentRecord:
        content = self.catalog.content(record.sha256)
        if content is None:
            raise InvariantViolation(
                f"blob {record.namespace}/{record.key} names content {record.sha256.hex()}, "
                "which has no record"
            )
        return content

    def _payload(self, sha: bytes, content: rec_pb.ContentRecord, what: str) -> PayloadReader:
        if content.store == rec_pb.ContentRecord.INLINE:
            data = self.catalog.inline(sha)
            if data is None:
                self._damaged(sha, what, -1)
                raise Corrupted(f"{what}: its inline bytes are missing")
            return MemoryPayload(data)
        store = self._store_of(content)
        if store is None:
            raise InvariantViolation(f"content {sha.hex()} has no known store")
        try:
            return store.open(sha, int(content.size_bytes))
        except Corrupted:
            self._damaged(sha, what, -1)
            raise

    def _damaged(self, sha: bytes, what: str, block: int) -> None:
        self.metrics.checksum_failures.labels("ssd").inc()
        log.error("blob content %s is damaged (%s, block %d)", sha.hex(), what, block)
        with self._lock:
            content = self.catalog.content(sha)
            if content is not None and not content.damaged:
                content.damaged = True
                self.catalog.update_content(sha, content)

    def _verified(
        self, record: rec_pb.BlobRecord, content: rec_pb.ContentRecord, rng: Any
    ) -> VerifiedReader:
        sha = bytes(record.sha256)
        what = f"blob {record.namespace}/{record.key}"
        return VerifiedReader(
            self._payload(sha, content, what),
            rng,
            int(content.block_bytes),
            bytes(content.block_xxh3),
            int(self.config.read_unit_bytes),
            what,
            lambda block: self._damaged(sha, what, block),
            int(self.config.read_threads),
        )

    def _plan(self, record: rec_pb.BlobRecord, offset: int, length: int) -> DownloadPlan:
        size = int(record.size_bytes)
        if offset < 0 or length < 0 or offset > size:
            raise OutOfRange(f"offset {offset} is outside blob {record.key!r} of {size} bytes")
        length = size - offset if length == 0 else length
        if offset + length > size:
            raise OutOfRange(
                f"range [{offset}, {offset + length}) is outside blob "
                f"{record.namespace}/{record.key} of {size} bytes"
            )
        content = self._content(record)
        if content.damaged:
            raise Corrupted(
                f"blob {record.namespace}/{record.key}: its stored bytes are damaged (they "
                "failed their checksum) and are not served. Upload the same bytes again "
                "to repair it"
            )
        block = int(content.block_bytes)
        rng = aligned_range(offset, length, size, block)
        sums = sums_slice(bytes(content.block_xxh3), rng.first_block, rng.blocks)
        info = info_from_record(record, block, int(content.refs))
        return DownloadPlan(info, rng, block, sums)

    def _cached(self, record: rec_pb.BlobRecord, content: rec_pb.ContentRecord) -> Any:
        """The blob's DRAM copy (read-leased) if cached or worth caching now, else None."""
        ns, sha, size = record.namespace, bytes(record.sha256), int(record.size_bytes)
        reader = self.cache.open(ns, sha)
        rate, reads = self.cache.note_read(ns, sha)
        if reader is not None:
            return reader
        density = self.cache.wants(size, rate, reads)
        if density is None:
            return None
        full = aligned_range(0, size, size, int(content.block_bytes))

        def copy_into(buffer: memoryview) -> None:
            verified = self._verified(record, content, full)
            try:
                verified.read_into(buffer)
            finally:
                verified.close()

        if not self.cache.fill(ns, sha, size, density, copy_into):
            return None
        self.metrics.blob_cache_fills.inc()
        return self.cache.open(ns, sha)

    def _views(
        self, record: rec_pb.BlobRecord, plan: DownloadPlan, cached: Any
    ) -> tuple[Iterator[memoryview], Callable[[], None]]:
        """The aligned range's bytes: from the cached copy, or verified payload reads."""
        rng = plan.range
        if cached is not None:
            view = cached.view[rng.aligned_offset : rng.aligned_offset + rng.aligned_length]
            unit = int(self.config.read_unit_bytes)
            self.metrics.blob_reads.labels("cache").inc()
            return (view[i : i + unit] for i in range(0, len(view), unit)), cached.release
        content = self._content(record)
        verified = self._verified(record, content, rng)
        self.metrics.blob_reads.labels(_store_label(content)).inc()
        return verified.views(), verified.close

    def open_download(
        self,
        namespace: str,
        key: str,
        offset: int,
        length: int,
        caller: str,
        *,
        paths: Sequence[str] = (),
        owner: str = "",
        lease_ttl_ms: int = 0,
        streamed: bool = False,
    ) -> DownloadPlan:
        """Plan a read and, when a fast path the client accepts can serve it, grant
        it: the bytes inline (small ranges), a shared-memory lease on the DRAM
        copy, or a bulk ticket. A client that can follow a streamed download
        (``streamed``) is sent to one (StreamGrant) for a long range not in
        memory: its copying then overlaps the daemon's reads."""
        record = self._find(namespace, key, caller)
        plan = self._plan(record, offset, length)
        dataplane = self.dataplane
        if dataplane is None or not ({"shm", "bulk"} & set(paths)):
            return plan
        if plan.range.aligned_length <= int(self.config.inline_max_bytes):
            cached = self.cache.open(record.namespace, bytes(record.sha256))
            views, close = self._views(record, plan, cached)
            try:
                plan.grant = b"".join(bytes(v) for v in views)
            finally:
                close()
            self.metrics.blob_bytes.labels("grpc", "out").inc(plan.range.length)
            return plan
        content = self._content(record)
        arena = dataplane.shm.arena
        if (
            streamed
            and "file" in paths
            and self._file_readable(content)
            and self.cache.tier(record.namespace, bytes(record.sha256)) != Tier.DRAM
        ):
            plan.grant = StreamGrant()  # the Download names the payload file (any length)
            return plan
        if (
            streamed
            and "shm" in paths
            and arena is not None
            and 2 * int(self.config.read_unit_bytes)
            <= plan.range.aligned_length
            <= arena.capacity_bytes // 2  # else the bulk channel serves it
            and self.cache.tier(record.namespace, bytes(record.sha256)) != Tier.DRAM
        ):
            plan.grant = StreamGrant()  # the Download counts the read for the cache
            return plan
        cached = self._cached(record, content) if plan.range.aligned_length else None
        if cached is not None and "shm" in paths and dataplane.shm.arena is not None:
            grant = self._shm_grant(dataplane, record, owner, lease_ttl_ms)
            if grant is not None:
                cached.release()
                plan.grant = grant
                self.metrics.blob_reads.labels("cache").inc()
                self.metrics.blob_bytes.labels("shm", "out").inc(plan.range.length)
                return plan
        if cached is None and "shm" in paths:
            grant = self._staged_grant(dataplane, record, content, plan, owner, lease_ttl_ms)
            if grant is not None:
                plan.grant = grant
                self.metrics.blob_bytes.labels("shm", "out").inc(plan.range.length)
                return plan
        if "bulk" in paths and dataplane.transfers.address:
            views, close = self._views(record, plan, cached)
            sent = plan.range.aligned_length

            def run(channel: Channel) -> None:
                for view in views:
                    channel.sendall(view)
                self.metrics.blob_bytes.labels("bulk", "out").inc(sent)

            plan.grant = dataplane.transfers.issue_stream(owner, "stream_out", sent, run, close)
            return plan
        if cached is not None:
            cached.release()
        return plan

    def _staged_grant(
        self,
        dataplane: DataPlane,
        record: rec_pb.BlobRecord,
        content: rec_pb.ContentRecord,
        plan: DownloadPlan,
        owner: str,
        ttl_ms: int,
    ) -> ShmGrant | None:
        """A cold read for a client on this host: the range read and verified
        straight into a shared-memory extent leased to it (one copy to the client
        instead of a socket), when the arena has room; else None (bulk serves it)."""
        shm = dataplane.shm
        if shm.arena is None or plan.range.aligned_length < shm.arena.arena_min_bytes:
            return None
        verified = self._verified(record, content, plan.range)
        ttl_s = shm.ttl_s(ttl_ms)
        try:
            lease = shm.stage(
                owner, plan.range.aligned_length, Kind.BLOB, verified.read_into, ttl_s
            )
        except (CapacityExceeded, FailedPrecondition, InvalidArgument):
            return None
        finally:
            verified.close()
        info = shm.info()
        if info is None:
            shm.release(owner, [lease.lease_id])
            return None
        self.metrics.blob_reads.labels(_store_label(content)).inc()
        return ShmGrant(lease.lease_id, info.arena_id, lease.offset, lease.length,
                        int(ttl_s * 1000), plan.range.aligned_offset)  # fmt: skip

    def _shm_grant(
        self, dataplane: DataPlane, record: rec_pb.BlobRecord, owner: str, ttl_ms: int
    ) -> ShmGrant | None:
        shm = dataplane.shm
        ttl_s = shm.ttl_s(ttl_ms)
        key = cache_key(record.namespace, bytes(record.sha256))
        try:
            grants = shm.lease(owner, [key], ttl_s, 1)
        except (NotFound, CapacityExceeded, FailedPrecondition):
            return None
        lease = grants[0].lease
        info = shm.info()
        if lease is None or info is None:
            return None
        return ShmGrant(lease.lease_id, info.arena_id, lease.offset, lease.length,
                        int(ttl_s * 1000))  # fmt: skip

    def download(
        self,
        namespace: str,
        key: str,
        offset: int,
        length: int,
        caller: str,
        *,
        paths: Sequence[str] = (),
        owner: str = "",
        lease_ttl_ms: int = 0,
    ) -> tuple[DownloadPlan, Iterator[memoryview]]:
        """A read over the gRPC stream: the plan and the aligned range's bytes
        (verified; from the DRAM copy when cached). Close the iterator when done.

        With "shm" in ``paths`` (a client on this host) a range too long to go
        inline is leased instead when the arena can hold it (``plan.grant``, a
        ShmGrant; the iterator is then empty): the DRAM copy of a cached blob,
        ready at once, or a fresh extent the range is read and verified into
        while ``plan.filled`` yields the verified prefix (close it when done)."""
        record = self._find(namespace, key, caller)
        plan = self._plan(record, offset, length)
        cached = None
        content = self._content(record)
        if plan.range.aligned_length:
            cached = self._cached(record, content)
        inline_max = int(self.config.inline_max_bytes)
        if (
            "file" in paths
            and self._file_readable(content)
            and cached is None
            and plan.range.aligned_length > inline_max
        ):
            local = self._local_file(record)
            if local is not None:
                plan.grant = local
                self.metrics.blob_reads.labels("files").inc()
                self.metrics.blob_bytes.labels("file", "out").inc(plan.range.length)
                return plan, iter(())
        if (
            "shm" in paths
            and plan.range.aligned_length > inline_max
            and self._streamed_grant(record, plan, cached, owner, lease_ttl_ms)
        ):
            return plan, iter(())
        views, close = self._views(record, plan, cached)

        def stream() -> Iterator[memoryview]:
            sent = 0
            try:
                for view in views:
                    yield view
                    sent += len(view)
            finally:
                close()
                self.metrics.blob_bytes.labels("grpc", "out").inc(sent)

        return plan, stream()

    def _file_readable(self, content: rec_pb.ContentRecord) -> bool:
        """Whether a local client may read this content's payload file itself."""
        return (
            self.config.local_file_reads
            and isinstance(self.payloads, FilePayloads)
            and content.store != rec_pb.ContentRecord.INLINE
        )

    def _local_file(self, record: rec_pb.BlobRecord) -> LocalFile | None:
        """The payload file of a content ``_file_readable`` says a client on this
        host may read itself (it checks every block); None if it is gone."""
        if not isinstance(self.payloads, FilePayloads):
            return None
        path = self.payloads.path(bytes(record.sha256))
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None  # the daemon's own read reports it (and marks it damaged)
        return LocalFile(str(path), st.st_dev, st.st_ino, st.st_size)

    def _streamed_grant(
        self, record: rec_pb.BlobRecord, plan: DownloadPlan, cached: Any, owner: str, ttl_ms: int
    ) -> bool:
        """Lease the range to a client on this host for a streamed download
        (``download``); False when the arena cannot (the bytes go by the stream)."""
        dataplane = self.dataplane
        arena = dataplane.shm.arena if dataplane is not None else None
        if dataplane is None or arena is None:
            return False
        shm = dataplane.shm
        rng = plan.range
        if cached is not None:
            grant = self._shm_grant(dataplane, record, owner, ttl_ms)
            if grant is None:
                return False
            cached.release()
            plan.grant = grant
            self.metrics.blob_reads.labels("cache").inc()
            self.metrics.blob_bytes.labels("shm", "out").inc(rng.length)
            return True
        if rng.aligned_length < arena.arena_min_bytes:
            return False
        ttl_s = shm.ttl_s(ttl_ms)
        try:
            extent = shm.stage_streamed(owner, rng.aligned_length, Kind.BLOB, ttl_s)
        except (CapacityExceeded, FailedPrecondition, InvalidArgument):
            return False
        lease, info = extent.lease, shm.info()
        if lease is None or info is None:
            raise InvariantViolation("a staged extent has no lease, or the arena no info")
        plan.grant = ShmGrant(lease.lease_id, info.arena_id, lease.offset, lease.length,
                              int(ttl_s * 1000), rng.aligned_offset)  # fmt: skip
        plan.filled = self._fill(record, rng, extent)
        return True

    def _fill(self, record: rec_pb.BlobRecord, rng: Any, extent: StagedExtent) -> Iterator[int]:
        """Read and verify ``rng`` into the leased ``extent``, yielding the verified
        prefix as it grows; the extent is freed after the lease ends and this
        stops, whichever is last (see StagedExtent)."""
        if not extent.begin():
            raise FailedPrecondition(
                f"blob {record.namespace}/{record.key}: the lease on the download's "
                "shared-memory extent ended before it was filled"
            )
        try:
            content = self._content(record)
            verified = self._verified(record, content, rng)
            try:
                self.metrics.blob_reads.labels(_store_label(content)).inc()
                yield from verified.fill(extent.buffer)
            finally:
                verified.close()
        finally:
            extent.done()
        self.metrics.blob_bytes.labels("shm", "out").inc(rng.length)

    # -- stat, delete, list ----------------------------------------------------------------
    def stat(self, namespace: str, key: str, caller: str) -> BlobInfo:
        record = self._find(namespace, key, caller)
        cached = self.cache.tier(namespace, bytes(record.sha256)) == Tier.DRAM
        return info_from_record(record, self.block_bytes, self._refs(record.sha256), cached)

    def delete(self, namespace: str, key: str, caller: str) -> tuple[bool, bool]:
        """(deleted, the content's last reference went with it)."""
        self._admit(namespace, caller, write=True)
        bkey = blob_key(namespace, key)
        with self.guard.admit(namespace, Role.WRITE), self._lock:
            record = self.catalog.blob(bkey)
            if record is None:
                return False, False
            self._admit(namespace, caller, record, write=True)
            change = self.catalog.delete(bkey, sync=False)
            self._synced(change)
        self._changed()
        self.metrics.blob_ops.labels("delete", "deleted").inc()
        return True, change.freed is not None

    def list_blobs(
        self, namespace: str, flt: Filter, page_size: int, page_token: str, caller: str
    ) -> tuple[list[BlobInfo], str]:
        with self._reading(namespace):
            return self._list(namespace, flt, page_size, page_token, caller)

    def _list(
        self, namespace: str, flt: Filter, page_size: int, page_token: str, caller: str
    ) -> tuple[list[BlobInfo], str]:
        self._admit(namespace, caller)
        if page_size > self._list_page_max:
            raise InvalidArgument(
                f"page_size {page_size} exceeds the limit of {self._list_page_max}"
            )
        page_size = page_size or min(100, self._list_page_max)
        start = _decode_token(page_token, blob_key(namespace, ""))
        prefix = blob_key(namespace, flt.key_prefix)
        out: list[BlobInfo] = []
        last = b""
        scanned = 0
        for bkey, record in self.catalog.scan(prefix, start):
            last = bkey
            scanned += 1
            if flt.matches(record) and self._visible(record, caller):
                out.append(info_from_record(record, self.block_bytes, self._refs(record.sha256)))
                if len(out) >= page_size:
                    break
            if scanned >= LIST_SCAN_MAX:
                break
        more = len(out) >= page_size or scanned >= LIST_SCAN_MAX
        return out, (_encode_token(last) if more and last else "")

    def _visible(self, record: rec_pb.BlobRecord, caller: str) -> bool:
        try:
            self._admit(record.namespace, caller, record)
        except (NotFound, PermissionDenied):
            return False
        return True

    # -- search ---------------------------------------------------------------------------
    def search(
        self,
        namespace: str,
        *,
        vector_values: Sequence[float] | np.ndarray[Any, Any] | None,
        space: str,
        text: str | None,
        k: int,
        flt: Filter,
        metric: int,
        caller: str,
    ) -> list[SearchHit]:
        """The ``k`` blobs nearest the query, filtered; a text query is embedded by
        the daemon's text embedder and searched in its space."""
        self._admit(namespace, caller)
        with self._reading(namespace):
            return self._search(namespace, vector_values, space, text, k, flt, metric, caller)

    def _search(
        self,
        namespace: str,
        vector_values: Sequence[float] | np.ndarray[Any, Any] | None,
        space: str,
        text: str | None,
        k: int,
        flt: Filter,
        metric: int,
        caller: str,
    ) -> list[SearchHit]:
        if k > self.config.max_k:
            raise InvalidArgument(f"k={k} exceeds the limit of {self.config.max_k} (blobs.max_k)")
        k = k or 10
        if metric not in (0, 1, 2, 3):
            raise InvalidArgument(f"unknown metric {metric}")
        if text is not None:
            if self.embedder is None:
                raise FailedPrecondition(no_embedder_message(self.config.text_embedder))
            if not text.strip():
                raise InvalidArgument("the query text is empty")
            space = self.text_space
            query = self.embedder.embed([text])[0]
        else:
            if vector_values is None:
                raise InvalidArgument("a search needs a query vector or a query text")
            space = space_name(space)
            query = vector(vector_values, self.config, "query vector")
        dim = self._spaces.get(space)
        if dim is None:
            raise NotFound(
                f"no blob has an embedding in space {space!r}"
                + (" (text blobs are embedded in that space as they are stored)" if text else "")
            )
        if dim != len(query):
            raise InvalidArgument(
                f"space {space!r} holds {dim}-dimensional vectors; the query has {len(query)}"
            )
        self.flush_index()
        index = self._require_index()
        where = where_clause(
            namespace,
            flt.media_type,
            flt.tags_all,
            flt.tags_any,
            flt.session,
            flt.key_prefix,
            None if not caller else ["", caller],
            self._granted(namespace, caller),
        )
        hits = []
        for hit in index.search(space, query, k, where, metric):
            record = self.catalog.blob(blob_key(hit.namespace, hit.key))
            if record is None or record.uid != hit.uid or not self._visible(record, caller):
                continue
            info = info_from_record(record, self.block_bytes, self._refs(record.sha256))
            hits.append(SearchHit(info, hit.distance, space))
        self.metrics.blob_ops.labels("search", "found" if hits else "missing").inc()
        return hits

    def _granted(self, namespace: str, caller: str) -> tuple[list[str], list[str]]:
        """(owners, key prefixes) of the blobs in ``namespace`` that ``caller``'s
        grants let it read: its ancestors' blobs under its BLOB grants' prefixes
        (as ``SessionService.read_grant`` decides for one blob). Bounded by
        ``agent.sessions.max_depth`` and ``max_grants``."""
        sessions = self.sessions
        session = sessions.get(caller) if sessions is not None and caller else None
        if sessions is None or session is None:
            return [], []
        prefixes = sorted(
            {
                g.key_prefix
                for g in session.grants
                if g.kind == Kind.BLOB and g.namespace == namespace
            }
        )
        if not prefixes:
            return [], []
        return [a.id for a in sessions.ancestors(caller)], prefixes

    def _require_index(self) -> SearchIndex:
        if self.index is None:
            raise FailedPrecondition("the blob store is not open")
        return self.index

    # -- the search journal and upkeep -----------------------------------------------------
    def _changed(self) -> None:
        self._changes += 1
        self._publish_gauges()

    def flush_index(self) -> int:
        """Write pending changes to the search tables; returns entries applied."""
        index = self.index
        if index is None:
            return 0
        applied = 0
        with self._index_lock:
            while True:
                entries = self.catalog.journal(INDEX_BATCH)
                if not entries:
                    break
                drops: set[int] = set()
                records: dict[bytes, rec_pb.BlobRecord] = {}
                for _key, entry in entries:
                    drops.update(entry.drop_uids)
                    record = self.catalog.blob(entry.blob_key)
                    if record is not None:
                        drops.add(record.uid)
                        records[entry.blob_key] = record
                    else:
                        records.pop(entry.blob_key, None)
                index.apply(drops, list(records.values()))
                self.catalog.ack([key for key, _ in entries])
                applied += len(entries)
        if applied:
            self.metrics.blob_index_pending.set(self.catalog.journal_pending)
        return applied

    def maintain(self) -> None:
        """Reap idle uploads; optimize the LanceDB tables after enough changes."""
        if self.uploads.reap_expired():
            self.metrics.blob_uploads_active.set(len(self.uploads))
        with self._lock:
            if self._unsynced_frees:
                try:
                    self.catalog.sync()
                except Exception:  # kept for the next pass
                    log.warning("catalog sync failed; %d freed blob payloads wait for the next",
                                len(self._unsynced_frees))  # fmt: skip
                else:
                    self._free_synced()
        self.flush_index()
        if self._changes >= self.config.optimize_after_changes:
            self._changes = 0
            if self.index is not None:
                self.index.optimize()
            if self.lance is not None:
                with self._lock:
                    self.lance.optimize()

    def _publish_gauges(self) -> None:
        t = self.catalog.totals
        m = self.metrics
        m.blobs.set(t.blobs)
        m.blob_logical_bytes.set(t.logical_bytes)
        m.blob_stored_bytes.set(t.stored_bytes)
        m.blob_index_pending.set(self.catalog.journal_pending)
        m.blob_uploads_active.set(len(self.uploads))

    # -- sessions, stats ---------------------------------------------------------------------
    def drop_session(self, session: str) -> cleanup.Freed:
        """Delete every blob ``session`` owns (a content shared with others stays)."""
        freed = cleanup.Freed()
        for bkey in self.catalog.session_blobs(session):
            with self._lock:
                record = self.catalog.blob(bkey)
                if record is None or record.session != session:
                    continue
                change = self.catalog.delete(bkey, sync=False)
                self._synced(change)
            freed.items += 1
            if change.freed is not None:
                n = int(change.freed.content.size_bytes)
                freed.bytes_by_tier[Tier.SSD] = freed.bytes_by_tier.get(Tier.SSD, 0) + n
        if freed.items:
            self._changed()
        return freed

    def stats(self) -> BlobStats:
        t = self.catalog.totals
        with self.store.lock:
            namespaces = list(self.store.catalog.namespaces)
        return BlobStats(
            blobs=t.blobs,
            logical_bytes=t.logical_bytes,
            contents=t.contents,
            stored_bytes=t.stored_bytes,
            uploads_active=len(self.uploads),
            index_pending=self.catalog.journal_pending,
            payload_store=self.payloads.name,
            lance_uri=self.lance_uri,
            cached_bytes=self.cache.cached_bytes(namespaces),
            inline_upload_max_bytes=int(self.config.inline_upload_max_bytes),
            max_blob_bytes=int(self.config.max_blob_bytes),
            text_space=self.text_space,
            spaces=tuple(sorted(self._spaces)),
            block_bytes=self.block_bytes,
        )

    def payload_path(self, sha256: bytes) -> Path | None:
        """The payload file of a content in the ``files`` store (operators, fsck, benches)."""
        content = self.catalog.content(sha256)
        if content is None or content.store != rec_pb.ContentRecord.FILES:
            return None
        return self.files.path(sha256)


def _store_label(content: rec_pb.ContentRecord) -> Literal["files", "lance", "inline"]:
    if content.store == rec_pb.ContentRecord.LANCE:
        return "lance"
    if content.store == rec_pb.ContentRecord.INLINE:
        return "inline"
    return "files"


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _encode_token(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def _decode_token(token: str, namespace_prefix: bytes) -> bytes | None:
    """The key a listing of the namespace whose keys start with
    ``namespace_prefix`` resumes after. Decoded strictly (the lenient decoder
    skips characters outside the alphabet, so garbage read as the start)."""
    if not token:
        return None
    try:
        key = base64.b64decode(token.encode(), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key.startswith(namespace_prefix):
        raise InvalidArgument("page_token is not one this server issued for this namespace")
    return key


def _page_round(n: int, page: int = 4096) -> int:
    return -(-n // page) * page
