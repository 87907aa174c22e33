"""The remote tier engine: a backend behind names, headers, checksums,
deadlines, bounded retries and a circuit breaker.

Every operation is a batch and runs on a small thread pool so the caller can
stop waiting at its deadline (``op_timeout_s``) even when the backend's own
client blocks (Mooncake's does for ~4 s while its master is down). At most
``max_inflight`` operations run at once; a thread stuck in a dead store keeps
its slot until the call returns, so a dead store cannot pile up threads.
Failures are retried (``retries``, within the deadline), then counted by the
circuit breaker: after ``breaker_failures`` in a row the tier is unavailable
for ``breaker_open_s`` and calls fail at once; then one call probes the store
and closes the breaker again if it works. Each failure is a metric and a log
line; callers get ``Unavailable`` and fall back (serve local tiers, drop CACHE
objects instead of demoting them).

A get of many objects (``read``) is cut into parts that are on the wire at once
(``read_parallel``), yielded in order so the caller verifies and stores one part
while the next arrive.

Values are written as header + payload (``codec``); reads check the header and
callers verify the payload against the object's checksum with ``verify``, or
hash the copy they make of it with ``copy_verified``.

A value a session owns is written under this daemon's private name
(``codec``: scoped by ``daemon_id``); reads, existence checks and deletes take
the shared name of each key unless told (``private``) that its value is this
daemon's private one: the remote service knows which (``RemoteService``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Generic, NoReturn, TypeVar

import numpy as np
import xxhash

from tiermem.server.config import RemoteTierConfig
from tiermem.server.errors import Corrupted, InvariantViolation, Unavailable
from tiermem.server.metrics import Metrics
from tiermem.server.model import ObjectKey, ObjectMeta, Tier
from tiermem.server.tiers.remote.base import Landed, RemoteBackend, RemoteError
from tiermem.server.tiers.remote.breaker import CircuitBreaker, State
from tiermem.server.tiers.remote.codec import (
    FIXED_HEAD_BYTES,
    FIXED_HEAD_MIN_PAYLOAD_BYTES,
    HEADER,
    RemoteValue,
    decode,
    decode_head,
    encode_header,
    head_length,
    remote_name,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a backend's ``get_many`` (``get_many_into``) answers.
_Raw = list[tuple[memoryview, object] | Landed | None]
#: Where a ``read_into`` lands a value's payload: ``place(i, key, size, head)``
#: gives a buffer of exactly ``head + size`` bytes for the i-th key's value, of
#: which the last ``size`` are the payload's (``head`` > 0: the value lands
#: whole, its head in the first ``head`` bytes, which the caller gives back
#: once it landed), or None.
Place = Callable[[int, ObjectKey, int, int], memoryview | None]


@dataclass(slots=True)
class LandedValue:
    """A value of a ``read_into`` whose payload landed in the buffer ``place``
    gave for it. Not verified yet: check it with ``RemoteTier.check``."""

    meta: ObjectMeta
    #: xxh3-64 of the landed bytes, computed by the thread that read them right
    #: after they landed (in parallel with the other parts' reads); None: not
    #: hashed yet (``check`` hashes them)
    digest: int | None = None


#: What a read yields for each key.
ReadValue = RemoteValue | LandedValue | Corrupted | None


class _PartLander:
    """The lander (``base.Lander``) of one part of a ``read_into``: decodes each
    value's head, asks ``place`` where its payload goes and remembers what
    it placed (by position in the part)."""

    head_bytes = HEADER.size

    def __init__(self, part: range, keys: list[ObjectKey], names: list[str], place: Place) -> None:
        self.part = part
        self.keys = keys
        self.names = names
        self.place = place
        #: what was placed, by position: the value's metadata (None until its
        #: head is read, for a value placed before any of it was read)
        self.placed: dict[int, ObjectMeta | None] = {}
        #: the buffers given for them, and the xxh3-64 of those that landed
        #: (``hash_landed``)
        self.buffers: dict[int, memoryview] = {}
        self.digests: dict[int, int] = {}

    def head_length(self, index: int, fixed: memoryview, value_len: int) -> int:
        return head_length(fixed, value_len)

    def target(self, index: int, head: memoryview, value_len: int) -> memoryview | None:
        try:
            meta = decode_head(head, value_len, self.keys[index], self.names[index])
        except Corrupted:
            return None  # read whole: decoding it then reports the damage
        buf = self.place(self.part[index], meta.key, meta.size_bytes, 0)
        if buf is not None:
            self.placed[index] = meta
            self.buffers[index] = buf
        return buf

    def target_whole(self, index: int, value_len: int) -> tuple[int, memoryview] | None:
        """(head length, buffer for the whole value) for a value that would have
        a head of fixed size (``codec``), placed before any of it is read: its
        payload lands in the buffer's last bytes, where ``place`` wants it;
        None: read it the ordinary way. Call ``head_read`` once it was read."""
        size = value_len - FIXED_HEAD_BYTES
        if size < FIXED_HEAD_MIN_PAYLOAD_BYTES:
            return None
        whole = self.place(self.part[index], self.keys[index], size, FIXED_HEAD_BYTES)
        if whole is None:
            return None
        self.placed[index] = None
        self.buffers[index] = whole[FIXED_HEAD_BYTES:]
        return FIXED_HEAD_BYTES, whole

    def head_read(self, index: int, head: memoryview, value_len: int) -> bool:
        """The head of a value placed by ``target_whole`` was read: True if
        it is a fixed-size head of this object (the value landed), False if the
        value has another layout (answer it whole) or a damaged head."""
        try:
            meta = decode_head(head, value_len, self.keys[index], self.names[index])
        except Corrupted:
            return False  # answered whole: decoding it then reports the damage
        if head_length(head, value_len) != FIXED_HEAD_BYTES:
            return False
        self.placed[index] = meta
        return True

    def drop(self, drop: Callable[[int], None], answer: _Raw | None = None) -> None:
        """Give back each placed buffer (with ``answer``, the read's: only those
        whose value did not land there)."""
        for index in list(self.placed):
            if answer is None or not isinstance(answer[index], Landed):
                del self.placed[index]
                self.buffers.pop(index, None)
                drop(self.part[index])

    def hash_landed(self) -> None:
        """After ``drop(..., answer)``: hash each value that landed (the buffers
        left), in the reading thread. xxhash releases the interpreter lock, so
        the parts of a read hash in parallel with each other's network reads
        instead of one after another on the caller's thread. The caller still
        compares each digest with the checksum."""
        for index, buf in self.buffers.items():
            self.digests[index] = xxhash.xxh3_64_intdigest(buf)


@dataclass(slots=True)
class _Pending(Generic[T]):
    """An operation submitted to the pool and not waited for yet."""

    op: str
    future: Future[T]
    deadline: float
    started: float


def _when_all_done(futures: Sequence[Future[None]], fn: Callable[[], None]) -> None:
    """Call ``fn`` once every one of ``futures`` is done (at once if none)."""
    if not futures:
        fn()
        return
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_f: Future[None]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            fn()

    for future in futures:
        future.add_done_callback(one_done)


def release_all(values: Iterable[object]) -> None:
    """Release every RemoteValue among ``values``."""
    for value in values:
        if isinstance(value, RemoteValue):
            value.release()


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` made safe to call twice (a pooled buffer given back twice could be
    handed to two readers at once)."""
    done = threading.Lock()

    def call() -> None:
        if done.acquire(blocking=False):
            fn()

    return call


