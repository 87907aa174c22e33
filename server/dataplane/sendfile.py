"""Sending values of a bulk get that lie in the DRAM arena with sendfile(2),
when ``dataplane.bulk.sendfile`` is on (off by default).

The arena is a ``/dev/shm`` file mapped into the daemon. ``sendall`` of a view
of the mapping copies the bytes from user space into the socket; ``sendfile``
has the kernel take them from the file's pages instead. On this VM (tmpfs
without huge pages) that once sent 32 MiB over loopback TCP in 10.2 ms against
13.6 ms for ``sendall`` of the mapped view, and 8 MiB in 3.0 against 3.5 ms;
with kernel 6.18 (2026-12-02) ``sendall`` was faster in 19 of 24 interleaved
pairs, hence off by default.
Below ``SENDFILE_MIN_BYTES`` the gain is lost in the extra system calls, so
small values keep leaving with the reply in one gathered ``sendmsg``.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tiermem.dataplane_wire import send_parts

log = logging.getLogger(__name__)

#: Values at least this large (bytes) are sent from the arena file by sendfile.
SENDFILE_MIN_BYTES = 1 << 20

#: Where a view's bytes lie in a file: ``(view) -> offset`` or None
#: (``DramEngine.file_span``).
Locate = Callable[[memoryview], "int | None"]


@dataclass(frozen=True, slots=True)
class FileSpan:
    """``nbytes`` bytes at ``offset`` of the open file ``fd``."""

    fd: int
    offset: int
    nbytes: int


#: errnos saying this kernel or file system cannot sendfile from the arena to
#: a socket (a sandboxed kernel, an unusual mount): values then leave from
#: memory, for the rest of the process's life.
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})
_supported = True


class Unsupported(Exception):
    """sendfile cannot be used here; nothing of the span was sent."""


def send_values(
    conn: socket.socket,
    header: bytes,
    views: Sequence[memoryview],
    fd: int,
    locate: Locate,
    before_send: Callable[[], None] | None = None,
) -> None:
    """Write ``header`` and then ``views`` back to back on ``conn``: runs of
    small values (and values outside the file) gathered by ``sendmsg`` as
    ``send_parts`` does, large values that lie in file ``fd`` by sendfile.
    ``before_send`` runs before each system-call-level send of either kind
    (a whole reply's ``SendDeadline``, as ``send_parts`` takes it)."""
    global _supported
    run: list[bytes | memoryview] = [header]
    for view in views:
        large = _supported and view.nbytes >= SENDFILE_MIN_BYTES
        offset = locate(view) if large else None
        if offset is None:
            run.append(view)
            continue
        send_parts(conn, run, before_send)
        run = []
        try:
            send_span(conn, FileSpan(fd, offset, view.nbytes), before_send)
        except Unsupported as exc:
            _supported = False
            log.warning(
                "sendfile from the arena is not supported here (%s); sending from memory", exc
            )
            run.append(view)
    send_parts(conn, run, before_send)


def send_span(
    conn: socket.socket, span: FileSpan, before_send: Callable[[], None] | None = None
) -> None:
    """Send a file span on ``conn``, waiting at most the socket's send timeout
    (its Python timeout, else ``SO_SNDTIMEO``) each time its send buffer is
    full.

    ``before_send`` (a whole reply's deadline) runs before each sendfile call.
    For it to be checked often enough the span is sent with the socket
    non-blocking (restored before returning): each call moves only what the
    send buffer takes, and each wait for room is a ``poll`` of at most the send
    timeout. A blocking sendfile(2) would move the whole span in one call, in
    pipe-sized pieces (64 KiB) that each get a fresh ``SO_SNDTIMEO``: a client
    reading a trickle keeps every piece moving, so that one call would last as
    long as the client kept reading. Without ``before_send`` it does that (one
    call; a peer that stops reading still ends it at the send timeout)."""
    out = conn.fileno()
    timeout = conn.gettimeout()  # not None: non-blocking underneath already
    blocking = timeout is None
    if blocking and before_send is not None:
        timeout = _send_timeout_s(conn)
        os.set_blocking(out, False)
    try:
        _send_span(out, span, timeout, blocking and before_send is None, before_send)
    finally:
        if blocking and before_send is not None:
            os.set_blocking(out, True)


def _send_span(
    out: int,
    span: FileSpan,
    timeout: float | None,
    blocking: bool,
    before_send: Callable[[], None] | None,
) -> None:
    """``send_span``'s loop on socket ``out``: ``blocking``, a blocking socket
    whose kernel send limit ran out when sendfile raises EAGAIN; otherwise a
    non-blocking one polled for room up to ``timeout`` (None: no limit)."""
    offset, left = span.offset, span.nbytes
    poller: select.poll | None = None
    while left:
        if before_send is not None:
            before_send()
        try:
            sent = os.sendfile(out, span.fd, offset, left)
        except BlockingIOError:  # a non-blocking socket's buffer is full
            if blocking:  # the kernel's send limit ran out
                raise TimeoutError("timed out sending a value to the bulk client") from None
            if poller is None:
                poller = select.poll()
                poller.register(out, select.POLLOUT)
            if not poller.poll(None if timeout is None else timeout * 1000):
                raise TimeoutError("timed out sending a value to the bulk client") from None
            continue
        except OSError as exc:
            if exc.errno in _UNSUPPORTED and left == span.nbytes:
                raise Unsupported(str(exc)) from None
            raise
        if sent == 0:
            raise OSError(f"the arena file ended {left} bytes before a value's end")
        offset += sent
        left -= sent


_TIMEVAL = struct.Struct("@ll")  # struct timeval: seconds, microseconds


def _send_timeout_s(conn: socket.socket) -> float | None:
    """A blocking socket's ``SO_SNDTIMEO`` in seconds (None: none set)."""
    seconds, micros = _TIMEVAL.unpack(
        conn.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.size)
    )
    limit = seconds + micros / 1e6
    return limit if limit > 0 else None
