"""Path selection and batching for object bytes: shared memory, bulk TCP, gRPC.

``DataPlane`` is what ``Client.put`` / ``Client.get`` call underneath, and the
buffer-level interface other sub-clients (e.g. the KV client) use directly:
``put_many(items)`` and ``get_many(refs, out=...)`` move a batch of objects
with one negotiation, ``lease_many(refs)`` reads in place without copying.

Choosing a path (once per client, after a ``Hello`` to the daemon):

1. ``shm`` — the daemon reports this host's id, and the arena file it names
   opens here and is that very file (device, inode, size): the client maps it
   once and copies bytes in and out of it under leases;
2. ``bulk`` — the daemon runs the bulk channel: bytes go over a plain TCP
   connection (on the daemon's host: its Unix socket) after a gRPC ticket, or
   on a bulk session. The channel is plaintext: a client whose gRPC channel
   uses TLS only ever uses its Unix socket, never TCP (``_bulk_address``);
   on another host such a client has no bulk path;
3. ``grpc`` — the ObjectService streams (always available).

Below ``shm_min_bytes`` (2 MiB) on average per object, a batch prefers the bulk
channel to shared memory when both are offered: one round trip (the bytes
follow the request, or the reply) beats shared memory's two (Reserve and
Commit, Lease and Release) until the values are large enough for the saved
kernel copy to pay for the second round trip. Measured here (single objects,
p50, ``tiermem serve`` on this 2-core VM): 256 KiB put 1.18 ms by bulk
against 2.29 ms by shared memory, get 0.80 against 1.13; 1 MiB 1.13 / 1.83
and 0.69 / 0.90; 2 MiB 2.63 / 2.54 and 1.47 / 1.30; 4 MiB 4.76 / 3.63 and
2.55 / 1.79. A get knows its values' sizes only from the ``out`` buffers it
is given; without them it keeps the order above.

Values smaller than ``threshold_bytes`` always use gRPC (on a get the size is
unknown beforehand, so small values come back inline in the fast path's
reply). A path that cannot serve a request (switched off, arena full, too many
leases, connection broken, a limit: the daemon's RESOURCE_EXHAUSTED or
FAILED_PRECONDITION) hands it to the next one; errors about the request itself
(bad key, missing object, checksum mismatch) are raised as they are. A path
forced with ``path=`` has no next one: the daemon's refusal there is raised as
it is (a size cap: CapacityError with the daemon's message), a path that broke
as FailedPreconditionError.

Verification: with ``verify``, bulk and gRPC puts carry an xxh3-64/CRC-32 of
the value and gets are checked against the daemon's checksum. Shared-memory
transfers are not hashed by the client: nothing crosses a wire, and the daemon
hashes every committed arena extent itself.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import grpc
import numpy as np
from google.protobuf.message import Message

from tiermem.client import _wire
from tiermem.client._transport import Transport
from tiermem.client.errors import (
    CapacityError,
    DeadlineError,
    FailedPreconditionError,
    InvalidArgumentError,
    TiermemClientError,
    UnavailableError,
    error_for,
)
from tiermem.client.fastpath.bulk import BulkBroken, BulkPool, BulkUnreachable, unix_connect
from tiermem.client.fastpath.copy import copy_bytes
from tiermem.client.fastpath.session import (
    NoAnswer,
    OpeningTimedOut,
    Session,
    SessionPool,
    SessionsFull,
    SessionsUnsupported,
    StaleSession,
)
from tiermem.client.fastpath.shm import Arena, ArenaMismatch
from tiermem.client.sessions import SESSION_METADATA
from tiermem.client.types import Kind, ObjectInfo, Profile
from tiermem.dataplane_wire import (
    OP_COMMIT,
    OP_LEASE,
    OP_LOOKUP,
    OP_RELEASE,
    OP_RESERVE,
    VERSION,
    host_id,
)
from tiermem.v1 import (
    common_pb2,
    dataplane_pb2,
    dataplane_pb2_grpc,
    kv_pb2,
    object_pb2,
    object_pb2_grpc,
)

T = TypeVar("T")
M = TypeVar("M", bound=Message)

PATHS = ("shm", "bulk", "grpc")
DEFAULT_THRESHOLD_BYTES = 64 << 10
#: below this mean value size a batch prefers the bulk channel to shared memory
DEFAULT_SHM_MIN_BYTES = 2 << 20
#: Writes into a leased region stop this long before the lease's TTL runs out
#: (checked before every chunk), and reads finished later are discarded.
LEASE_MARGIN_S = 1.0
#: Copies into the arena are cut into chunks so the deadline is checked often.
COPY_CHUNK_BYTES = 16 << 20
#: A bulk channel that broke is not tried again for this long.
BULK_COOLDOWN_S = 30.0
#: Session openings in a row that may run out of their calls' time before the
#: bulk channel is taken for down (then BULK_COOLDOWN_S): one short-deadline
#: call meeting a momentarily slow daemon says nothing about the channel, a
#: listener that never answers times out every call.
OPENING_TIMEOUTS_BEFORE_COOLDOWN = 3
#: The most a test connection to the daemon's bulk Unix socket waits (a socket
#: on this host connects at once or not at all; a full accept queue is retried).
UNIX_PROBE_S = 1.0
#: How long ``close`` waits for the Release calls still queued to be sent.
RELEASE_CLOSE_WAIT_S = 5.0
#: The thread sending Release calls stops after this long without one.
RELEASER_IDLE_S = 10.0
#: How long a Release may take when the call that leased has already returned
#: (the releasing thread's gRPC calls; ``release_leases`` of a sub-client done
#: with a lease; a shared-memory get whose own time ran out before its release
#: went). A release made during a call gets what is left of that call's time
#: instead. Nobody waits for a release's answer, and one never made only leaves
#: the lease to run to its TTL (the daemon's ``dataplane.lease_ttl_s``, 30 s by
#: default): a daemon answers a release in well under a millisecond (it drops an
#: in-memory lease), so 2 s allows for a loaded one, while a daemon that stalls
#: holds the releasing thread (and ``close``, which waits RELEASE_CLOSE_WAIT_S
#: for its queue) only briefly. The bulk channel's I/O timeout and the client's
#: default call timeout (30 s each) bound other work and are far too long here.
RELEASE_TIMEOUT_S = 2.0

Buffer = Any  # bytes-like or numpy array
#: ``target(position in the batch, metadata)``: where a value read lands (a
#: writable flat byte view at least ``size_bytes`` long), None = a new buffer.
_Target = Callable[[int, "_Meta"], "memoryview | None"]
#: ``allocate(metadata, index of the object in the request)`` for ``get_many``.
Allocate = Callable[[ObjectInfo, int], "memoryview | None"]
#: The type of the new buffers ``get_many`` makes where none was given.
Fresh = type[bytes] | type[bytearray]


@dataclass(frozen=True, slots=True)
class PutItem:
    """One object to store. ``data``: bytes-like or a C-contiguous numpy array."""

    kind: Kind
    key: str
    data: Buffer
    namespace: str | None = None
    profile: Profile | None = None
    session: str = ""
    dtype: str = ""
    shape: tuple[int, ...] = ()
    memory_format: str = ""
    if_absent: bool = False


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: Kind
    key: str
    namespace: str | None = None


class _Meta:
    """An object's metadata as a reply carried it, made into an ``ObjectInfo``
    once, when first asked for (~8 µs an object: a caller that only wants the
    bytes, a batch into its own buffers, never pays it). One slot holds
    either form, so threads asking at once at worst both convert."""

    __slots__ = ("_src",)

    def __init__(self, src: ObjectInfo | common_pb2.ObjectMeta) -> None:
        self._src = src

    def info(self) -> ObjectInfo:
        src = self._src
        if not isinstance(src, ObjectInfo):
            src = self._src = _wire.info(src)
        return src

    @property
    def checksum(self) -> int:
        src = self._src
        return src.checksum if isinstance(src, ObjectInfo) else int(src.checksum.value)


def _metas(items: Sequence[Any]) -> list[_Meta]:
    """The metadata of a reply's objects (leases or ticket objects: each has
    ``meta`` and ``inline``), left as messages to convert when asked for,
    unless the reply carries inline values: a result holding a message of the
    reply would keep those values alive beside their copies."""
    if any(item.inline for item in items):
        return [_Meta(_wire.info(item.meta)) for item in items]
    return [_Meta(item.meta) for item in items]


class Fetched:
    """A value read: its metadata, its bytes and the path that carried them.
    ``data`` is a view of the caller's ``out`` buffer when one was given.
    ``info`` is converted from the reply's message when first read."""

    __slots__ = ("_meta", "data", "path")

    def __init__(self, meta: ObjectInfo | _Meta, data: memoryview, path: str) -> None:
        self._meta = meta if isinstance(meta, _Meta) else _Meta(meta)
        self.data = data
        self.path = path

    @property
    def info(self) -> ObjectInfo:
        return self._meta.info()

    def verify(self) -> None:
        """Raise ChecksumError unless the bytes match the daemon's checksum
        (the metadata is converted only for the error's message)."""
        _wire.verify_checksum(self._meta.checksum, self.data, self._meta.info)

    def __repr__(self) -> str:
        return f"Fetched(info={self.info!r}, data=<{len(self.data)} bytes>, path={self.path!r})"