#: Pause between retries of a failed operation (seconds).
RETRY_BACKOFF_S = 0.05
#: Parts a read is cut into by default, per backend (``tiers.remote.read_parallel``).
READ_PARALLEL = {"redis_cluster": 4, "mooncake": 1}
#: Piece of a payload copied, then hashed while it is in cache (``copy_verified``).
VERIFY_PIECE_BYTES = 1 << 20


def make_backend(config: RemoteTierConfig) -> RemoteBackend:
    """Connect the configured backend (its client library is imported only here)."""
    if config.backend == "mooncake":
        from tiermem.server.tiers.remote.mooncake import MooncakeBackend

        return MooncakeBackend(config.mooncake)
    from tiermem.server.tiers.remote.redis_cluster import RedisClusterBackend

    return RedisClusterBackend(config.redis, config.op_timeout_s)


# The operations as functions of the backend (bound to their arguments with
# ``partial`` so a call still running after its deadline keeps its own).
def _put(names: list[str], values: list[bytes], b: RemoteBackend) -> list[bool]:
    return b.put_many(names, values)


def _get(names: list[str], b: RemoteBackend) -> _Raw:
    return list(b.get_many(names))


def _get_into(
    names: list[str], lander: _PartLander, drop: Callable[[int], None], b: RemoteBackend
) -> _Raw:
    """One attempt at a part of a ``read_into``: what it placed is given back
    unless it landed (a failed attempt lands nothing)."""
    try:
        got = b.get_many_into(names, lander)
    except BaseException:
        lander.drop(drop)
        raise
    lander.drop(drop, answer=got)
    lander.hash_landed()
    return got


