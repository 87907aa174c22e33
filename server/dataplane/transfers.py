"""Bulk transfers: tickets negotiated over gRPC, bytes over a plain TCP stream.

``begin_put`` validates and reserves space for every announced object (in the
tier admission picks, exactly as a Put would) and issues a ticket;
``receive`` then fills those reservations straight from the connection with
``recv_into`` (hashing each window while it is still in cache) and commits
them through ``ObjectService.commit_filled``. ``begin_get`` opens every object
like a Get (taking its read lease, or reading and verifying its SSD copy) and
issues a ticket naming sizes and checksums; ``send`` writes the views with
``sendall``. The transport (``bulk.BulkServer``) only frames and routes.

Tickets are single-use (claimed, i.e. removed, by the first presentation),
expire after ``dataplane.bulk.ticket_ttl_s`` (the background worker gives
their reservations and leases back) and are bound to the principal that asked
for them: a presentation by anyone else is refused and burns the ticket. A
put stores nothing unless every byte of every object arrived and every
announced checksum matched.

Stream tickets (``issue_stream``) let another service move one stream of bytes
over the same channel: the blob service sends a blob range (``stream_out``)
or receives the rest of an upload (``stream_in``) with its own code, under
the same ticket rules (single use, expiry, owner binding, byte budget).
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import xxhash

from tiermem.dataplane_wire import TICKET_ID_BYTES, send_parts
from tiermem.server.config import DataPlaneConfig
from tiermem.server.dataplane.limits import ByteBudget, check_batch
from tiermem.server.dataplane.sendfile import send_values
from tiermem.server.errors import (
    CapacityExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    PermissionDenied,
    TiermemError,
)
from tiermem.server.metrics import Metrics
from tiermem.server.model import ObjectKey, Profile
from tiermem.server.services.objects import FilledPut, ObjectRead, ObjectService, PutSpec
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.dram import DramEngine
from tiermem.v1 import common_pb2 as pb

log = logging.getLogger(__name__)

#: Received bytes are hashed in windows of this size, right after they land
#: (while still in cache): one memoryview slice per window, no copies.
WINDOW_BYTES = 1 << 20


class Channel(Protocol):
    """The two socket calls a transfer needs (``socket.socket`` has them)."""

    def recv_into(self, buffer: memoryview, nbytes: int = 0, /) -> int: ...

    def sendall(self, data: memoryview, /) -> None: ...


class TransferBroken(InvalidArgument):
    """The connection ended or failed before every announced byte arrived."""


class SendDeadline:
    """Bounds a whole reply's send, which the socket's send timeout
    (``dataplane.bulk.io_timeout_s``) does not: that cuts one send that moves
    nothing for that long, and a client reading a trickle keeps every send
    moving. Used as the ``before_send`` of ``send_parts``: the second call
    starts the clock, and any later one raises TimeoutError (an OSError: the
    connection is then closed and the reply's ticket ends) once
    ``max(io_timeout_s, nbytes / min_bytes_per_s)`` has passed since then.

    Cost: the first call reads no clock (a reply that leaves in one
    ``sendmsg`` pays one Python call), each later one reads it once. The clock
    starts at the second send because the first is bounded by the socket's
    timeout already; the cut can come up to one more ``io_timeout_s`` after the
    deadline (a send in progress is not interrupted). Whole reply: at most
    ``deadline + 2 * io_timeout_s``."""

    __slots__ = ("_budget_s", "_clock", "_deadline_s", "_nbytes")

    _FIRST = -2.0  # no send yet
    _SECOND = -1.0  # one send began; the clock starts at the next

    def __init__(
        self,
        nbytes: int,
        io_timeout_s: float,
        min_bytes_per_s: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nbytes = nbytes
        if min_bytes_per_s <= 0:
            raise InvariantViolation("a send deadline needs a positive minimum rate")
        self._budget_s = max(io_timeout_s, nbytes / min_bytes_per_s)
        self._clock = clock
        self._deadline_s = self._FIRST

    def __call__(self) -> None:
        deadline = self._deadline_s
        if deadline >= 0.0:
            if self._clock() > deadline:
                raise TimeoutError(
                    f"bulk client read a {self._nbytes}-byte reply too slowly: it did not "
                    f"leave within {self._budget_s:.1f} s (dataplane.bulk.min_send_bytes_per_s)"
                )
        elif deadline == self._SECOND:
            self._deadline_s = self._clock() + self._budget_s
        else:
            self._deadline_s = self._SECOND


class _DeadlineChannel:
    """A stream out's channel: every ``sendall`` goes through ``send_parts`` under
    the stream's one SendDeadline (a socket's own ``sendall`` loops in C, with
    no point between its sends to check a deadline)."""

    __slots__ = ("_conn", "_deadline")

    def __init__(self, conn: Channel, deadline: SendDeadline) -> None:
        self._conn = conn
        self._deadline = deadline

    def recv_into(self, buffer: memoryview, nbytes: int = 0, /) -> int:
        return self._conn.recv_into(buffer, nbytes)

    def sendall(self, data: memoryview, /) -> None:
        send_parts(self._conn, (data,), self._deadline)


@dataclass(slots=True)
class PutItem:
    spec: PutSpec
    profile: Profile
    reservation: Reservation


@dataclass(slots=True)
class GetItem:
    size: int
    wire: pb.ObjectMeta  # the object's metadata, as the reply sends it
    reader: ObjectRead | None  # None when inline
    inline: bytes | None


#: Ticket operations: object puts and gets, and streams of another service.
TicketOp = Literal["put", "get", "stream_in", "stream_out"]


@dataclass(slots=True, eq=False)
class Ticket:
    ticket_id: bytes
    owner: str
    op: TicketOp
    expires_at: float
    ttl_s: float
    puts: list[PutItem] = field(default_factory=list)
    gets: list[GetItem] = field(default_factory=list)
    held_bytes: int = 0
    end: Callable[[], None] = field(default=lambda: None)
    #: stream tickets: moves the bytes over the connection (raises if it cannot)
    stream: Callable[[Channel], None] | None = None
    streamed_bytes: int = 0

    @property
    def stream_bytes(self) -> int:
        if self.stream is not None:
            return self.streamed_bytes
        if self.op == "put":
            return sum(item.spec.size_bytes for item in self.puts)
        return sum(item.size for item in self.gets if item.reader is not None)


def _end_each(tickets: Sequence[Ticket]) -> None:
    """Call each ticket's ``end`` (tickets already out of the table), each in
    isolation, as ``LeaseTable.end_each`` does for leases: one that raises is
    logged and the rest still end, so it cannot keep what the others hold
    (nothing would end them later)."""
    for ticket in tickets:
        _end_logged(ticket.end, ticket.op)


def _end_logged(end: Callable[[], None], op: str) -> None:
    """Run ``end`` (a ticket's, or what a ticket would hold) where an error is
    already on its way (an error path) or nobody waits for the answer: one
    that raises is logged, not raised, so the error the client is told is the
    transfer's own, not the clean-up's."""
    try:
        end()
    except Exception:
        log.exception("ending %s bulk ticket failed; what it held may stay held", op)


def _first_error(first: Exception | None, exc: Exception) -> Exception:
    """Of the errors a clean-up meets, the first is raised; later ones are logged
    here (call inside their ``except``)."""
    if first is None:
        return exc
    log.exception("giving back part of a bulk ticket failed too")
    return first


class TicketTable:
    """Outstanding tickets, bounded; claimed once; reaped after expiry."""

    def __init__(
        self, max_tickets: int, clock: Callable[[], float], remembered: int = 8192
    ) -> None:
        self._max = max_tickets
        self._clock = clock
        self._remembered = remembered
        self._lock = threading.Lock()
        self._tickets: dict[bytes, Ticket] = {}
        self._ended: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._tickets)

    def issue(self, ticket: Ticket) -> None:
        with self._lock:
            if len(self._tickets) >= self._max:
                raise CapacityExceeded(
                    f"{len(self._tickets)} bulk tickets are outstanding "
                    f"(dataplane.bulk.max_tickets={self._max}); use or let them expire and retry"
                )
            self._tickets[ticket.ticket_id] = ticket

    def claim(self, ticket_id: bytes, owner: str) -> Ticket:
        """Remove and return the ticket for its one transfer."""
        burnt: Ticket | None = None
        try:
            with self._lock:
                ticket = self._tickets.pop(ticket_id, None)
                if ticket is None:
                    how = self._ended.get(ticket_id)
                    if how is None:
                        raise NotFound("bulk ticket is unknown to this daemon")
                    raise FailedPrecondition(
                        f"bulk ticket was already {how}; tickets are single-use"
                    )
                if ticket.owner != owner:
                    burnt = ticket
                    self._remember(ticket_id, "refused (presented with other credentials)")
                    raise PermissionDenied(
                        "bulk ticket was issued to other credentials; it is now void"
                    )
                if ticket.expires_at <= self._clock():
                    burnt = ticket
                    self._remember(ticket_id, "expired")
                    raise FailedPrecondition(
                        f"bulk ticket expired (it was valid for {ticket.ttl_s:g} s); "
                        "ask for a new one"
                    )
                self._remember(ticket_id, "used")
                return ticket
        finally:
            if burnt is not None:
                _end_each([burnt])  # (an ``end`` that raises never hides the answer)

    def reap_expired(self) -> int:
        with self._lock:
            now = self._clock()
            gone = [t for t in self._tickets.values() if t.expires_at <= now]
            for ticket in gone:
                del self._tickets[ticket.ticket_id]
                self._remember(ticket.ticket_id, "expired")
        _end_each(gone)
        return len(gone)

    def end_all(self) -> None:
        with self._lock:
            gone = list(self._tickets.values())
            self._tickets.clear()
        _end_each(gone)

    def _remember(self, ticket_id: bytes, how: str) -> None:
        self._ended[ticket_id] = how
        while len(self._ended) > self._remembered:
            self._ended.popitem(last=False)


class BulkTransfers:
    def __init__(
        self,
        objects: ObjectService,
        config: DataPlaneConfig,
        budget: ByteBudget,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._objects = objects
        self._config = config
        self._budget = budget
        self._metrics = metrics
        self._clock = clock
        self.tickets = TicketTable(config.bulk.max_tickets, clock)
        #: where tickets send their holders: HOST:PORT, or under TLS the Unix
        #: socket's ``unix:@NAME``; set once the server listens ("" = off).
        self.address = ""
        #: brings objects not held here in from the remote tier before a read
        #: (``RemoteService.fill``: keys and the session the caller acts as;
        #: set by the daemon when it has one)
        self.fill: Callable[[Sequence[ObjectKey], str | None], None] | None = None
        #: the DRAM arena: gets on a socket send its large values from the
        #: arena's file with sendfile (``dataplane.bulk.sendfile``); None: from views
        self.arena: DramEngine | None = None

    def _check_batch(self, n: int, what: str) -> None:
        if not self.address:
            raise FailedPrecondition("the bulk channel is off on this daemon; use Put/Get")
        check_batch(n, self._config.max_batch_objects, what)

    def _new_ticket(self, owner: str, op: TicketOp, issue: bool = True) -> Ticket:
        """A ticket; ``issue=False``: one its caller uses at once on its own
        connection (a bulk session's request), which needs no id and never
        enters the table."""
        ttl = self._config.bulk.ticket_ttl_s
        ticket_id = secrets.token_bytes(TICKET_ID_BYTES) if issue else b""
        return Ticket(ticket_id, owner, op, self._clock() + ttl, ttl)

    # -- put --------------------------------------------------------------------------
    def begin_put(self, owner: str, specs: Sequence[PutSpec], issue: bool = True) -> Ticket:
        """Reserve space for every object and issue the ticket; all or none.
        ``issue=False``: the caller receives the bytes itself (``_new_ticket``)."""
        self._check_batch(len(specs), "BeginPut")
        ticket = self._new_ticket(owner, "put", issue)
        ticket.end = lambda: self._drop_puts(ticket)
        try:
            profiles = self._objects.prepare_many(specs)
            total = sum(spec.size_bytes for spec in specs)
            self._budget.take(total)
            ticket.held_bytes = total
            reservations = self._objects.reserve_many(
                [(s.size_bytes, p, s.key.kind) for s, p in zip(specs, profiles, strict=True)]
            )
            ticket.puts = [
                PutItem(spec, profile, reservation)
                for spec, profile, reservation in zip(specs, profiles, reservations, strict=True)
            ]
            if issue:
                self.tickets.issue(ticket)
        except BaseException:
            _end_logged(ticket.end, ticket.op)
            raise
        return ticket

    def _drop_puts(self, ticket: Ticket) -> None:
        """Abort each reservation and give the bytes back: all of it even when an
        abort raises (the first such error is raised once the rest is done), and
        once (a second call finds nothing left)."""
        items, ticket.puts = ticket.puts, []
        failed: Exception | None = None
        for item in items:
            try:
                self._objects.abort(item.reservation)
            except Exception as exc:
                failed = _first_error(failed, exc)
        held, ticket.held_bytes = ticket.held_bytes, 0
        self._budget.give(held)
        if failed is not None:
            raise failed

    def receive(self, ticket: Ticket, channel: Channel) -> list[pb.ObjectMeta]:
        """Fill the ticket's reservations from ``channel`` and commit them.

        Raises TransferBroken if the stream ends or fails early, Corrupted if an
        announced checksum does not match; either way nothing is stored. The
        batch is committed as one unit (``ObjectService.commit_filled_many``):
        every object becomes visible, or none does. Returns the committed
        objects' metadata messages, for the reply."""
        if ticket.op != "put":
            raise FailedPrecondition("this ticket is for a get, not a put")
        sums: list[int] = []
        failed: TiermemError | None = None
        try:
            # Every object's bytes are read even after one fails its checksum:
            # the connection carries the next request right after them, and
            # stopping early would read the rest of this put's values as one.
            for item in ticket.puts:
                xxh3, crc = _receive_into(
                    channel, item.reservation.buffer, self._objects.upload_crc(item.spec)
                )
                if failed is None:
                    try:
                        self._objects.check_upload(item.spec, xxh3, crc)
                    except TiermemError as exc:
                        failed = exc
                sums.append(xxh3)
            if failed is not None:
                raise failed
        except BaseException:
            _end_logged(ticket.end, ticket.op)
            raise
        items, ticket.puts = ticket.puts, []
        wires: list[pb.ObjectMeta] = []
        try:
            self._objects.commit_filled_many(
                [
                    FilledPut(item.spec, item.profile, item.reservation, xxh3)
                    for item, xxh3 in zip(items, sums, strict=True)
                ],
                path="bulk",
                wires=wires,
            )
            return wires
        finally:  # committed or aborted, the reservations are consumed
            self._budget.give(ticket.held_bytes)
            ticket.held_bytes = 0

    # -- get --------------------------------------------------------------------------
    def begin_get(
        self,
        owner: str,
        keys: Sequence[ObjectKey],
        inline_max_bytes: int,
        caller: str = "",
        issue: bool = True,
    ) -> Ticket:
        """Open every object (read leases held until sent) and issue the ticket.
        ``caller`` is the session the client acts as (checked as for Get).
        ``issue=False``: the caller sends the values itself (``_new_ticket``)."""
        self._check_batch(len(keys), "BeginGet")
        if self.fill is not None:
            # the caller lets its own session's demoted objects come in this
            # batch (without it each would be fetched alone by the read)
            self.fill(keys, caller)
        inline_max = min(
            inline_max_bytes or self._config.inline_max_bytes, self._config.inline_max_bytes
        )
        ticket = self._new_ticket(owner, "get", issue)
        ticket.end = lambda: self._drop_gets(ticket)
        readers: list[ObjectRead] = []
        try:
            readers = self._objects.read_many(keys, caller=caller)
            readers.reverse()  # popped from the end, in key order
            while readers:
                reader = readers.pop()
                size = reader.size_bytes
                if size <= inline_max:
                    try:
                        ticket.gets.append(GetItem(size, reader.wire, None, bytes(reader.view)))
                    finally:
                        reader.release()
                    continue
                try:
                    self._budget.take(size)
                except BaseException:
                    reader.release()
                    raise
                ticket.gets.append(GetItem(size, reader.wire, reader, None))
                ticket.held_bytes += size
            if issue:
                self.tickets.issue(ticket)
        except BaseException:
            for reader in readers:  # opened but not yet in the ticket
                _end_logged(reader.release, ticket.op)
            _end_logged(ticket.end, ticket.op)
            raise
        return ticket

    def _drop_gets(self, ticket: Ticket) -> None:
        """Release each read and give the bytes back, as ``_drop_puts`` does."""
        failed: Exception | None = None
        for item in ticket.gets:
            reader = item.reader
            if reader is not None:
                item.reader = None
                try:
                    reader.release()
                except Exception as exc:
                    failed = _first_error(failed, exc)
        held, ticket.held_bytes = ticket.held_bytes, 0
        self._budget.give(held)
        if failed is not None:
            raise failed

    def send(self, ticket: Ticket, channel: Channel, header: bytes = b"") -> int:
        """Write ``header`` and then every streamed object's bytes, in ticket order,
        gathered into as few system calls as possible; returns the objects' bytes
        sent. The read leases end when this returns or fails."""
        if ticket.op != "get":
            raise FailedPrecondition("this ticket is for a put, not a get")
        try:
            views = [item.reader.view for item in ticket.gets if item.reader is not None]
            sent = sum(view.nbytes for view in views)
            arena = self.arena
            deadline = self._send_deadline(len(header) + sent)
            if arena is not None and isinstance(channel, socket.socket):
                send_values(channel, header, views, arena.file_fd, arena.file_span, deadline)
            else:
                send_parts(channel, [header, *views], deadline)
        except BaseException:
            _end_logged(ticket.end, ticket.op)
            raise
        ticket.end()
        self._metrics.child(self._metrics.data_bytes, "bulk", "out").inc(sent)
        return sent

    # -- streams of other services ----------------------------------------------------
    def issue_stream(
        self,
        owner: str,
        op: Literal["stream_in", "stream_out"],
        nbytes: int,
        run: Callable[[Channel], None],
        end: Callable[[], None],
        held_bytes: int = 0,
    ) -> Ticket:
        """A ticket whose transfer is ``run(connection)`` moving ``nbytes``;
        ``end`` runs exactly once when the ticket is used, refused or expires.
        ``held_bytes`` are taken from the data plane's byte budget meanwhile."""
        if not self.address:
            _end_logged(end, op)
            raise FailedPrecondition("the bulk channel is off on this daemon; use the gRPC stream")
        ticket = self._new_ticket(owner, op)
        ticket.stream = run
        ticket.streamed_bytes = nbytes
        try:
            self._budget.take(held_bytes)
        except BaseException:
            _end_logged(end, op)
            raise
        ticket.held_bytes = held_bytes

        def finish() -> None:
            self._budget.give(ticket.held_bytes)
            ticket.held_bytes = 0
            end()

        ticket.end = finish
        try:
            self.tickets.issue(ticket)
        except BaseException:
            _end_logged(ticket.end, ticket.op)
            raise
        return ticket

    def run_stream(self, ticket: Ticket, channel: Channel) -> None:
        """Carry out a stream ticket's transfer; its ``end`` runs when this returns."""
        if ticket.stream is None:
            raise FailedPrecondition("this ticket is not for a stream")
        deadline = self._send_deadline(ticket.streamed_bytes)
        if ticket.op == "stream_out" and deadline is not None:
            channel = _DeadlineChannel(channel, deadline)
        try:
            ticket.stream(channel)
        except BaseException:
            _end_logged(ticket.end, ticket.op)
            raise
        ticket.end()
        direction = "in" if ticket.op == "stream_in" else "out"
        self._metrics.data_bytes.labels("bulk", direction).inc(ticket.streamed_bytes)

    def _send_deadline(self, nbytes: int) -> SendDeadline | None:
        """The whole-reply bound of a send of ``nbytes`` (None: no minimum rate)."""
        bulk = self._config.bulk
        rate = int(bulk.min_send_bytes_per_s)
        return SendDeadline(nbytes, bulk.io_timeout_s, rate) if rate > 0 else None

    # -- upkeep -----------------------------------------------------------------------
    def claim(self, ticket_id: bytes, owner: str) -> Ticket:
        return self.tickets.claim(ticket_id, owner)

    def reap_expired(self) -> int:
        return self.tickets.reap_expired()

    def close(self) -> None:
        self.tickets.end_all()


def _receive_into(channel: Channel, view: memoryview, want_crc: bool) -> tuple[int, int | None]:
    """Fill ``view`` from the channel; returns (xxh3-64, CRC-32 or None) of the bytes."""
    size = len(view)
    hasher = xxhash.xxh3_64()
    crc = 0
    pos = 0
    while pos < size:
        end = min(pos + WINDOW_BYTES, size)
        window = view[pos:end]
        filled = 0
        want = end - pos
        while filled < want:
            got = channel.recv_into(window[filled:] if filled else window, want - filled)
            if got == 0:
                raise TransferBroken(
                    f"the bulk connection ended after {pos + filled} of {size} bytes of an "
                    "object; nothing was stored"
                )
            filled += got
        hasher.update(window)
        if want_crc:
            crc = zlib.crc32(window, crc)
        pos = end
    return hasher.intdigest(), (crc if want_crc else None)
