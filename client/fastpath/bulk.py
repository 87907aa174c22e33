"""The client's side of the bulk TCP channel: a small pool of connections per
daemon address, and the two transfers (put: ``sendall`` from the callers'
buffers; get: ``recv_into`` the callers' buffers). Framing in
``tiermem.dataplane_wire``. An address is ``HOST:PORT``, or ``unix:@NAME`` for
the daemon's abstract Unix socket (``unix:PATH`` for one in the file system).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from tiermem.client.errors import error_for
from tiermem.dataplane_wire import LENGTH, MAX_STATUS_BYTES, preamble
from tiermem.v1 import dataplane_pb2

#: Pooled connections idle longer than this are dropped (the daemon closes its
#: end after dataplane.bulk.idle_timeout_s, 120 s by default).
MAX_IDLE_S = 60.0
#: SO_SNDBUF and SO_RCVBUF of the client's connections, as the daemon's defaults
#: (``dataplane.bulk.send_buffer_bytes`` / ``receive_buffer_bytes``; measured
#: there): a 4 MiB send buffer moved batches 5-10% slower on loopback.
SEND_BUFFER_BYTES = 2 << 20
RECEIVE_BUFFER_BYTES = 4 << 20


class BulkBroken(Exception):
    """The connection failed or ended mid-transfer (the daemon stores nothing of a
    broken put). Safe to retry the whole operation by another path."""


class BulkUnreachable(BulkBroken):
    """No connection could be made (nothing was sent): e.g. a restarted daemon
    listens on another Unix socket now."""


class IdleSockets:
    """Connections kept open for reuse, per daemon address, at most ``max_idle``
    each, dropped after ``MAX_IDLE_S``."""

    def __init__(
        self,
        io_timeout_s: float = 30.0,
        max_idle: int = 8,
        send_buffer_bytes: int = SEND_BUFFER_BYTES,
        receive_buffer_bytes: int = RECEIVE_BUFFER_BYTES,
    ) -> None:
        self._timeout = io_timeout_s
        self._send_buffer = send_buffer_bytes
        self._receive_buffer = receive_buffer_bytes
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[socket.socket, float]]] = {}

    def connect(self, address: str, timeout_s: float | None = None) -> socket.socket:
        """A new connection, made within ``timeout_s`` (None: the I/O timeout);
        its socket's timeout is then the I/O timeout. Raises BulkUnreachable if
        it cannot be made."""
        try:
            return self._connect(address, self._timeout if timeout_s is None else timeout_s)
        except OSError as exc:
            raise BulkUnreachable(f"bulk connection to {address} failed: {exc}") from None

    def _connect(self, address: str, timeout_s: float) -> socket.socket:
        if address.startswith("unix:"):
            sock = unix_connect(address, timeout_s)
        else:
            host, _, port = address.rpartition(":")
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self._timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
        return sock

    def take(self, address: str) -> socket.socket | None:
        """A pooled connection to ``address``, or None."""
        now = time.monotonic()
        with self._lock:
            idle = self._idle.get(address, [])
            while idle:
                sock, since = idle.pop()
                if now - since < MAX_IDLE_S:
                    return sock
                sock.close()
        return None

    def give_back(self, address: str, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if len(idle) < self._max_idle:
                idle.append((sock, time.monotonic()))
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            socks = [s for idle in self._idle.values() for s, _ in idle]
            self._idle.clear()
        for sock in socks:
            sock.close()


#: First pause before connecting again to a Unix socket whose accept queue is full.
UNIX_RETRY_S = 0.001


def unix_connect(address: str, timeout_s: float) -> socket.socket:
    """A connection to ``unix:@NAME`` (an abstract socket) or ``unix:PATH``.
    A full accept queue fails a Unix connect at once (EAGAIN) where TCP would
    retry its handshake: try again, pausing a little longer each time, until
    ``timeout_s``."""
    where = address.removeprefix("unix:")
    target = "\0" + where[1:] if where.startswith("@") else where
    deadline = time.monotonic() + timeout_s
    pause = UNIX_RETRY_S
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(target)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() + pause > deadline:
                raise
        except BaseException:
            sock.close()
            raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class _Bound:
    """Bounds each wait on a ticket's connection by the I/O timeout and by a
    call's deadline (``time.monotonic``; None: the I/O timeout alone), the way a
    bulk session request is bounded: before each ``sendall`` (a socket timeout
    bounds a whole ``sendall``) and each receive, the socket's timeout is set
    to what is left, at most the I/O timeout."""

    __slots__ = ("deadline", "io_timeout_s", "sock")

    def __init__(self, io_timeout_s: float, deadline: float | None) -> None:
        self.io_timeout_s = io_timeout_s
        self.deadline = deadline
        self.sock: socket.socket | None = None

    def __call__(self) -> None:
        """Before a wait on ``sock``: TimeoutError when the deadline passed."""
        if self.deadline is None or self.sock is None:
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the call's deadline passed")
        self.sock.settimeout(min(self.io_timeout_s, left))

    def wait_s(self) -> float:
        """How long making a connection may take."""
        if self.deadline is None:
            return self.io_timeout_s
        return min(self.io_timeout_s, max(self.deadline - time.monotonic(), 0.001))

    def passed(self, exc: BaseException | None = None) -> bool:
        """Whether the deadline passed (and ``exc``, if given, is a timeout)."""
        if exc is not None and not isinstance(exc, TimeoutError):
            return False
        return self.deadline is not None and time.monotonic() >= self.deadline - 0.001

    def late(self, what: str) -> Exception:
        return error_for("DEADLINE_EXCEEDED", f"{what}: not done by its call's deadline")


class BulkPool:
    def __init__(
        self,
        credential: bytes,
        io_timeout_s: float = 30.0,
        max_idle: int = 8,
    ) -> None:
        self.credential = credential
        self._io_timeout_s = io_timeout_s
        self._pool = IdleSockets(io_timeout_s, max_idle)
        self._give_back = self._pool.give_back
        self.close = self._pool.close

    def _take(self, address: str, bound: _Bound) -> tuple[socket.socket, bool]:
        """A connection and whether it was reused from the pool."""
        sock = self._pool.take(address)
        if sock is not None:
            return sock, True
        try:
            return self._pool.connect(address, bound.wait_s()), False
        except BulkUnreachable:
            if bound.passed():
                raise bound.late(f"bulk connection to {address}") from None
            raise

    def _done(self, address: str, sock: socket.socket, bound: _Bound) -> None:
        """Pool a connection whose transfer ended in step (its I/O timeout back)."""
        if bound.deadline is not None:
            sock.settimeout(self._io_timeout_s)
        self._give_back(address, sock)

    def _start(self, address: str, ticket_id: bytes, bound: _Bound) -> socket.socket:
        """Open (or reuse) a connection and present the ticket; returns once the
        daemon said go. A stale pooled connection is replaced once. Past the
        call's deadline (``bound``): DeadlineError, no byte of a value sent."""
        if bound.passed():
            raise bound.late(f"bulk transfer to {address}")
        for _attempt in range(2):
            # BulkUnreachable when refused / unreachable: the daemon is gone or moved
            sock, reused = self._take(address, bound)
            bound.sock = sock
            try:
                status, delivered = present(
                    sock, preamble(ticket_id, self.credential), before_wait=bound
                )
            except (OSError, BulkBroken) as exc:
                sock.close()
                if bound.passed(exc):
                    raise bound.late(f"bulk ticket presented to {address}") from None
                if reused:
                    continue
                raise BulkBroken(f"bulk connection to {address} failed: {exc}") from None
            if status.code != "OK":
                if delivered:  # a refused ticket leaves the connection usable
                    self._done(address, sock, bound)
                else:
                    sock.close()
                raise error_for(status.code, status.message, status.request_id)
            return sock
        raise BulkBroken(f"bulk connection to {address} failed twice")

    def put(
        self,
        address: str,
        ticket_id: bytes,
        views: Sequence[memoryview],
        deadline: float | None = None,
    ) -> dataplane_pb2.TransferStatus:
        """Send the objects' bytes in ticket order; returns the daemon's final status
        (its ``metas`` are the committed objects). Raises the daemon's error, or
        BulkBroken if the connection failed (then nothing was stored). Every
        wait ends by ``deadline`` (the call's, ``time.monotonic``; None: the I/O
        timeout alone): past it DeadlineError, the connection closed (a put cut
        off before its final status stores nothing unless the daemon had its
        bytes and committed them)."""
        bound = _Bound(self._io_timeout_s, deadline)
        sock = self._start(address, ticket_id, bound)
        try:
            for view in views:
                if len(view):
                    bound()
                    sock.sendall(view)
            status = read_status(sock, bound)
        except (OSError, BulkBroken) as exc:
            sock.close()
            if bound.passed(exc):
                raise bound.late(f"bulk put to {address}") from None
            raise BulkBroken(f"bulk put to {address} broke: {exc}") from None
        self._done(address, sock, bound)
        if status.code != "OK":
            raise error_for(status.code, status.message, status.request_id)
        return status

    def send_stream(
        self,
        address: str,
        ticket_id: bytes,
        chunks: Iterable[memoryview],
        deadline: float | None = None,
    ) -> dataplane_pb2.TransferStatus:
        """A stream ticket's bytes from ``chunks`` (produced as they are sent), then
        the daemon's final status. Raises the daemon's error, or BulkBroken.
        Every wait ends by ``deadline`` (as ``put``'s): past it DeadlineError,
        the connection closed."""
        bound = _Bound(self._io_timeout_s, deadline)
        sock = self._start(address, ticket_id, bound)
        try:
            for chunk in chunks:
                if len(chunk):
                    bound()
                    sock.sendall(chunk)
            status = read_status(sock, bound)
        except (OSError, BulkBroken) as exc:
            sock.close()
            if bound.passed(exc):
                raise bound.late(f"bulk stream to {address}") from None
            raise BulkBroken(f"bulk stream to {address} broke: {exc}") from None
        self._done(address, sock, bound)
        if status.code != "OK":
            raise error_for(status.code, status.message, status.request_id)
        return status

    def recv_stream(
        self,
        address: str,
        ticket_id: bytes,
        nbytes: int,
        buffer: memoryview,
        on_data: Callable[[memoryview], None],
        deadline: float | None = None,
    ) -> None:
        """A stream ticket's ``nbytes``, through ``buffer``, handed to ``on_data``
        a buffer at a time. Raises BulkBroken if the connection ends early.
        Every wait ends by ``deadline`` (as ``get``'s): past it DeadlineError,
        the connection closed."""
        bound = _Bound(self._io_timeout_s, deadline)
        sock = self._start(address, ticket_id, bound)
        try:
            left = nbytes
            while left:
                view = buffer[: min(len(buffer), left)]
                recv_exact(sock, view, bound)
                left -= len(view)
                on_data(view)
        except (OSError, BulkBroken) as exc:
            sock.close()
            if bound.passed(exc):
                raise bound.late(f"bulk stream from {address}") from None
            raise BulkBroken(f"bulk stream from {address} broke: {exc}") from None
        except BaseException:
            sock.close()  # the caller gave up mid-stream: the connection is out of step
            raise
        self._done(address, sock, bound)

    def get(
        self,
        address: str,
        ticket_id: bytes,
        outs: Sequence[memoryview],
        deadline: float | None = None,
    ) -> None:
        """Receive the streamed objects' bytes into ``outs`` (exact sizes, ticket
        order). Every wait ends by ``deadline`` (as ``put``'s): past it
        DeadlineError, the connection closed."""
        bound = _Bound(self._io_timeout_s, deadline)
        sock = self._start(address, ticket_id, bound)
        try:
            for out in outs:
                recv_exact(sock, out, bound)
        except (OSError, BulkBroken) as exc:
            sock.close()
            if bound.passed(exc):
                raise bound.late(f"bulk get from {address}") from None
            raise BulkBroken(f"bulk get from {address} broke: {exc}") from None
        self._done(address, sock, bound)


