"""The client's side of bulk sessions: connections to the bulk channel that
authenticated once and then carry framed put/get requests without a gRPC call
each (framing in ``tiermem.dataplane_wire``). Pooled per daemon address, one
request at a time per connection.

A daemon that does not offer sessions answers the opening NOT_FOUND: the pool
remembers that address and raises ``SessionsUnsupported`` from then on, so the
data plane goes back to tickets negotiated over gRPC.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from google.protobuf.message import Message

from tiermem.client.errors import TiermemClientError, error_for
from tiermem.client.fastpath.bulk import BulkBroken, BulkUnreachable, IdleSockets, present
from tiermem.dataplane_wire import (
    FLAG_ACCEPT_WITH_RESULT,
    LENGTH,
    MAX_STATUS_BYTES,
    OP_GET,
    OP_PUT,
    PIPELINED_PUT_MAX_BYTES,
    SESSION_TICKET,
    frame,
    preamble,
    request,
    send_parts,
)
from tiermem.v1 import dataplane_pb2

M = TypeVar("M", bound=Message)

#: Largest get reply (metas and inline values of a batch) a client reads.
MAX_TICKET_BYTES = 256 << 20

#: How much a session reads ahead from its connection. A reply's frames (status,
#: ticket, the start of the values) arrive in one gathered send: one receive
#: into this buffer takes them all, where reading each frame's length and body
#: exactly would cost two receives a frame. Larger reads go straight into their
#: destination.
READ_AHEAD_BYTES = 16 << 10


class SessionsUnsupported(Exception):
    """The daemon at this address does not offer bulk sessions."""


class SessionsFull(Exception):
    """Every bulk connection slot of the daemon is taken: this request goes
    another way (gRPC); the bulk channel itself is fine."""


class StaleSession(BulkBroken):
    """A pooled session was found closed before the request reached the daemon
    (it expired idle): nothing happened; retry on a new session."""


class OpeningTimedOut(Exception):
    """The daemon did not answer a session's opening (or the connection was not
    made) by the call's deadline. No request was sent, so nothing ran; the
    caller gets DEADLINE_EXCEEDED rather than waiting for the I/O timeout."""


class NoAnswer(BulkBroken):
    """The request was sent and no answer came within the I/O timeout: the
    daemon may have run it (a delete, an ``if_absent`` put, a commit), so it is
    never sent again, on this path or another; the caller gets
    DEADLINE_EXCEEDED, which says just that."""


class Session:
    """One open session (a connection). Not thread-safe: one request at a time.

    A request's ``timeout_s`` travels in its header (the daemon gives up on it
    then) and bounds the whole request here, from sending it to the last byte
    of its answer (a get's streamed values, a large put's bytes and final
    status): past it the request raises DeadlineError and the connection is
    closed (its reply may still come; a put cut off before its final status
    stores nothing, one whose status was on its way may have been stored).
    Every wait is also bounded by ``io_timeout_s``, and by ``deadline``: the
    call's (``time.monotonic``), which the opening of the session counted
    against, so a request gets what is left of its call's time.
    """

    def __init__(
        self,
        sock: socket.socket,
        reused: bool,
        owed: int = 0,
        io_timeout_s: float = 30.0,
        deadline: float | None = None,
    ) -> None:
        self.sock = sock
        self.call_deadline = deadline
        self.io_timeout_s = io_timeout_s
        self.reused = reused
        self.in_step = True  # False once a request failed mid-way: do not pool
        #: replies to requests sent without waiting (``send_only``), read and
        #: dropped before the next request's
        self.owed = owed
        #: when the request in progress must be done (``time.monotonic``), and
        #: its timeout; None: only ``io_timeout_s`` bounds each wait
        self._deadline: float | None = None
        self._timeout_s: float | None = None
        # bytes received but not yet consumed: _ahead[_start:_end]
        self._ahead = memoryview(bytearray(READ_AHEAD_BYTES))
        self._start = self._end = 0

    @property
    def buffered(self) -> int:
        """Bytes read ahead and not consumed (non-zero after a request: the
        connection is out of step with the protocol, never pooled)."""
        return self._end - self._start

    def _recv_some(self, view: memoryview, deadline: float | None) -> int:
        """One receive into ``view`` (at least a byte), bounded by the I/O
        timeout and by ``deadline``. Raises TimeoutError, BulkBroken on EOF."""
        shortened = False
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed while receiving")
            if left < self.io_timeout_s:  # else the socket's own timeout is the bound
                self.sock.settimeout(left)
                shortened = True
        try:
            n = self.sock.recv_into(view)
        finally:
            if shortened:
                self.sock.settimeout(self.io_timeout_s)
        if n == 0:
            raise BulkBroken("connection closed mid-reply")
        return n

    def _read_into(self, view: memoryview, deadline: float | None) -> None:
        """Fill ``view``: first from what was read ahead, then from the socket
        (straight into ``view`` when the rest is at least a read-ahead's size)."""
        size = len(view)
        got = min(size, self._end - self._start)
        if got:
            view[:got] = self._ahead[self._start : self._start + got]
            self._start += got
        while got < size:
            if size - got >= READ_AHEAD_BYTES:
                got += self._recv_some(view[got:], deadline)
                continue
            self._start, self._end = 0, self._recv_some(self._ahead, deadline)
            k = min(size - got, self._end)
            view[got : got + k] = self._ahead[:k]
            self._start = k
            got += k

    def _take(self, n: int, deadline: float | None) -> bytes:
        """The next ``n`` bytes of the reply."""
        if self._end - self._start >= n:
            start = self._start
            self._start += n
            return bytes(self._ahead[start : start + n])
        out = bytearray(n)
        self._read_into(memoryview(out), deadline)
        return bytes(out)

    def _frame(self, limit_bytes: int, deadline: float | None) -> bytes:
        """One length-prefixed frame's body (at most ``limit_bytes``)."""
        (length,) = LENGTH.unpack(self._take(LENGTH.size, deadline))
        if length > limit_bytes:
            raise BulkBroken(f"frame of {length} bytes exceeds {limit_bytes}")
        return self._take(length, deadline)

    def _status(self, deadline: float | None = None) -> dataplane_pb2.TransferStatus:
        msg = dataplane_pb2.TransferStatus()
        msg.ParseFromString(self._frame(MAX_STATUS_BYTES, deadline))
        return msg

    def _begin(self, timeout_s: float | None) -> float | None:
        """Start the clock of a request with the caller's ``timeout_s``, never
        past the call's deadline; returns the time it has (for its header).
        Raises DeadlineError, before anything is sent, when none is left."""
        now = time.monotonic()
        deadline = None if timeout_s is None else now + timeout_s
        if self.call_deadline is not None and (deadline is None or self.call_deadline < deadline):
            deadline = self.call_deadline
        self._timeout_s = timeout_s
        self._deadline = deadline
        if deadline is None:
            return None
        if deadline <= now:
            raise self._deadline_error("a bulk session request (its call's time was used up)")
        return deadline - now

    def _deadline_error(self, what: str) -> TiermemClientError:
        """DeadlineError for a request whose ``what`` did not finish in time
        (``in_step`` stays False: the session is closed, not pooled)."""
        return error_for(
            "DEADLINE_EXCEEDED",
            f"{what}: not done within {self._timeout_s or 0:.3g} s (the call's timeout)",
        )

    def _timed_out(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the request's deadline passing (not an I/O timeout)."""
        return (
            isinstance(exc, TimeoutError)
            and self._deadline is not None
            and time.monotonic() >= self._deadline - 0.001
        )

    def _sendall(self, data: bytes | memoryview) -> None:
        """``sendall`` bounded by the request's deadline too (a socket timeout
        bounds a whole ``sendall``)."""
        if self._deadline is None:
            self.sock.sendall(data)
            return
        self._wait_at_most_the_time_left()
        try:
            self.sock.sendall(data)
        finally:
            self.sock.settimeout(self.io_timeout_s)

    def _send_parts(self, parts: Sequence[bytes | memoryview]) -> None:
        """``send_parts`` bounded by the request's deadline too: each of its
        sends waits at most the time left, so a daemon that stops reading (or
        reads a trickle) cannot hold the put past its timeout."""
        if self._deadline is None:
            send_parts(self.sock, parts)
            return
        try:
            send_parts(self.sock, parts, self._wait_at_most_the_time_left)
        finally:
            self.sock.settimeout(self.io_timeout_s)

    def _wait_at_most_the_time_left(self) -> None:
        """Bound the socket's next wait by the request's deadline (set)."""
        assert self._deadline is not None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed before sending")
        self.sock.settimeout(min(self.io_timeout_s, left))

    def drain(self) -> None:
        """Read and drop the replies owed to earlier ``send_only`` requests,
        within the request's deadline (``_begin``): past it DeadlineError and
        the session is closed (a reply is still on its way)."""
        while self.owed:
            try:
                status = self._status(self._deadline)
                if status.code == "OK":
                    self._frame(MAX_TICKET_BYTES, self._deadline)
            except (OSError, BulkBroken) as exc:
                if self._timed_out(exc):
                    self.in_step = False
                    raise self._deadline_error("replies owed to earlier requests") from None
                raise StaleSession(f"pooled bulk session was closed: {exc}") from None
            self.owed -= 1

    def _no_answer(self, what: str) -> NoAnswer:
        return NoAnswer(
            f"{what}: sent, and no answer within the bulk channel's I/O timeout "
            f"({self.io_timeout_s:g} s); the daemon may have run it"
        )

    def send_only(self, op: int, request_msg: Message) -> None:
        """Send a unary request whose answer the caller does not need (a lease
        release): its reply is read and dropped before the session's next one,
        so the caller saves a round trip. The send ends by the call's deadline
        (DeadlineError: nothing was sent if the time was up before it began,
        else the session is closed)."""
        if self.call_deadline is not None and self.call_deadline <= time.monotonic():
            raise error_for(
                "DEADLINE_EXCEEDED",
                f"bulk session request (op {op}) not sent: its call's time was used up",
            )
        self._deadline = self.call_deadline
        self.in_step = False
        try:
            self._sendall(request(op, request_msg.SerializeToString()))
        except OSError as exc:
            if self._timed_out(exc):
                raise error_for(
                    "DEADLINE_EXCEEDED",
                    f"bulk session request (op {op}) not sent by its call's deadline",
                ) from None
            raise BulkBroken(f"bulk session broke: {exc}") from None
        self.owed += 1
        self.in_step = True

    def _ask(
        self, op: int, payload: bytes, timeout_s: float | None
    ) -> dataplane_pb2.TransferStatus:
        """Send a request and read the daemon's first answer; raises its refusal."""
        left_s = self._begin(timeout_s)
        self.drain()
        self.in_step = False
        try:
            self.sock.sendall(request(op, payload, timeout_s=left_s))
            status = self._first_answer()
        except TimeoutError:  # (the request's own deadline is DeadlineError)
            raise self._no_answer(f"bulk session request (op {op})") from None
        except (OSError, BulkBroken) as exc:
            if self.reused:
                raise StaleSession(f"pooled bulk session was closed: {exc}") from None
            raise BulkBroken(f"bulk session broke: {exc}") from None
        if status.code != "OK":
            self.in_step = True
            raise error_for(status.code, status.message, status.request_id)
        return status

    def _first_answer(self) -> dataplane_pb2.TransferStatus:
        """The daemon's first STATUS to a request, waited for until the request's
        deadline (``_begin``; none: the I/O timeout). Raises DeadlineError past it."""
        try:
            return self._status(self._deadline)
        except TimeoutError as exc:
            if not self._timed_out(exc):
                raise
            # in_step stays False: the reply may still come, the session is closed
            raise self._deadline_error("the daemon's answer to a bulk session request") from None

    def put(
        self,
        request_msg: dataplane_pb2.BeginPutRequest,
        views: Sequence[memoryview],
        refusal: Callable[[TiermemClientError], BaseException],
        timeout_s: float | None = None,
    ) -> dataplane_pb2.TransferStatus:
        """Put the objects; returns the committed status. The daemon's refusal of
        the request is raised as ``refusal(error)``; its error after the bytes
        arrived (checksum, quota at commit) as is; BulkBroken: nothing stored.
        Small puts (``PIPELINED_PUT_MAX_BYTES``) send the bytes with the request."""
        if sum(len(v) for v in views) > PIPELINED_PUT_MAX_BYTES:
            try:
                self.begin_put(request_msg, timeout_s)
            except TiermemClientError as exc:
                raise refusal(exc) from exc
            return self.send(views)
        left_s = self._begin(timeout_s)
        self.drain()
        self.in_step = False
        try:
            head = request(OP_PUT, request_msg.SerializeToString(), FLAG_ACCEPT_WITH_RESULT, left_s)
            self._send_parts([head, *views])
            first = self._first_answer()
            if first.code != "OK":
                self.in_step = True  # the daemon read and dropped the bytes
                raise refusal(error_for(first.code, first.message, first.request_id))
            final = self._status(self._deadline)
        except (OSError, BulkBroken) as exc:
            if self._timed_out(exc):
                raise self._deadline_error("a bulk session put") from None
            if isinstance(exc, TimeoutError):
                raise self._no_answer("a bulk session put") from None
            if self.reused:  # closed while pooled (nothing stored of a broken put)
                raise StaleSession(f"pooled bulk session was closed: {exc}") from None
            raise BulkBroken(f"bulk session put broke: {exc}") from None
        self.in_step = True
        if final.code != "OK":
            raise error_for(final.code, final.message, final.request_id)
        return final

    def begin_put(
        self, request_msg: dataplane_pb2.BeginPutRequest, timeout_s: float | None = None
    ) -> None:
        """Ask to put; returns once the daemon reserved space for every object
        (then ``send`` the bytes). Raises the daemon's refusal, or BulkBroken."""
        self._ask(OP_PUT, request_msg.SerializeToString(), timeout_s)

    def send(self, views: Sequence[memoryview]) -> dataplane_pb2.TransferStatus:
        """Every object's bytes, in request order; returns the committed status.
        Raises the daemon's error, or BulkBroken (then nothing was stored)."""
        sent = False
        try:
            for view in views:
                if len(view):
                    self._sendall(view)
            sent = True  # from here the daemon may commit at any moment
            status = self._status(self._deadline)
        except (OSError, BulkBroken) as exc:
            if self._timed_out(exc):
                raise self._deadline_error("sending a bulk session put's bytes") from None
            if sent and isinstance(exc, TimeoutError):
                raise self._no_answer("a bulk session put") from None
            raise BulkBroken(f"bulk session put broke: {exc}") from None
        self.in_step = True
        if status.code != "OK":
            raise error_for(status.code, status.message, status.request_id)
        return status

    def _answer(self, op: int, request_msg: Message, what: str, timeout_s: float | None) -> bytes:
        """Send a request answered by STATUS "OK" and one frame; the frame's bytes."""
        self._ask(op, request_msg.SerializeToString(), timeout_s)
        try:
            return self._frame(MAX_TICKET_BYTES, self._deadline)
        except (OSError, BulkBroken) as exc:
            if self._timed_out(exc):
                raise self._deadline_error(f"a bulk session {what}'s answer") from None
            raise BulkBroken(f"bulk session {what} broke: {exc}") from None

    def begin_get(
        self, request_msg: dataplane_pb2.BeginGetRequest, timeout_s: float | None = None
    ) -> dataplane_pb2.Ticket:
        """Ask to get; returns what a BeginGet ticket would say (metas, sizes,
        inline values). The streamed objects' bytes follow: ``receive`` them."""
        ticket = dataplane_pb2.Ticket()
        ticket.ParseFromString(self._answer(OP_GET, request_msg, "get", timeout_s))
        return ticket

    def unary(self, op: int, request_msg: Message, reply: M, timeout_s: float | None = None) -> M:
        """A request answered by one message (lookup, shared-memory lease, release,
        reserve, commit), parsed into ``reply``; raises the daemon's refusal."""
        reply.ParseFromString(self._answer(op, request_msg, f"op {op}", timeout_s))
        self.in_step = True
        return reply

    def receive(self, outs: Sequence[memoryview]) -> None:
        try:
            for out in outs:
                self._read_into(out, self._deadline)
        except (OSError, BulkBroken) as exc:
            if self._timed_out(exc):
                raise self._deadline_error("receiving a bulk session get's values") from None
            raise BulkBroken(f"bulk session get broke: {exc}") from None
        self.in_step = True


class SessionPool:
    def __init__(
        self,
        credential: bytes,
        acting: str,
        io_timeout_s: float = 30.0,
        max_idle: int = 8,
    ) -> None:
        self._credential = credential
        self._acting = acting.encode()
        self._io_timeout_s = io_timeout_s
        self._pool = IdleSockets(io_timeout_s, max_idle)
        self.close = self._pool.close
        self._lock = threading.Lock()
        self._unsupported: set[str] = set()
        # replies owed by pooled connections (see ``Session.send_only``)
        self._owed: weakref.WeakKeyDictionary[socket.socket, int] = weakref.WeakKeyDictionary()

    def _open(self, address: str, deadline: float | None) -> socket.socket:
        """A new session's connection: connected, authenticated and answered
        within the I/O timeout and by ``deadline`` (the call's; past it
        OpeningTimedOut, nothing was asked of the daemon)."""

        def late() -> OpeningTimedOut | None:
            if deadline is None or time.monotonic() < deadline:
                return None
            return OpeningTimedOut(
                f"bulk session to {address}: no answer to its opening within the call's timeout"
            )

        def wait_s() -> float:
            """How long the next wait may take: the I/O timeout, or less."""
            if deadline is None:
                return self._io_timeout_s
            return min(self._io_timeout_s, max(deadline - time.monotonic(), 0.001))

        if (passed := late()) is not None:
            raise passed
        try:
            sock = self._pool.connect(address, wait_s())
        except BulkUnreachable:  # no connection could be made
            if (passed := late()) is not None:
                raise passed from None
            raise
        try:
            sock.settimeout(wait_s())
            status, _delivered = present(
                sock, preamble(SESSION_TICKET, self._credential) + frame(self._acting)
            )
            sock.settimeout(self._io_timeout_s)
        except (OSError, BulkBroken) as exc:
            sock.close()
            if isinstance(exc, TimeoutError) and (passed := late()) is not None:
                raise passed from None
            raise BulkBroken(f"bulk session to {address} failed: {exc}") from None
        if status.code == "OK":
            return sock
        sock.close()
        if status.code == "NOT_FOUND":
            with self._lock:
                self._unsupported.add(address)
            raise SessionsUnsupported(address)
        if status.code == "RESOURCE_EXHAUSTED":
            # every bulk connection slot is taken: this request goes another way
            # (gRPC) rather than failing; the next one tries a session again
            raise SessionsFull(f"bulk session to {address} refused: {status.message}")
        raise error_for(status.code, status.message, status.request_id)

    @contextmanager
    def session(self, address: str, deadline: float | None = None) -> Iterator[Session]:
        """A session to ``address`` for one request (pooled afterwards if the
        request ended in step). ``deadline`` (``time.monotonic``): the call's,
        which bounds opening a new session and then the request on it. Raises
        SessionsUnsupported, SessionsFull, BulkBroken, OpeningTimedOut."""
        with self._lock:
            if address in self._unsupported:
                raise SessionsUnsupported(address)
        sock = self._pool.take(address)
        if sock is not None:
            with self._lock:
                owed = self._owed.pop(sock, 0)
            s = Session(sock, True, owed, self._io_timeout_s, deadline)
            # (owed replies are read by the request itself, within its deadline;
            # while they wait the socket is readable and is not taken for closed)
            if _peer_closed(sock):  # closed while pooled: nothing sent yet
                sock.close()
                raise StaleSession(f"pooled bulk session to {address} was closed")
        else:
            s = Session(self._open(address, deadline), False, 0, self._io_timeout_s, deadline)
        try:
            yield s
        finally:
            if s.in_step and not s.buffered:
                if s.owed:
                    with self._lock:
                        self._owed[s.sock] = s.owed
                self._pool.give_back(address, s.sock)
            else:
                s.sock.close()


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the daemon has closed this idle connection (checked before a
    pooled session is used, so a request is never sent into a closed one and
    then retried without knowing whether it ran)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False  # nothing to read: open and idle
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""  # readable: EOF or stray bytes
    except OSError:
        return True
