"""Socket timeouts kept by the kernel (``SO_RCVTIMEO``/``SO_SNDTIMEO``).

A Python socket with a timeout (``settimeout(x)``) is non-blocking underneath:
each ``recv``/``send`` first waits in ``poll(2)`` and then makes the call, and
each ``settimeout`` is an ``ioctl``. Every one of those system calls lets go of
the interpreter lock and has to take it back. A bulk session request made
three polls and two ioctls beside its two receives and one send, and on this
project's machines (virtual, paravirtualised locks) ``poll``'s own clean-up
took a fifth of the daemon's CPU for a small get.

A blocking socket with kernel timeouts makes one call per receive or send: it
blocks in the kernel and fails with EAGAIN (``BlockingIOError``) once the
timeout passes without progress. Callers turn that into ``TimeoutError``
(``timed_out``). Unlike ``settimeout``, the send timeout bounds each ``send``
inside a ``sendall``, not the whole ``sendall``: a peer that keeps taking bytes
keeps a large send going.

Setting a kernel timeout is a ``setsockopt``, which CPython makes without
letting go of the interpreter lock.
"""

from __future__ import annotations

import socket
import struct

#: ``struct timeval``: seconds and microseconds, each a C long.
_TIMEVAL = struct.Struct("@ll")


def _timeval(seconds: float) -> bytes:
    # a zero timeval means "wait forever" to the kernel: the shortest real
    # timeout is one microsecond
    micros = max(1, round(seconds * 1_000_000))
    return _TIMEVAL.pack(micros // 1_000_000, micros % 1_000_000)


def use_kernel_timeouts(sock: socket.socket, recv_s: float, send_s: float) -> None:
    """Make ``sock`` blocking, its receives and sends bounded by the kernel."""
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(recv_s))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(send_s))


def set_recv_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound each receive on a socket set up by ``use_kernel_timeouts``."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))


def set_send_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound each send on a socket set up by ``use_kernel_timeouts``."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(seconds))


def timed_out(what: str) -> TimeoutError:
    """The ``TimeoutError`` to raise for a kernel timeout (``BlockingIOError``)."""
    return TimeoutError(f"timed out {what}")