def recv_exact(
    sock: socket.socket, view: memoryview, before_wait: Callable[[], None] | None = None
) -> None:
    """Fill ``view`` from ``sock``; each wait is bounded by the socket's timeout,
    which ``before_wait`` (run before each receive) may set. (A bulk session's
    reads go through ``Session``'s read-ahead instead.)"""
    size = len(view)
    got = 0
    while got < size:
        if before_wait is not None:
            before_wait()
        n = sock.recv_into(view[got:] if got else view, size - got)
        if n == 0:
            raise BulkBroken(f"connection closed after {got} of {size} bytes")
        got += n


def read_frame(
    sock: socket.socket,
    limit_bytes: int = MAX_STATUS_BYTES,
    before_wait: Callable[[], None] | None = None,
) -> bytes:
    """One length-prefixed frame's body (at most ``limit_bytes``)."""
    head = bytearray(LENGTH.size)
    recv_exact(sock, memoryview(head), before_wait)
    (length,) = LENGTH.unpack(head)
    if length > limit_bytes:
        raise BulkBroken(f"frame of {length} bytes exceeds {limit_bytes}")
    body = bytearray(length)
    recv_exact(sock, memoryview(body), before_wait)
    return bytes(body)


def present(
    sock: socket.socket, opening: bytes, before_wait: Callable[[], None] | None = None
) -> tuple[dataplane_pb2.TransferStatus, bool]:
    """Send a connection's opening (preamble, ...) and read the daemon's answer;
    returns it and whether the opening was delivered. A daemon refusing a
    connection (every slot taken) answers and closes without reading it: on a
    Unix socket the send then fails (EPIPE) while the answer waits to be read,
    so it is read then too. Raises OSError or BulkBroken when there is none.
    ``before_wait`` runs before the send and each receive (see ``recv_exact``)."""
    try:
        if before_wait is not None:
            before_wait()
        sock.sendall(opening)
    except (BrokenPipeError, ConnectionResetError) as exc:
        try:
            status = read_status(sock, before_wait)
        except (OSError, BulkBroken):
            raise exc from None
        if status.code == "OK":  # it cannot have accepted what it did not get
            raise exc from None
        return status, False
    return read_status(sock, before_wait), True


def read_status(
    sock: socket.socket, before_wait: Callable[[], None] | None = None
) -> dataplane_pb2.TransferStatus:
    """One STATUS frame, read exactly (nothing after it is consumed)."""
    msg = dataplane_pb2.TransferStatus()
    msg.ParseFromString(read_frame(sock, before_wait=before_wait))
    return msg