@dataclass(slots=True)
class _Counter:
    puts: int = 0
    gets: int = 0
    put_bytes: int = 0
    get_bytes: int = 0


def _is_local_target(address: str) -> bool:
    """Whether a gRPC target names this host: a Unix socket, ``localhost`` or a
    loopback address."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    if host.removeprefix("dns:///").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Fallback(Exception):
    """This path cannot serve the request; try the next one. ``refused``: the
    daemon's answer when it refused the request on this path ('not now / not
    here', a limit), None when the path itself failed (switched off, broken)."""

    def __init__(self, refused: TiermemClientError | None = None) -> None:
        super().__init__(refused.message if refused is not None else "")
        self.refused = refused


@dataclass(slots=True)
class _Offer:
    """What the daemon offered in Hello, as this client can use it."""

    hello: dataplane_pb2.HelloResponse | None
    arena: Arena | None = None
    bulk_address: str = ""
    paths: list[str] = field(default_factory=lambda: ["grpc"])


class DataPlane:
    """Fast paths of one client. Thread-safe."""

    def __init__(
        self,
        transport: Transport,
        *,
        namespace: str,
        verify: bool = True,
        chunk_bytes: int = _wire.DEFAULT_CHUNK_BYTES,
        threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
        paths: Sequence[str] = PATHS,
        lease_ttl_ms: int = 0,
        populate: bool = True,
        shm_min_bytes: int = DEFAULT_SHM_MIN_BYTES,
        bulk_unix: bool = True,
    ) -> None:
        """``paths``: the paths this client may use, in order of preference (gRPC is
        always the last resort). ``lease_ttl_ms``: asked for shared-memory leases
        (0 = the daemon's default). ``populate``: pre-fault the arena mapping.
        ``shm_min_bytes``: below this mean value size a batch goes by the bulk
        channel before shared memory (0: shared memory always first).
        ``bulk_unix``: on the daemon's host, reach the bulk channel by its Unix
        socket (``_local_bulk_address``)."""
        unknown = set(paths) - set(PATHS)
        if unknown:
            raise ValueError(f"unknown data paths {sorted(unknown)}; known: {PATHS}")
        self._transport = transport
        self._namespace = namespace
        self.verify = verify
        self.chunk_bytes = chunk_bytes
        self.threshold_bytes = threshold_bytes
        self.shm_min_bytes = shm_min_bytes
        self._allowed = [p for p in PATHS if p in paths]
        self._lease_ttl_ms = lease_ttl_ms
        self._populate = populate
        self._bulk_unix = bulk_unix
        self._dp = dataplane_pb2_grpc.DataPlaneServiceStub(transport.channel)
        self._objects = object_pb2_grpc.ObjectServiceStub(transport.channel)
        token = dict(transport.metadata).get("authorization", "")
        self._bulk = BulkPool(token.encode())
        acting = dict(transport.metadata).get(SESSION_METADATA, "")
        self._sessions = SessionPool(token.encode(), acting)
        # unary requests (lookups, shared-memory control, Stat/Delete/List) go on a
        # bulk session unless the daemon said its sessions do not take that op
        self._session_ops_refused: set[int] = set()
        # a TLS client keeps on its TLS channel what it would carry (small values,
        # metadata calls, lookups): the bulk channel is plaintext
        self._plaintext_session_ok = not transport.secure
        self._lock = threading.Lock()
        self._offer: _Offer | None = None
        self._bulk_down_until = 0.0
        self._opening_timeouts = 0  # in a row (see OPENING_TIMEOUTS_BEFORE_COOLDOWN)
        # "file": blob downloads read by the client from the daemon's payload file
        self._stats = {p: _Counter() for p in (*PATHS, "file")}
        # Release calls are sent by one thread of the plane's (``_release_soon``)
        self._releases: queue.SimpleQueue[list[int] | None] = queue.SimpleQueue()
        self._releaser: threading.Thread | None = None

    # -- what the daemon offers ---------------------------------------------------------
    def _call(self, fn: Callable[[float], T], timeout_s: float | None) -> T:
        """``fn(timeout)`` through the transport (UNAVAILABLE retried): each
        attempt gets what is left of ``timeout_s`` (``Transport.call``), so
        retries never outlast it."""
        return self._transport.call(fn, timeout_s)

    def _timeout(self, timeout_s: float | None) -> float:
        """A call's timeout: its own, else the client's (as gRPC calls get)."""
        return self._transport.timeout_s if timeout_s is None else timeout_s

    def deadline_for(self, timeout_s: float | None) -> float:
        """When a call starting now with ``timeout_s`` (None: the client's) must
        be done (``time.monotonic``). A call's network steps (negotiating the
        offer, opening a session, each request and retry, a fallback to gRPC)
        each get what is left of it (``time_left``), not the whole timeout."""
        return time.monotonic() + self._timeout(timeout_s)

    @staticmethod
    def time_left(deadline: float) -> float:
        """What is left of a call's time (``deadline_for``); DeadlineError when
        nothing is, before the next step sends anything."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise error_for("DEADLINE_EXCEEDED", "the call's timeout ran out before its next step")
        return left

    @property
    def negotiated(self) -> bool:
        """Whether the offer is known (``offer`` then asks the daemon nothing)."""
        return self._offer is not None

    def offer(self, timeout_s: float | None = None) -> _Offer:
        with self._lock:
            if self._offer is not None:
                return self._offer
        offer = self._negotiate(timeout_s)
        with self._lock:
            if self._offer is None:
                self._offer = offer
            elif offer.arena is not None:
                offer.arena.close()
            return self._offer

    def _negotiate(self, timeout_s: float | None) -> _Offer:
        """Ask the daemon what it offers, within ``timeout_s`` (the calling
        call's: what it takes counts against that call). A Hello cut short by
        it raises DeadlineError and nothing is remembered: the next call asks
        again, rather than every later call of the client going by gRPC."""
        if self._allowed == ["grpc"]:
            return _Offer(None)
        deadline = self.deadline_for(timeout_s)
        try:
            hello = self._call(
                lambda t: self._dp.Hello(
                    dataplane_pb2.HelloRequest(), timeout=t, metadata=self._transport.metadata
                ),
                timeout_s,
            )
        except (UnavailableError, DeadlineError):
            raise
        except TiermemClientError:
            return _Offer(None)  # e.g. UNIMPLEMENTED: a daemon without the data plane
        offer = _Offer(hello, paths=[])
        if "shm" in self._allowed and hello.HasField("arena") and hello.host_id == host_id():
            try:
                offer.arena = Arena(hello.arena, populate=self._populate)
                offer.paths.append("shm")
            except ArenaMismatch:
                pass
        if "bulk" in self._allowed and hello.bulk_protocol == VERSION:
            offer.bulk_address = self._bulk_address(hello, deadline)
            if offer.bulk_address:
                offer.paths.append("bulk")
        offer.paths.append("grpc")
        return offer

    def _bulk_address(self, hello: dataplane_pb2.HelloResponse, deadline: float | None) -> str:
        """The bulk address this client dials ("" = none): the daemon's Unix
        socket when this client should use it (``_local_bulk_address``), else
        its TCP address. Never TCP for a client whose gRPC channel uses TLS:
        the bulk channel is plaintext, and every connection to it carries the
        client's token (in its preamble) and the values' bytes, which TLS was
        chosen to protect; such a client moves them over gRPC instead. A daemon
        under TLS offers no TCP address; one that does (older, or
        misconfigured) is not believed."""
        local = self._local_bulk_address(hello, deadline)
        if local or self._transport.secure or not hello.bulk_address:
            return local
        return self._reachable(hello.bulk_address)

    def _local_bulk_address(
        self, hello: dataplane_pb2.HelloResponse, deadline: float | None = None
    ) -> str:
        """The daemon's Unix-socket bulk address if this client should use it: on
        the daemon's host (same boot id, and the socket accepts a connection: a
        container in another network namespace cannot reach it), and known to the
        daemon as the same caller on either channel (a token, or a gRPC target on
        this host: the daemon names all of them one host). "" = use TCP. The
        test connection waits at most UNIX_PROBE_S and what is left of the call
        (``deadline``, None: no call); one the call's deadline cut short says
        nothing about the socket: DeadlineError, nothing remembered."""
        if not (self._bulk_unix and hello.bulk_unix_address and hello.host_id == host_id()):
            return ""
        if not self._bulk.credential and not _is_local_target(self._transport.address):
            return ""
        probe_s = UNIX_PROBE_S if deadline is None else min(UNIX_PROBE_S, self.time_left(deadline))
        try:
            unix_connect(hello.bulk_unix_address, probe_s).close()
        except OSError:
            if deadline is not None:
                self.time_left(deadline)  # (cut short by the call: DeadlineError)
            return ""
        return hello.bulk_unix_address

    def _reachable(self, address: str) -> str:
        """The bulk address to dial: a wildcard host is replaced by the daemon's gRPC host."""
        if address.startswith("unix:"):
            return address
        host, _, port = address.rpartition(":")
        if host.strip("[]") in ("", "0.0.0.0", "::"):
            target = self._transport.address
            # a gRPC Unix-socket target names no host: the daemon is on this one
            host = "127.0.0.1" if target.startswith("unix") else target.rpartition(":")[0]
        return f"{host}:{port}"

    def _reset(self, offer: _Offer) -> None:
        """Forget a stale offer (e.g. the daemon restarted with a new arena)."""
        with self._lock:
            if self._offer is offer:
                self._offer = None
        if offer.arena is not None:
            offer.arena.close()

    def paths(self, timeout_s: float | None = None) -> list[str]:
        """The paths this client would use for a large value, best first.
        ``timeout_s``: what is left of the calling call's time, should the offer
        be negotiated (a client's first call; None: the client's timeout)."""
        offer = self.offer(timeout_s)
        return [p for p in offer.paths if p != "bulk" or self._bulk_usable()]

    def _bulk_usable(self) -> bool:
        return time.monotonic() >= self._bulk_down_until

    # -- for other sub-clients moving bytes over the same paths (e.g. blobs) --------------
    @property
    def bulk_pool(self) -> BulkPool:
        return self._bulk

    def bulk_target(self, ticket_address: str) -> str:
        """Where to present a ticket (``_ticket_target``); BulkUnreachable when
        this client may not open a bulk connection there."""
        return self._ticket_target(ticket_address, self.offer())

    def _ticket_target(self, ticket_address: str, offer: _Offer) -> str:
        """Where to present a ticket: its address, else the one offered in
        Hello. A TLS client presents it on the offer's Unix socket whatever the
        ticket names (an older daemon names its TCP port there); with no Unix
        socket offered it may not present it at all: BulkUnreachable, nothing
        sent (the caller goes by gRPC)."""
        if self._transport.secure:
            if not offer.bulk_address.startswith("unix:"):
                raise BulkUnreachable("a TLS client opens no plaintext TCP bulk connection")
            return offer.bulk_address
        return self._reachable(ticket_address or offer.bulk_address)

    def bulk_broken(self) -> None:
        """The bulk channel failed: do not try it again for a while."""
        self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S

    def release_leases(self, lease_ids: Sequence[int]) -> None:
        """Release shared-memory read leases without waiting for the answer
        (within RELEASE_TIMEOUT_S: the call that leased them has returned)."""
        self._release_soon(lease_ids)

    def count(self, path: str, *, puts: int = 0, gets: int = 0, nbytes: int = 0) -> None:
        """Add to ``path_stats`` (bytes moved by a sub-client)."""
        self._count(path, puts, gets, nbytes)

    def path_stats(self) -> dict[str, dict[str, int]]:
        """Objects and bytes moved per path (shm, bulk, grpc, file) by this client."""
        with self._lock:
            return {
                p: {
                    "puts": c.puts,
                    "gets": c.gets,
                    "put_bytes": c.put_bytes,
                    "get_bytes": c.get_bytes,
                }
                for p, c in self._stats.items()
            }

    def _count(self, path: str, puts: int = 0, gets: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            c = self._stats[path]
            c.puts += puts
            c.gets += gets
            if puts:
                c.put_bytes += nbytes
            else:
                c.get_bytes += nbytes

    def close(self) -> None:
        with self._lock:
            releaser, self._releaser = self._releaser, None
        if releaser is not None:  # it sends what is queued, then stops
            self._releases.put(None)
            releaser.join(RELEASE_CLOSE_WAIT_S)
        self._bulk.close()
        self._sessions.close()
        with self._lock:
            offer, self._offer = self._offer, None
        if offer is not None and offer.arena is not None:
            offer.arena.close()

    # -- put ------------------------------------------------------------------------------
    def put_many(
        self,
        items: Sequence[PutItem],
        *,
        path: str | None = None,
        timeout_s: float | None = None,
    ) -> list[ObjectInfo]:
        """Store objects; values of ``threshold_bytes`` and more go by the fastest
        path (one negotiation per batch), smaller ones together in one put on a
        bulk session when the daemon offers sessions (else one gRPC Put each).
        Each group travelling together is committed as one unit (all or none).
        ``path`` forces a path (it must be available). Returns their metadata in
        order."""
        deadline = self.deadline_for(timeout_s)  # every batch's, the offer's too
        views = [_wire.as_view(item.data) for item in items]
        out: list[ObjectInfo | None] = [None] * len(items)
        large = [i for i, v in enumerate(views) if len(v) >= self.threshold_bytes]
        small = [i for i, v in enumerate(views) if len(v) < self.threshold_bytes]
        if path is not None:
            large, small = list(range(len(items))), []
        if small:
            for start, infos in self._batched(
                small,
                lambda idx: self._put_small(
                    [items[i] for i in idx], [views[i] for i in idx], deadline
                ),
                deadline,
            ):
                for j, info in enumerate(infos):
                    out[small[start + j]] = info
        if large:
            for start, infos in self._batched(
                large,
                lambda idx: self._put_fast(
                    [items[i] for i in idx], [views[i] for i in idx], path, deadline
                ),
                deadline,
            ):
                for j, info in enumerate(infos):
                    out[large[start + j]] = info
        return [info for info in out if info is not None]

    def _batched(
        self, indices: list[int], run: Callable[[list[int]], list[T]], deadline: float
    ) -> Iterator[tuple[int, list[T]]]:
        """``run`` over batches the daemon takes; ``deadline``: the call's, which
        negotiating the offer (a client's first call) counts against."""
        offer = self.offer(self.time_left(deadline))
        limit = offer.hello.max_batch_objects if offer.hello is not None else 0
        limit = limit or len(indices)
        for start in range(0, len(indices), limit):
            yield start, run(indices[start : start + limit])

    def _candidates(
        self,
        path: str | None,
        size_ok: Callable[[str, _Offer], bool],
        mean_bytes: float | None = None,
        deadline: float | None = None,
    ) -> tuple[_Offer, list[str]]:
        """The paths to try in order; ``mean_bytes``: the batch's mean value size,
        when known (smaller than ``shm_min_bytes``: bulk before shm); ``deadline``:
        the call's, should the offer be negotiated again (None: no call)."""
        offer = self.offer(None if deadline is None else self.time_left(deadline))
        if path is not None:
            if path not in offer.paths:
                raise FailedPreconditionError(
                    "FAILED_PRECONDITION",
                    f"data path {path!r} is not available (have {offer.paths})",
                )
            return offer, [path]
        paths = [
            p for p in offer.paths if size_ok(p, offer) and (p != "bulk" or self._bulk_usable())
        ]
        if mean_bytes is not None and mean_bytes < self.shm_min_bytes and "bulk" in paths:
            paths.sort(key=lambda p: p != "bulk")  # stable: the others keep their order
        return offer, paths

    def _put_fast(
        self,
        items: list[PutItem],
        views: list[memoryview],
        path: str | None,
        deadline: float,
    ) -> list[ObjectInfo]:
        """A batch of large values by the first path that serves it; each path
        tried, and each object of the gRPC loop, gets what is left of the call
        (``deadline``) when it starts."""

        def fits(p: str, offer: _Offer) -> bool:
            if p != "shm" or offer.arena is None or offer.hello is None:
                return True
            low = offer.hello.arena_min_bytes
            return all(low <= len(v) <= offer.arena.size_bytes for v in views)

        offer, candidates = self._candidates(
            path, fits, sum(len(v) for v in views) / max(1, len(views)), deadline
        )
        return self._first_that_serves(
            path,
            candidates,
            {
                "shm": lambda: self._put_shm(offer, items, views, deadline),
                "bulk": lambda: self._put_bulk(offer, items, views, deadline),
            },
            lambda: [
                self._put_grpc(item, view, self.time_left(deadline))
                for item, view in zip(items, views, strict=True)
            ],
        )

    @staticmethod
    def _first_that_serves(
        forced: str | None,
        candidates: list[str],
        fast: dict[str, Callable[[], list[T]]],
        grpc_path: Callable[[], list[T]],
    ) -> list[T]:
        """Try the fast paths in order; gRPC serves what none of them could.

        A forced path that cannot serve is an error, not a fallback: the daemon's
        own answer when it refused the request there (RESOURCE_EXHAUSTED for a
        size cap or a budget, FAILED_PRECONDITION), else FailedPreconditionError.
        Unforced, a refused path hands the request on even when the refusal is a
        size cap (the client cannot tell a cap from a budget that is full now):
        the gRPC path is then refused too, and its answer is the daemon's."""
        for p in candidates:
            attempt = fast.get(p)
            if attempt is None:
                continue
            try:
                return attempt()
            except _Fallback as fallback:
                if forced is None:
                    continue
                refused = fallback.refused
                if isinstance(refused, (CapacityError, FailedPreconditionError)):
                    raise refused from None
                why = f": {refused.message}" if refused is not None else ""
                raise FailedPreconditionError(
                    "FAILED_PRECONDITION",
                    f"data path {forced!r} could not serve the request{why}",
                ) from None
        return grpc_path()

    def _header(self, item: PutItem, view: memoryview, verify: bool) -> object_pb2.PutHeader:
        return _wire.put_header(
            item.namespace or self._namespace,
            item.kind,
            item.key,
            view,
            profile=item.profile,
            session=item.session,
            dtype=item.dtype,
            shape=item.shape,
            memory_format=item.memory_format,
            if_absent=item.if_absent,
            verify=verify,
        )

    def _put_small(
        self, items: list[PutItem], views: list[memoryview], deadline: float
    ) -> list[ObjectInfo]:
        """Small values: one put on a bulk session (their bytes follow the request
        at once: one round trip, no gRPC call); one gRPC Put each when no session
        can carry them, the daemon says 'not now', or the client uses TLS. Each
        step gets what is left of the call (``deadline``) when it starts."""
        address = None
        if self._plaintext_session_ok:
            address = self._session_address(self.time_left(deadline))
        if address is not None:
            request = dataplane_pb2.BeginPutRequest(
                objects=[
                    self._header(item, view, self.verify)
                    for item, view in zip(items, views, strict=True)
                ]
            )
            left = self.time_left(deadline)
            try:
                done = self._via_session(
                    address, lambda s: s.put(request, views, self._refusal, left), left
                )
            except _Fallback:
                done = None
            if done is not None:
                self._count("bulk", puts=len(views), nbytes=sum(len(v) for v in views))
                return [_wire.info(m) for m in done.metas]
        return [
            self._put_grpc(item, view, self.time_left(deadline))
            for item, view in zip(items, views, strict=True)
        ]

    def _put_grpc(self, item: PutItem, view: memoryview, timeout_s: float | None) -> ObjectInfo:
        header = self._header(item, view, self.verify)

        def call(timeout: float) -> ObjectInfo:
            reply = self._objects.Put(
                _wire.put_requests(header, view, self.chunk_bytes),
                timeout=timeout,
                metadata=self._transport.metadata,
            )
            return _wire.info(reply.meta)

        info = self._call(call, timeout_s)
        self._count("grpc", puts=1, nbytes=len(view))
        return info

    def _put_shm(
        self, offer: _Offer, items: list[PutItem], views: list[memoryview], deadline: float
    ) -> list[ObjectInfo]:
        """Reserve, copy in, Commit; the Reserve, the Commit and a Release after
        a failure each get what is left of the call (``deadline``) then."""
        arena = offer.arena
        if arena is None:
            raise _Fallback()
        request = dataplane_pb2.ReserveRequest(
            objects=[
                self._header(item, view, False) for item, view in zip(items, views, strict=True)
            ],
            ttl_ms=self._lease_ttl_ms,
        )
        started = time.monotonic()
        reply, _carrier = self._control(
            OP_RESERVE,
            request,
            dataplane_pb2.ReserveResponse(),
            lambda t: self._dp.Reserve(request, timeout=t, metadata=self._transport.metadata),
            self.time_left(deadline),
            negotiate=True,
        )
        lease_ids = [lease.lease_id for lease in reply.leases]
        if reply.arena_id != arena.arena_id:
            self._release_quietly(lease_ids, deadline)
            self._reset(offer)
            raise _Fallback()
        expiry = started + reply.ttl_ms / 1000.0 - min(LEASE_MARGIN_S, reply.ttl_ms / 4000.0)
        try:
            for lease, view in zip(reply.leases, views, strict=True):
                _copy_in(arena.region(lease.offset, lease.length), view, expiry)
        except BaseException:
            self._release_quietly(lease_ids, deadline)
            raise
        commit = dataplane_pb2.CommitRequest(
            items=[dataplane_pb2.CommitItem(lease_id=x) for x in lease_ids]
        )
        try:
            done, _carrier = self._control(
                OP_COMMIT,
                commit,
                dataplane_pb2.CommitResponse(),
                lambda t: self._dp.Commit(commit, timeout=t, metadata=self._transport.metadata),
                self.time_left(deadline),
            )
        except FailedPreconditionError:
            raise _Fallback() from None  # the leases expired under a very slow writer
        self._count("shm", puts=len(views), nbytes=sum(len(v) for v in views))
        return [_wire.info(m) for m in done.metas]

    def _put_bulk(
        self, offer: _Offer, items: list[PutItem], views: list[memoryview], deadline: float
    ) -> list[ObjectInfo]:
        """On a bulk session, else by a ticket negotiated over gRPC; each step
        gets what is left of the call (``deadline``) when it starts."""
        request = dataplane_pb2.BeginPutRequest(
            objects=[
                self._header(item, view, self.verify)
                for item, view in zip(items, views, strict=True)
            ]
        )

        left = self.time_left(deadline)

        def put(session: Session) -> dataplane_pb2.TransferStatus:
            return session.put(request, views, self._refusal, left)

        done = self._via_session(self._reachable(offer.bulk_address), put, left)
        if done is not None:
            self._count("bulk", puts=len(views), nbytes=sum(len(v) for v in views))
            return [_wire.info(m) for m in done.metas]
        ticket = self._negotiate_call(
            lambda t: self._dp.BeginPut(request, timeout=t, metadata=self._transport.metadata),
            self.time_left(deadline),
        )
        try:
            status = self._bulk.put(  # its bytes too end by the call's deadline
                self._ticket_target(ticket.address, offer),
                ticket.ticket_id,
                views,
                deadline,
            )
        except BulkBroken:
            self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S
            raise _Fallback() from None
        self._count("bulk", puts=len(views), nbytes=sum(len(v) for v in views))
        return [_wire.info(m) for m in status.metas]

    def lookup_prefix(
        self, request: kv_pb2.LookupPrefixRequest, timeout_s: float | None = None
    ) -> kv_pb2.LookupPrefixResponse | None:
        """KvService.LookupPrefix over a bulk session (no gRPC call: a framed
        request on a pooled connection); None when no session can carry it (the
        caller then uses gRPC). The daemon's refusals are raised as over gRPC."""
        return self.unary(OP_LOOKUP, request, kv_pb2.LookupPrefixResponse(), timeout_s)

    def unary(
        self, op: int, request: Message, reply: M, timeout_s: float | None = None
    ) -> M | None:
        """A request answered by one message (``OP_LOOKUP``, ``OP_STAT``,
        ``OP_DELETE``, ``OP_LIST``: the gRPC method's own messages) on a bulk
        session, parsed into ``reply``; None when no session can carry it (the
        caller then calls gRPC). The daemon's refusals are raised as over gRPC."""
        if not self._plaintext_session_ok:
            return None
        try:
            return self._on_session(op, request, reply, timeout_s)
        except _Fallback:
            return None

    def _control(
        self,
        op: int,
        request: Message,
        reply: M,
        grpc_call: Callable[[float], M],
        timeout_s: float | None,
        *,
        negotiate: bool = False,
    ) -> tuple[M, str]:
        """A shared-memory control request (lease, release, reserve, commit): on a
        bulk session when the daemon takes them there (no gRPC call), else over
        gRPC; returns the reply and the channel that carried it ("bulk" or
        "grpc"). ``negotiate``: a path's first call ('not now / not here'
        answers mean: try the next path, see ``_negotiate_call``). gRPC after a
        session that broke gets what the session left of ``timeout_s``."""
        deadline = self.deadline_for(timeout_s)
        try:
            got = self._on_session(op, request, reply, timeout_s)
        except (FailedPreconditionError, CapacityError) as exc:
            if negotiate:
                raise _Fallback(exc) from exc
            raise
        except _Fallback:
            got = None  # the session broke: the same request over gRPC
        if got is not None:
            return got, "bulk"
        if negotiate:
            return self._negotiate_call(grpc_call, self.time_left(deadline)), "grpc"
        return self._call(grpc_call, self.time_left(deadline)), "grpc"

    @overload
    def _on_session(
        self, op: int, request: Message, reply: M, timeout_s: float | None = None
    ) -> M | None: ...

    @overload
    def _on_session(
        self, op: int, request: Message, reply: None, timeout_s: float | None = None
    ) -> bool | None: ...

    def _on_session(
        self, op: int, request: Message, reply: M | None, timeout_s: float | None = None
    ) -> M | bool | None:
        """``request`` answered on a bulk session into ``reply`` (``reply`` None:
        sent without waiting for the answer, True); None when no session can
        carry it. The daemon's refusals are raised as over gRPC."""
        if op in self._session_ops_refused:
            return None
        deadline = self.deadline_for(timeout_s)  # negotiating the offer counts against it
        address = self._session_address(self.time_left(deadline))
        if address is None:
            return None
        try:
            if reply is None:

                def send(s: Session) -> bool:
                    s.send_only(op, request)
                    return True

                return self._via_session(address, send, self.time_left(deadline))
            timeout = self.time_left(deadline)
            return self._via_session(
                address, lambda s: s.unary(op, request, reply, timeout), timeout
            )
        except InvalidArgumentError as exc:
            if not exc.message.startswith("session request with op"):
                raise
            self._session_ops_refused.add(op)  # a daemon whose sessions carry no such op
            return None

    def _session_address(self, timeout_s: float | None) -> str | None:
        """The bulk address a session request may go to now, or None."""
        offer = self.offer(timeout_s)
        if "bulk" not in offer.paths or not offer.bulk_address or not self._bulk_usable():
            return None
        return self._reachable(offer.bulk_address)

    def _via_session(
        self, address: str, request: Callable[[Session], T], timeout_s: float | None = None
    ) -> T | None:
        """Run ``request`` on a bulk session to ``address``; None when the daemon
        offers no sessions (then negotiate a ticket). A session found closed
        before the request reached the daemon is replaced once. ``timeout_s``:
        the call's, which opening a session counts against (None: only the I/O
        timeout bounds it)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for _attempt in range(2):
            try:
                with self._sessions.session(address, deadline) as session:
                    self._opening_timeouts = 0
                    return request(session)
            except StaleSession:
                continue
            except OpeningTimedOut as exc:  # nothing was sent; the call's time is up
                self._opening_timeouts += 1
                if self._opening_timeouts >= OPENING_TIMEOUTS_BEFORE_COOLDOWN:
                    self._opening_timeouts = 0
                    self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S
                raise error_for("DEADLINE_EXCEEDED", str(exc)) from None
            except NoAnswer as exc:  # it may have run: never sent again
                self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S
                raise error_for("DEADLINE_EXCEEDED", str(exc)) from None
            except (SessionsUnsupported, SessionsFull):
                return None
            except BulkUnreachable:
                if not self._leave_unix_socket(address):
                    self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S
                raise _Fallback() from None
            except BulkBroken:
                self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S
                raise _Fallback() from None
        raise _Fallback()

    def _leave_unix_socket(self, address: str) -> bool:
        """The Unix socket ``address`` took no connection (a restarted daemon
        listens on another): this offer's sessions use its TCP address from now
        on (a shared-memory client negotiates afresh when it finds the new
        daemon's arena). False when ``address`` is not the offer's Unix socket,
        or the client may not use TCP instead (``_bulk_address``)."""
        with self._lock:
            offer = self._offer
            if offer is None or offer.hello is None or offer.bulk_address != address:
                return False
            if not address.startswith("unix:"):
                return False
            if self._transport.secure or not offer.hello.bulk_address:
                return False
            offer.bulk_address = self._reachable(offer.hello.bulk_address)
            return True

    @staticmethod
    def _refusal(exc: TiermemClientError) -> BaseException:
        """A session request refused: 'not now' answers (budget, limits) mean: try
        the next path, as they do for the gRPC negotiation; others are raised."""
        if isinstance(exc, (FailedPreconditionError, CapacityError)):
            return _Fallback(exc)
        return exc

    def _negotiate_call(self, fn: Callable[[float], T], timeout_s: float | None) -> T:
        """A path's first call: 'not now / not here' answers mean: try the next path."""
        try:
            return self._call(fn, timeout_s)
        except (FailedPreconditionError, CapacityError) as exc:
            raise _Fallback(exc) from exc
        except TiermemClientError as exc:
            if exc.code == grpc.StatusCode.UNIMPLEMENTED.name:
                raise _Fallback(exc) from exc
            raise

    def _release_quietly(self, lease_ids: Sequence[int], deadline: float) -> None:
        """Release leases a failed step of a call holds, within what is left of
        that call (``deadline``), waiting for the answer; when nothing is left,
        or the release failed, the releasing thread sends it (``_release_soon``)
        rather than leaving the leases to their TTL."""
        if not lease_ids:
            return
        left_s = deadline - time.monotonic()
        if left_s > 0:
            request = dataplane_pb2.ReleaseRequest(lease_ids=list(lease_ids))
            with contextlib.suppress(TiermemClientError, _Fallback):
                self._control(
                    OP_RELEASE,
                    request,
                    dataplane_pb2.ReleaseResponse(),
                    lambda t: self._dp.Release(
                        request, timeout=t, metadata=self._transport.metadata
                    ),
                    left_s,
                )
                return
        self._release_soon(lease_ids, deadline)

    def _release_soon(self, lease_ids: Sequence[int], deadline: float | None = None) -> None:
        """Release read leases without waiting for the answer: the copy is done, so
        the caller need not pay a round trip. A lost release only means the lease
        runs to its TTL. On a bulk session it is sent without reading its answer;
        without sessions one thread of the plane's sends them over gRPC (a gRPC
        future per call would start a thread per call: ~2 ms per batch of 16 here).

        ``deadline`` (``time.monotonic``): the call's that leased them, which
        sending on a session (opening one included) may not pass; None: that
        call has returned, RELEASE_TIMEOUT_S from now. Releases that could not
        go on a session by then (or whose session broke) are left to the
        releasing thread, which has RELEASE_TIMEOUT_S for each."""
        if not lease_ids:
            return
        if deadline is None:
            deadline = time.monotonic() + RELEASE_TIMEOUT_S
        request = dataplane_pb2.ReleaseRequest(lease_ids=list(lease_ids))
        left_s = deadline - time.monotonic()
        with contextlib.suppress(TiermemClientError, _Fallback):  # then by gRPC
            # sent on a session without waiting: its answer is read before the
            # session's next request (no round trip, no gRPC call)
            if left_s > 0 and self._on_session(OP_RELEASE, request, None, left_s) is not None:
                return
        with self._lock:  # (the thread stops when idle: see _send_releases)
            if self._releaser is None:
                self._releaser = threading.Thread(
                    target=self._send_releases, name="tiermem-release", daemon=True
                )
                self._releaser.start()
            self._releases.put(list(lease_ids))

    def _send_releases(self) -> None:
        """The releasing thread: sends each queued batch of lease ids (one call
        each: a batch came from one Lease reply, within the daemon's batch
        limit); stops at None, or after RELEASER_IDLE_S without work (so a
        client never closed leaves no thread behind)."""
        while True:
            try:
                ids = self._releases.get(timeout=RELEASER_IDLE_S)
            except queue.Empty:
                with self._lock:  # nothing can be queued meanwhile
                    if self._releases.empty():
                        if self._releaser is threading.current_thread():
                            self._releaser = None
                        return
                continue
            if ids is None:
                return
            with contextlib.suppress(grpc.RpcError):  # else they expire on their own
                self._dp.Release(
                    dataplane_pb2.ReleaseRequest(lease_ids=ids),
                    timeout=RELEASE_TIMEOUT_S,  # their calls have returned
                    metadata=self._transport.metadata,
                )

    # -- get ------------------------------------------------------------------------------
    def get_many(
        self,
        refs: Sequence[ObjectRef],
        *,
        out: Sequence[Buffer] | None = None,
        allocate: Allocate | None = None,
        path: str | None = None,
        timeout_s: float | None = None,
        fresh: Fresh = bytes,
    ) -> list[Fetched]:
        """Read whole objects by the fastest path, one negotiation per batch.

        ``out``: one writable buffer per object, at least as large as the value
        (its first ``size_bytes`` are filled; ``Fetched.data`` views them); or
        ``allocate(info, index)`` returns that buffer once the value's metadata
        is known (called at most once per object, even when a path falls back;
        None: a new buffer for this one); otherwise each value gets a new
        buffer: ``bytes`` by default, ``bytearray`` with ``fresh=bytearray``
        (shared-memory values are copied into it in one pass, without zeroing
        it first). Raises NotFoundError naming the first missing object."""
        if out is not None and len(out) != len(refs):
            raise ValueError(f"{len(refs)} objects but {len(out)} output buffers")
        deadline = self.deadline_for(timeout_s)  # every batch's, the offer's too
        outs = [_wire.as_view(o) for o in out] if out is not None else None
        allocated: dict[int, memoryview | None] = {}

        def target_in(idx: list[int]) -> _Target:
            def target(pos: int, meta: _Meta) -> memoryview | None:
                i = idx[pos]
                if outs is not None:
                    return outs[i]
                if allocate is None:
                    return None
                if i not in allocated:
                    allocated[i] = allocate(meta.info(), i)  # kept: the result reuses it
                return allocated[i]

            return target

        results: list[Fetched] = []
        for _start, fetched in self._batched(
            list(range(len(refs))),
            lambda idx: self._get_fast(
                [refs[i] for i in idx],
                target_in(idx),
                path,
                deadline,
                fresh,
                # the out buffers bound the values' sizes; without them, unknown
                None if outs is None else sum(len(outs[i]) for i in idx) / max(1, len(idx)),
            ),
            deadline,
        ):
            results.extend(fetched)
        return results

    def _get_fast(
        self,
        refs: list[ObjectRef],
        target: _Target,
        path: str | None,
        deadline: float,
        fresh: Fresh,
        mean_bytes: float | None = None,
    ) -> list[Fetched]:
        """A batch by the first path that serves it; each path tried, and each
        object of the gRPC loop, gets what is left of the call (``deadline``)
        when it starts."""
        offer, candidates = self._candidates(path, lambda p, o: True, mean_bytes, deadline)
        return self._first_that_serves(
            path,
            candidates,
            {
                "shm": lambda: self._get_shm(offer, refs, target, deadline, fresh),
                "bulk": lambda: self._get_bulk(offer, refs, target, deadline, fresh),
            },
            lambda: [
                self._get_grpc(ref, functools.partial(target, i), self.time_left(deadline))
                for i, ref in enumerate(refs)
            ],
        )

    def _keys(self, refs: Sequence[ObjectRef]) -> list[Any]:
        return [_wire.object_key(r.namespace or self._namespace, r.kind, r.key) for r in refs]

    def _get_shm(
        self,
        offer: _Offer,
        refs: list[ObjectRef],
        target: _Target,
        deadline: float,
        fresh: Fresh,
    ) -> list[Fetched]:
        """Lease, copy out, Release; the Lease and the Release each get what is
        left of the call (``deadline``) then."""
        arena = offer.arena
        if arena is None:
            raise _Fallback()
        request = dataplane_pb2.LeaseRequest(
            keys=self._keys(refs), ttl_ms=self._lease_ttl_ms, inline_max_bytes=self.threshold_bytes
        )
        started = time.monotonic()
        reply, carrier = self._control(
            OP_LEASE,
            request,
            dataplane_pb2.LeaseResponse(),
            lambda t: self._dp.Lease(request, timeout=t, metadata=self._transport.metadata),
            self.time_left(deadline),
            negotiate=True,
        )
        lease_ids = [x.lease_id for x in reply.leases if not x.inline]
        if lease_ids and reply.arena_id != arena.arena_id:
            self._release_quietly(lease_ids, deadline)
            self._reset(offer)
            raise _Fallback()
        try:
            results = []
            metas = _metas(reply.leases)
            for i, lease in enumerate(reply.leases):
                info = metas[i]
                src = (
                    memoryview(lease.inline_data)
                    if lease.inline
                    else arena.region(lease.offset, lease.length).data
                )
                data = _copy_out(src, target(i, info), fresh)
                # a value small enough to come back inline travelled in the reply
                results.append(Fetched(info, data, carrier if lease.inline else "shm"))
            late = time.monotonic() > started + reply.ttl_ms / 1000.0
        finally:
            self._release_soon(lease_ids, deadline)
        if late:
            raise _Fallback()  # the lease may have run out mid-copy: do not trust the bytes
        for r in results:
            self._count(r.path, gets=1, nbytes=len(r.data))
        return results

    def _get_bulk(
        self,
        offer: _Offer,
        refs: list[ObjectRef],
        target: _Target,
        deadline: float,
        fresh: Fresh,
    ) -> list[Fetched]:
        """On a bulk session, else by a ticket negotiated over gRPC; each step
        gets what is left of the call (``deadline``) when it starts."""
        request = dataplane_pb2.BeginGetRequest(
            keys=self._keys(refs), inline_max_bytes=self.threshold_bytes
        )

        left = self.time_left(deadline)

        def get(session: Session) -> list[Fetched]:
            try:
                reply = session.begin_get(request, left)
            except TiermemClientError as exc:
                raise self._refusal(exc) from exc
            results, streamed = self._landing(reply, target, fresh)
            session.receive(streamed)
            return results

        got = self._via_session(self._reachable(offer.bulk_address), get, left)
        if got is not None:
            return self._got(got)
        ticket = self._negotiate_call(
            lambda t: self._dp.BeginGet(request, timeout=t, metadata=self._transport.metadata),
            self.time_left(deadline),
        )
        results, streamed = self._landing(ticket, target, fresh)
        if streamed:
            try:
                self._bulk.get(  # its bytes too end by the call's deadline
                    self._ticket_target(ticket.address, offer),
                    ticket.ticket_id,
                    streamed,
                    deadline,
                )
            except BulkBroken:
                self._bulk_down_until = time.monotonic() + BULK_COOLDOWN_S
                raise _Fallback() from None
        return self._got(results)

    @staticmethod
    def _landing(
        ticket: dataplane_pb2.Ticket, target: _Target, fresh: Fresh
    ) -> tuple[list[Fetched], list[memoryview]]:
        """Where each object of a get ticket lands: inline values copied out now,
        streamed ones given views of their targets (returned in stream order)."""
        results: list[Fetched] = []
        streamed: list[memoryview] = []
        metas = _metas(ticket.objects)
        for i, obj in enumerate(ticket.objects):
            info = metas[i]
            size = int(obj.size_bytes)
            into = target(i, info)
            if obj.inline:
                inline = _copy_out(memoryview(obj.inline_data), into, fresh)
                results.append(Fetched(info, inline, "grpc"))
                continue
            if into is not None:
                if len(into) < size:
                    raise ValueError(
                        f"output buffer {i} holds {len(into)} bytes; {obj.meta.key.key} has {size}"
                    )
                view = into[:size]
            elif fresh is bytearray:  # received into: it must exist (zeroed) first
                view = memoryview(bytearray(size))
            else:
                view = np.empty(size, dtype=np.uint8).data
            streamed.append(view)
            results.append(Fetched(info, view, "bulk"))
        return results, streamed

    def _got(self, results: list[Fetched]) -> list[Fetched]:
        if self.verify:
            for r in results:
                if r.path == "bulk":
                    r.verify()
        for r in results:
            self._count(r.path, gets=1, nbytes=len(r.data))
        return results

    def _get_grpc(
        self,
        ref: ObjectRef,
        target: Callable[[_Meta], memoryview | None],
        timeout_s: float | None,
    ) -> Fetched:
        request = object_pb2.GetRequest(key=self._keys([ref])[0])

        def call(timeout: float) -> Fetched:
            stream = self._objects.Get(request, timeout=timeout, metadata=self._transport.metadata)
            info = _wire.info(next(stream).meta)
            out = target(_Meta(info))
            if out is None:
                data = memoryview(b"".join([msg.chunk for msg in stream]))
            else:
                if len(out) < info.size_bytes:
                    raise ValueError(
                        f"output buffer holds {len(out)} bytes; {info.key} has {info.size_bytes}"
                    )
                pos = 0
                for msg in stream:
                    out[pos : pos + len(msg.chunk)] = msg.chunk
                    pos += len(msg.chunk)
                data = out[: info.size_bytes]
            return Fetched(info, data, "grpc")

        fetched = self._call(call, timeout_s)
        if self.verify:
            _wire.verify_get(fetched.info, fetched.data, whole=True)
        self._count("grpc", gets=1, nbytes=len(fetched.data))
        return fetched


def _copy_in(dst: np.ndarray[Any, Any], src: memoryview, deadline: float) -> None:
    """Copy ``src`` into a leased arena region, never past the lease's deadline."""
    source = np.frombuffer(src, dtype=np.uint8)
    if not copy_bytes(dst[: len(source)], source, COPY_CHUNK_BYTES, deadline):
        raise _Fallback()


def _copy_out(src: memoryview, out: memoryview | None, fresh: Fresh) -> memoryview:
    """Copy a value into ``out`` (or a new ``fresh`` buffer, made from ``src``
    in one pass); returns a view of the copy."""
    if out is None:
        return memoryview(fresh(src))
    if len(out) < len(src):
        raise ValueError(f"output buffer holds {len(out)} bytes; the value has {len(src)}")
    target = out[: len(src)]
    copy_bytes(
        np.frombuffer(target, dtype=np.uint8), np.frombuffer(src, dtype=np.uint8), COPY_CHUNK_BYTES
    )
    return target


def as_bytes(view: memoryview) -> bytes:
    """The bytes of a fetched value (no copy when it already is a whole ``bytes``)."""
    obj = view.obj
    if isinstance(obj, bytes) and len(obj) == len(view) and view.contiguous:
        return obj
    return bytes(view)