def _exists(names: list[str], b: RemoteBackend) -> list[bool]:
    return b.exists_many(names)


def _delete(names: list[str], b: RemoteBackend) -> None:
    b.delete_many(names)


class RemoteTier:
    tier = Tier.REMOTE

    def __init__(
        self,
        config: RemoteTierConfig,
        connect: Callable[[], RemoteBackend],
        metrics: Metrics,
        used_bytes: Callable[[], int] = lambda: 0,
        clock: Callable[[], float] = time.monotonic,
        daemon_id: str = "",
    ) -> None:
        """``connect`` builds the backend's client. It is called on first use (and
        again after a failed attempt) inside an operation's deadline, so a daemon
        starts and serves its local tiers while the remote store is down.
        ``daemon_id``: this daemon's id, which scopes the names of its private
        values (``codec.remote_name``; the daemon's is kept in its catalog,
        ``services.remote.daemon_id``). Without one, writing or naming a
        private value raises InvariantViolation (tests that write none)."""
        self.config = config
        self.daemon_id = daemon_id
        self._connect = connect
        self._backend: RemoteBackend | None = None
        self._connect_lock = threading.Lock()
        #: set when the breaker trips on a backend that can go stale
        #: (``RemoteBackend.reconnect_after_trip``): the next call connects afresh
        self._stale = False
        self.metrics = metrics
        self.capacity_bytes = int(config.capacity_bytes)
        self.breaker = CircuitBreaker(config.breaker_failures, config.breaker_open_s, clock)
        self._used = used_bytes
        self._pool = ThreadPoolExecutor(config.max_inflight, thread_name_prefix="tiermem-remote")
        self._slots = threading.BoundedSemaphore(config.max_inflight)
        self._read_parallel = config.read_parallel or READ_PARALLEL[config.backend]
        metrics.remote_available.set(1)

    # -- engine surface (stats, planner) ------------------------------------------------
    @property
    def used_bytes(self) -> int:
        return self._used()

    @property
    def device(self) -> str:
        cfg = self.config
        where = cfg.mooncake.master if cfg.backend == "mooncake" else ",".join(cfg.redis.nodes)
        return f"{cfg.backend}://{where}"

    def _client(self) -> RemoteBackend:
        """The connected backend (connects on first use, and again after the
        breaker tripped on a backend that can go stale: the old client is
        dropped, not closed, as calls that timed out may still run on it; it
        is freed when the last of them returns)."""
        with self._connect_lock:
            if self._stale:
                self._stale = False
                self._backend = None
            if self._backend is None:
                self._backend = self._connect()
            return self._backend

    def available(self) -> bool:
        """Whether remote operations are worth trying now (breaker closed or probe due)."""
        return self.breaker.available()

    def name_of(self, encoded_key: bytes, private: bool = False) -> str:
        """The object's shared name, or (``private``) this daemon's private name."""
        return self._name(ObjectKey.decode(encoded_key), private)

    def _name(self, key: ObjectKey, private: bool) -> str:
        return remote_name(self.config.deployment, key, self.daemon_id if private else "")

    def fits(self, size: int) -> bool:
        return size <= self.config.max_value_bytes

    # -- operations -----------------------------------------------------------------------
    def pack(self, meta: ObjectMeta, payload: memoryview) -> bytes:
        """The value stored for an object: header + payload, in one buffer (both
        stores take one buffer per value). The copy lets callers give back a
        lease on ``payload`` before the network transfer starts. On Mooncake a
        large payload gets a head of fixed size (``codec``), so readers land it
        where they want it (``read_into``)."""
        fixed = self.config.backend == "mooncake" and len(payload) >= FIXED_HEAD_MIN_PAYLOAD_BYTES
        return b"".join((encode_header(meta, fixed), payload))

    def put(self, items: Sequence[tuple[ObjectMeta, bytes]]) -> list[bool]:
        """Write each object's packed value (``pack``), replacing any: under its
        private name when ``meta`` names a session (the header then names
        ``PRIVATE_OWNER``), else its shared name. False where the store refused
        it or it is larger than ``max_value_bytes``. Raises Unavailable."""
        out = [False] * len(items)
        todo = [i for i, (meta, _) in enumerate(items) if self.fits(meta.size_bytes)]
        for part in self._batches(todo, [items[i][0].size_bytes for i in todo]):
            names = [self._name(items[i][0].key, bool(items[i][0].session)) for i in part]
            values = [items[i][1] for i in part]
            stored = self._call("put", partial(_put, names, values))
            nbytes = 0
            for i, ok in zip(part, stored, strict=True):
                out[i] = ok
                nbytes += items[i][0].size_bytes if ok else 0
            self.metrics.remote_bytes.labels("out").inc(nbytes)
        stored_count = sum(out)
        self._count_objects("put", stored_count, len(items) - stored_count, "failed")
        return out

    def get(
        self, encoded_keys: Sequence[bytes], private: Sequence[bool] | None = None
    ) -> list[RemoteValue | Corrupted | None]:
        """Each object's value (None: not in the store; Corrupted: a value whose
        header is damaged or names another object), read under its shared name,
        or its private one where ``private`` (by position) says so. Payloads are
        not verified yet: call ``verify``. Release every RemoteValue. Raises
        Unavailable."""
        out: list[RemoteValue | Corrupted | None] = []
        try:
            for _part, values in self.read(encoded_keys, private):
                out += values
        except BaseException:
            release_all(out)
            raise
        return out

    def read(
        self, encoded_keys: Sequence[bytes], private: Sequence[bool] | None = None
    ) -> Generator[tuple[range, list[RemoteValue | Corrupted | None]], None, None]:
        """The objects' values (as ``get``), part after part in order: each part is
        one remote batch, and up to ``read_parallel`` of them are on the wire at
        once, so the caller verifies and stores one part while the next ones
        arrive. Yields (positions in ``encoded_keys``, their values); the caller
        releases every RemoteValue it was given. Raises Unavailable (parts already
        yielded stay valid; the rest are dropped). ``private``: as for ``get``."""
        for part, values in self._read(encoded_keys, None, None, private):
            yield part, [v for v in values if not isinstance(v, LandedValue)]

    def read_into(
        self, encoded_keys: Sequence[bytes], place: Place, drop: Callable[[int], None]
    ) -> Generator[tuple[range, list[ReadValue]], None, None]:
        """``read``, except that values land straight in the buffers ``place``
        gives for them (Redis: the payload, received after the head; Mooncake:
        the whole value in one transfer, the payload where ``place`` wants it):
        such values come as
        LandedValue (verify them with ``check``). Every buffer ``place`` gave is
        either answered that way or handed to ``drop(i)``, maybe later and from
        another thread (a part given up on at its deadline may still be
        written; its buffers are dropped once its read returns). Shared names
        only."""
        yield from self._read(encoded_keys, place, drop)

    def _read(
        self,
        encoded_keys: Sequence[bytes],
        place: Place | None,
        drop: Callable[[int], None] | None,
        private: Sequence[bool] | None = None,
    ) -> Generator[tuple[range, list[ReadValue]], None, None]:
        parts = self._read_parts(len(encoded_keys))
        waiting: deque[
            tuple[range, list[ObjectKey], list[str], _PartLander | None, _Pending[_Raw]]
        ] = deque()
        todo = deque(parts)

        def start(first: bool) -> bool:
            part = todo[0]
            keys = [ObjectKey.decode(encoded_keys[i]) for i in part]
            names = [
                self._name(k, bool(private and private[i])) for i, k in zip(part, keys, strict=True)
            ]
            lander = None
            fn: Callable[[RemoteBackend], _Raw] = partial(_get, names)
            if place is not None and drop is not None:
                lander = _PartLander(part, keys, names, place)
                fn = partial(_get_into, names, lander, drop)
            if first:
                # nothing of this read in flight: wait a moment for a slot (one of
                # our parts may be giving its own back)
                pending = self._start("get", fn, slot_wait_s=0.0 if part is parts[0] else 0.05)
            else:
                if not self._slots.acquire(blocking=False):
                    return False  # later, when a part of ours has finished
                try:
                    pending = self._start("get", fn, slot_held=True)
                except Unavailable:
                    return False  # the breaker is probing: try again after it
            todo.popleft()
            waiting.append((part, keys, names, lander, pending))
            return True

        depth = min(self._read_parallel, self.config.max_inflight)
        try:
            while todo or waiting:
                if not waiting:
                    start(first=True)
                while todo and len(waiting) < depth and start(first=False):
                    pass
                part, keys, names, lander, pending = waiting[0]
                values = self._decoded(keys, names, self._finish(pending), lander)
                waiting.popleft()  # answered: what it placed is the caller's now
                yield part, values
        finally:
            for _part, _keys, _names, lander, pending in waiting:
                pending.future.add_done_callback(partial(self._drop_raw, lander, drop))

    def _decoded(
        self, keys: list[ObjectKey], names: list[str], raw: _Raw, lander: _PartLander | None
    ) -> list[ReadValue]:
        out: list[ReadValue] = []
        client = self._client()
        for index, (key, name, got) in enumerate(zip(keys, names, raw, strict=True)):
            if got is None:
                out.append(None)
                continue
            if isinstance(got, Landed):
                meta = lander.placed.get(index) if lander is not None else None
                if meta is None:
                    raise InvariantViolation(f"remote value {name!r} landed nowhere")
                self.metrics.remote_bytes.labels("in").inc(meta.size_bytes)
                out.append(LandedValue(meta, lander.digests.get(index) if lander else None))
                continue
            view, owner = got
            try:
                meta, payload = decode(view, key, name)
            except Corrupted as exc:
                self.report_damage(exc.message)
                client.release(owner)
                out.append(exc)
                continue
            self.metrics.remote_bytes.labels("in").inc(len(payload))
            out.append(RemoteValue(meta, payload, _once(partial(client.release, owner))))
        found = sum(1 for v in out if isinstance(v, RemoteValue | LandedValue))
        self._count_objects("get", found, len(out) - found, "missing")
        return out

    def _drop_raw(
        self,
        lander: _PartLander | None,
        drop: Callable[[int], None] | None,
        future: Future[_Raw],
    ) -> None:
        """A part's answer nobody will read (its read was abandoned): free it and
        give back the buffers its values landed in."""
        if future.cancelled() or future.exception() is not None:
            return  # a failed attempt gave back what it placed itself
        client = self._backend
        for got in future.result():
            if isinstance(got, tuple) and client is not None:
                client.release(got[1])
        if lander is not None and drop is not None:
            lander.drop(drop)

    def _read_parts(self, n: int) -> list[range]:
        """``range(n)`` cut into the parts of one read: ``read_parallel`` parts of
        at least ``read_part_min_objects`` (fewer for few objects), each at most
        ``batch_max_objects``."""
        cfg = self.config
        count = max(1, min(self._read_parallel, n // cfg.read_part_min_objects))
        count = max(count, -(-n // cfg.batch_max_objects))
        bounds = [n * k // count for k in range(count + 1)]
        return [range(a, b) for a, b in pairwise(bounds) if b > a]

    def exists(
        self, encoded_keys: Sequence[bytes], private: Sequence[bool] | None = None
    ) -> list[bool]:
        """Whether each object's value is in the store (under its shared name, or
        its private one where ``private`` says so). Raises Unavailable."""
        out: list[bool] = []
        for part in self._batches(list(range(len(encoded_keys))), None):
            names = [self.name_of(encoded_keys[i], bool(private and private[i])) for i in part]
            out += self._call("exists", partial(_exists, names))
        found = sum(out)
        self._count_objects("exists", found, len(out) - found, "missing")
        return out

    def delete(
        self,
        encoded_keys: Sequence[bytes],
        private: Sequence[bool] | None = None,
        ended: Callable[[], None] | None = None,
    ) -> None:
        """Remove the objects' values (under their shared names, or private ones
        where ``private`` says so; absent ones are ignored). Raises Unavailable.

        A delete given up at its deadline may still reach the store: the
        backend's call runs on until its own client gives up, and a slow store
        carries out a command it received late. ``ended`` is called once none
        of the calls this delete made is still running (at once if it made
        none; else from the pool thread that ends last): a command sent after
        that reaches the store after them (each node serves its connections'
        commands in the order they arrive)."""
        calls: list[Future[None]] = []
        try:
            for part in self._batches(list(range(len(encoded_keys))), None):
                names = [self.name_of(encoded_keys[i], bool(private and private[i])) for i in part]
                pending = self._start("delete", partial(_delete, names))
                calls.append(pending.future)
                self._finish(pending)
        finally:
            if ended is not None:
                _when_all_done(calls, ended)
        self._count_objects("delete", len(encoded_keys), 0, "failed")

    def ping(self) -> bool:
        """One round trip through the breaker: True if the store answered."""
        try:
            self._call("ping", lambda b: b.ping())
        except Unavailable:
            return False
        return True

    def verify(self, value: RemoteValue, checksum: int, size: int) -> None:
        """Raise Corrupted (DATA_LOSS, counted as where="remote") unless the payload
        is ``size`` bytes hashing to ``checksum`` (the catalog's, or the header's for
        an object this daemon never stored)."""
        if len(value.payload) != size or xxhash.xxh3_64_intdigest(value.payload) != checksum:
            message = (
                f"remote copy of {value.meta.key} does not match its checksum "
                f"{checksum:x} ({len(value.payload)} of {size} bytes)"
            )
            self.report_damage(message)
            raise Corrupted(message)

    def check(self, meta: ObjectMeta, data: memoryview, digest: int | None = None) -> None:
        """Raise Corrupted, counted as ``verify`` does, unless ``data`` (a payload
        that landed where ``read_into`` was told) hashes to the object's checksum.
        ``digest``: its xxh3-64 when the reading thread computed it already
        (``LandedValue.digest``), else it is computed here."""
        if digest is None:
            digest = xxhash.xxh3_64_intdigest(data)
        if len(data) != meta.size_bytes or digest != meta.checksum:
            message = (
                f"remote copy of {meta.key} does not match its checksum {meta.checksum:x} "
                f"({len(data)} of {meta.size_bytes} bytes)"
            )
            self.report_damage(message)
            raise Corrupted(message)

    def copy_verified(self, value: RemoteValue, checksum: int, into: memoryview) -> None:
        """Copy the payload into ``into`` (exactly its size), hashing the copy as it
        is made (each piece while it is still in cache): raise Corrupted, counted
        as ``verify`` does, unless the copy hashes to ``checksum``. The payload
        itself is then verified too (it is what was copied)."""
        payload = value.payload
        size = len(payload)
        if len(into) != size:
            raise InvariantViolation(f"copy of {size} bytes into a buffer of {len(into)}")
        hasher = xxhash.xxh3_64()
        src = np.frombuffer(payload, dtype=np.uint8)
        dst = np.frombuffer(into, dtype=np.uint8)
        for start in range(0, size, VERIFY_PIECE_BYTES):
            end = min(size, start + VERIFY_PIECE_BYTES)
            np.copyto(dst[start:end], src[start:end])  # lets other threads run meanwhile
            hasher.update(into[start:end])
        if hasher.intdigest() != checksum:
            message = f"remote copy of {value.meta.key} does not match its checksum {checksum:x}"
            self.report_damage(message)
            raise Corrupted(message)

    def report_damage(self, message: str) -> None:
        self.metrics.checksum_failures.labels("remote").inc()
        log.error("remote data damaged, not served: %s", message)

    def close(self) -> None:
        """Stop taking work; wait (up to the deadline) for running calls, then
        close the client unless a call is still stuck in it."""
        deadline = time.monotonic() + self.config.op_timeout_s
        held = 0
        for _ in range(self.config.max_inflight):
            if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
            held += 1
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._backend is None:
            return
        if held == self.config.max_inflight:
            self._backend.close()
        else:
            log.warning("remote tier closed with calls still blocked in its client")

    # -- internals ----------------------------------------------------------------------
    def _batches(self, index: list[int], sizes: list[int] | None) -> list[list[int]]:
        """``index`` cut into batches of at most batch_max_objects (and, with sizes,
        batch_max_bytes; an object larger than that goes alone)."""
        cfg = self.config
        out: list[list[int]] = []
        cur: list[int] = []
        cur_bytes = 0
        for pos, i in enumerate(index):
            size = sizes[pos] if sizes is not None else 0
            if cur and (
                len(cur) >= cfg.batch_max_objects or cur_bytes + size > cfg.batch_max_bytes
            ):
                out.append(cur)
                cur, cur_bytes = [], 0
            cur.append(i)
            cur_bytes += size
        if cur:
            out.append(cur)
        return out

    def _count_objects(self, op: str, ok: int, other: int, other_result: str) -> None:
        if ok:
            self.metrics.remote_objects.labels(op, "ok").inc(ok)
        if other:
            self.metrics.remote_objects.labels(op, other_result).inc(other)

    def _call(self, op: str, fn: Callable[[RemoteBackend], T]) -> T:
        """Run ``fn`` on the pool within the deadline, with retries, through the breaker."""
        return self._finish(self._start(op, fn))

    def _start(
        self,
        op: str,
        fn: Callable[[RemoteBackend], T],
        *,
        slot_wait_s: float = 0.0,
        slot_held: bool = False,
    ) -> _Pending[T]:
        """Submit ``fn`` to the pool (a slot, then the breaker); ``_finish`` waits
        for it. ``slot_held``: the caller already took the slot."""
        m = self.metrics
        if not slot_held and not self._slots.acquire(
            blocking=slot_wait_s > 0, timeout=slot_wait_s if slot_wait_s > 0 else None
        ):
            m.remote_ops.labels(op, "refused").inc()
            raise Unavailable(
                f"remote tier ({self.device}): {self.config.max_inflight} operations already "
                "in flight (tiers.remote.max_inflight)"
            )
        if not self.breaker.allow():
            self._slots.release()
            m.remote_ops.labels(op, "refused").inc()
            raise Unavailable(
                f"remote tier ({self.device}) is unavailable after repeated failures; "
                f"it is probed again every {self.config.breaker_open_s:g}s"
            )
        deadline = time.monotonic() + self.config.op_timeout_s
        retries = self.config.retries

        def attempt() -> T:
            for n in range(retries + 1):
                try:
                    return fn(self._client())
                except RemoteError:
                    if n == retries or time.monotonic() + RETRY_BACKOFF_S >= deadline:
                        raise
                time.sleep(RETRY_BACKOFF_S)
            raise RemoteError("no attempt was made")  # unreachable: the loop returns or raises

        started = time.perf_counter()
        try:
            future = self._pool.submit(attempt)
        except RuntimeError:  # the pool is shut down: the daemon is stopping
            self._slots.release()
            self.breaker.failure()
            raise Unavailable("remote tier is closed") from None
        future.add_done_callback(lambda _f: self._slots.release())
        return _Pending(op, future, deadline, started)

    def _finish(self, pending: _Pending[T]) -> T:
        """Wait for a submitted operation until its deadline; count the outcome."""
        m = self.metrics
        op = pending.op
        try:
            result = pending.future.result(timeout=max(0.0, pending.deadline - time.monotonic()))
        except FutureTimeout:
            self._failed(op, "timeout", f"no answer within {self.config.op_timeout_s:g}s")
        except RemoteError as exc:
            self._failed(op, "failed", str(exc))
        except Exception as exc:  # a client library raising something else
            log.exception("remote %s raised", op)
            self._failed(op, "failed", f"{type(exc).__name__}: {exc}")
        m.remote_seconds.labels(op).observe(time.perf_counter() - pending.started)
        m.remote_ops.labels(op, "ok").inc()
        if self.breaker.success():
            m.remote_available.set(1)
            log.warning("remote tier %s is available again", self.device)
        return result

    def _failed(self, op: str, result: str, why: str) -> NoReturn:
        m = self.metrics
        m.remote_ops.labels(op, result).inc()
        probing = self.breaker.state is State.HALF_OPEN
        if self.breaker.failure():
            m.remote_breaker_trips.inc()
            m.remote_available.set(0)
            backend = self._backend
            if backend is not None and backend.reconnect_after_trip:
                self._stale = True
            log.warning(
                "remote tier %s is failing (%s %s: %s): remote operations are refused for "
                "%gs; local tiers keep serving",
                self.device, op, result, why, self.config.breaker_open_s,
            )  # fmt: skip
        elif probing:
            log.warning("remote tier %s is still unavailable (%s: %s)", self.device, op, why)
        else:
            log.warning("remote %s on %s failed (%s): %s", op, self.device, result, why)
        raise Unavailable(f"remote tier ({self.device}) {op} failed ({result}): {why}")
