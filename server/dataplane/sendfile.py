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
    conn: socket.socket, header: bytes, views: Sequence[memoryview], fd: int, locate: Locate
) -> None:
    """Write ``header`` and then ``views`` back to back on ``conn``: runs of
    small values (and values outside the file) gathered by ``sendmsg`` as
    ``send_parts`` does, large values that lie in file ``fd`` by sendfile."""
    global _supported
    run: list[bytes | memoryview] = [header]
    for view in views:
        large = _supported and view.nbytes >= SENDFILE_MIN_BYTES
        offset = locate(view) if large else None
        if offset is None:
            run.append(view)
            continue
        send_parts(conn, run)
        run = []
        try:
            send_span(conn, FileSpan(fd, offset, view.nbytes))
        except Unsupported as exc:
            _supported = False
            log.warning(
                "sendfile from the arena is not supported here (%s); sending from memory", exc
            )
            run.append(view)
    send_parts(conn, run)


def send_span(conn: socket.socket, span: FileSpan) -> None:
    """Send a file span on ``conn``, waiting at most the socket's timeout each
    time its send buffer is full (as ``sendall`` does)."""
    out = conn.fileno()
    timeout = conn.gettimeout()
    offset, left = span.offset, span.nbytes
    poller: select.poll | None = None
    while left:
        try:
            sent = os.sendfile(out, span.fd, offset, left)
        except BlockingIOError:  # a socket with a timeout is non-blocking underneath
            if timeout is None:  # blocking: the kernel's send limit ran out
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
