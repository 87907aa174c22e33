"""The bulk channel's TCP server: accepts connections, reads preambles, claims
tickets and runs their transfers (``transfers.BulkTransfers``). Framing in
``tiermem.dataplane_wire``.

The same channel is also served on an abstract Unix socket (``unix``) for
clients on this host: a small request and its reply cost about half the CPU
of TCP on loopback (measured here: 51-62 vs 100 µs per round trip), and the
bulk session's shared-memory control messages are all small. Its peers are
named ``local``, as loopback TCP peers are (``identity.normal_host``).

One thread per connection, at most ``dataplane.bulk.max_connections``; a
connection carries transfers one after another and is closed after
``idle_timeout_s`` without one, after ``io_timeout_s`` of silence inside one,
or as soon as a transfer breaks (the daemon then stores nothing of it).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import struct
import threading
from collections.abc import Callable

from tiermem.dataplane_wire import (
    MAGIC,
    MAX_CREDENTIAL_BYTES,
    PREAMBLE,
    SESSION_TICKET,
    VERSION,
    frame,
)
from tiermem.server.config import BulkChannelConfig
from tiermem.server.dataplane.identity import LOCAL_HOST, normal_host, principal_of
from tiermem.server.dataplane.transfers import BulkTransfers, Ticket, TransferBroken
from tiermem.server.errors import TiermemError
from tiermem.server.metrics import Metrics
from tiermem.v1 import common_pb2, dataplane_pb2

log = logging.getLogger(__name__)

#: Runs a session on a connection whose preamble presented ``SESSION_TICKET``:
#: ``(connection, credential, peer host) -> keep the connection open`` (never,
#: in practice: a session ends with its connection). ``api.bulk_session``.
SessionHandler = Callable[[socket.socket, bytes, str], bool]


class Closed(Exception):
    """The peer closed the connection between transfers (a normal end)."""


class BulkServer:
    def __init__(
        self, transfers: BulkTransfers, config: BulkChannelConfig, metrics: Metrics
    ) -> None:
        self._transfers = transfers
        self._config = config
        self._metrics = metrics
        self._listeners: list[socket.socket] = []
        self._accepting: list[threading.Thread] = []
        self._slots = threading.BoundedSemaphore(config.max_connections)
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
        self.address = ""
        #: ``unix:@NAME`` of the abstract Unix socket ("" = not served)
        self.unix_address = ""
        #: serves sessions (None: a session preamble is refused as an unknown ticket)
        self.sessions: SessionHandler | None = None

    def start(self, tcp: bool = True) -> str:
        """Listen and serve; returns the advertised HOST:PORT ("" without
        ``tcp``: only the Unix socket is served, as under TLS, where a plaintext
        TCP listener would take bearer tokens from whoever finds its port)."""
        cfg = self._config
        if tcp:
            listener = socket.create_server((cfg.host, cfg.port), backlog=128)
            port = listener.getsockname()[1]
            self._listen(listener)
            self.address = f"{cfg.advertise_host or cfg.host}:{port}"
        if cfg.unix:
            self.unix_address = self._listen_unix()
        log.info("bulk channel on %s %s", self.address, self.unix_address)
        return self.address

    def _listen_unix(self) -> str:
        """Listen on an abstract Unix socket of a random name; its ``unix:@NAME``
        address ("" when the system has none: only Linux does)."""
        name = f"tiermem-bulk-{secrets.token_hex(8)}"
        try:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except (AttributeError, OSError) as exc:
            log.warning("bulk channel: no Unix socket (%s); local clients use TCP", exc)
            return ""
        try:
            listener.bind("\0" + name)
            listener.listen(128)
        except OSError as exc:
            listener.close()
            log.warning("bulk channel: no abstract Unix socket (%s); local clients use TCP", exc)
            return ""
        self._listen(listener)
        return f"unix:@{name}"

    def _listen(self, listener: socket.socket) -> None:
        thread = threading.Thread(
            target=self._accept, args=(listener,), name="tiermem-bulk", daemon=True
        )
        self._listeners.append(listener)
        self._accepting.append(thread)
        thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        # no connection is accepted after this, so the list below has them all
        for thread in self._accepting:
            thread.join(timeout=10)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:  # their transfers fail fast once the sockets are shut
            thread.join(timeout=10)

    # -- connections ------------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        tcp = listener.family != socket.AF_UNIX
        while not self._stopping.is_set():
            try:
                conn, addr = listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                self._refuse(conn, "RESOURCE_EXHAUSTED", "too many bulk connections; retry")
                continue
            thread = threading.Thread(
                target=self._serve,
                args=(conn, normal_host(str(addr[0])) if tcp else LOCAL_HOST, tcp),
                name="tiermem-bulk-conn",
                daemon=True,
            )
            with self._lock:
                self._conns.add(conn)
                self._threads.add(thread)
            thread.start()

    def _refuse(self, conn: socket.socket, code: str, message: str) -> None:
        try:
            conn.settimeout(1.0)
            conn.sendall(status(code, message))
        except OSError:
            pass
        finally:
            conn.close()
        self._metrics.bulk_transfers.labels("-", "refused").inc()

    def _serve(self, conn: socket.socket, host: str, tcp: bool) -> None:
        cfg = self._config
        self._metrics.bulk_connections.inc()
        try:
            if tcp:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(cfg.send_buffer_bytes))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(cfg.receive_buffer_bytes))
            kernel_timeouts(conn, cfg.io_timeout_s)
            while not self._stopping.is_set():
                if not self._one_transfer(conn, host):
                    return
        except (Closed, OSError):
            return
        except Exception:
            log.exception("bulk connection from %s failed", host)
        finally:
            with self._lock:
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())
            conn.close()
            self._slots.release()
            self._metrics.bulk_connections.dec()

    def _one_transfer(self, conn: socket.socket, host: str) -> bool:
        """Serve one transfer; False when the connection must be closed."""
        cfg = self._config
        receive_timeout(conn, cfg.idle_timeout_s)
        head = recv_exact(conn, PREAMBLE.size, between_transfers=True)
        receive_timeout(conn, cfg.io_timeout_s)
        magic, version, cred_len, ticket_id = PREAMBLE.unpack(head)
        if magic != MAGIC or version != VERSION or cred_len > MAX_CREDENTIAL_BYTES:
            conn.sendall(
                status(
                    "INVALID_ARGUMENT",
                    f"not a tiermem bulk preamble (magic {magic!r}, version {version}); "
                    f"this daemon speaks version {VERSION}",
                )
            )
            self._metrics.bulk_transfers.labels("-", "refused").inc()
            return False
        credential = recv_exact(conn, cred_len) if cred_len else b""
        if ticket_id == SESSION_TICKET and self.sessions is not None:
            return self.sessions(conn, credential, host)
        try:
            ticket = self._transfers.claim(ticket_id, principal_of(credential, host))
        except TiermemError as exc:
            conn.sendall(status(exc.code, exc.message))
            self._metrics.bulk_transfers.labels("-", "refused").inc()
            return True
        op = ticket.op
        if ticket.stream is not None:
            return self._stream(conn, ticket)
        if op == "get":
            try:
                self._transfers.send(ticket, conn, header=status("OK", ""))
            except OSError:
                self._metrics.bulk_transfers.labels(op, "broken").inc()
                raise
            self._metrics.bulk_transfers.labels(op, "ok").inc()
            return True
        conn.sendall(status("OK", ""))
        try:
            metas = self._transfers.receive(ticket, conn)
        except (TransferBroken, OSError) as exc:
            self._metrics.bulk_transfers.labels(op, "broken").inc()
            log.warning("bulk put broken, nothing stored: %s", exc)
            return False
        except TiermemError as exc:
            self._metrics.bulk_transfers.labels(op, "failed").inc()
            conn.sendall(status(exc.code, exc.message))
            return True
        self._metrics.bulk_transfers.labels(op, "ok").inc()
        conn.sendall(status("OK", "", metas))
        return True

    def _stream(self, conn: socket.socket, ticket: Ticket) -> bool:
        """A stream ticket: OK, the bytes, and (streams in) a final status. A stream
        out that fails midway closes the connection (the client sees a short read)."""
        label = "put" if ticket.op == "stream_in" else "get"
        conn.sendall(status("OK", ""))
        try:
            self._transfers.run_stream(ticket, conn)
        except (TransferBroken, OSError) as exc:
            self._metrics.bulk_transfers.labels(label, "broken").inc()
            log.info("bulk stream broken: %s", exc)
            return False
        except TiermemError as exc:
            self._metrics.bulk_transfers.labels(label, "failed").inc()
            if ticket.op == "stream_out":
                log.warning("bulk stream out failed, connection closed: %s", exc.message)
                return False
            conn.sendall(status(exc.code, exc.message))
            return True
        self._metrics.bulk_transfers.labels(label, "ok").inc()
        if ticket.op == "stream_in":
            conn.sendall(status("OK", ""))
        return True


def status(
    code: str, message: str, metas: list[common_pb2.ObjectMeta] | None = None, request_id: str = ""
) -> bytes:
    """A framed TransferStatus; ``metas``: the committed objects of a put."""
    if code == "OK" and not message and not metas and not request_id:
        return _PLAIN_OK  # most replies: built once
    msg = dataplane_pb2.TransferStatus(code=code, message=message, request_id=request_id)
    if metas:
        msg.metas.extend(metas)
    return frame(msg.SerializeToString())


_PLAIN_OK = frame(dataplane_pb2.TransferStatus(code="OK").SerializeToString())


_TIMEVAL = struct.Struct("@ll")  # struct timeval: seconds, microseconds


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return _TIMEVAL.pack(whole, max(int((seconds - whole) * 1e6), 0 if whole else 1))


def kernel_timeouts(conn: socket.socket, seconds: float) -> None:
    """Make ``conn`` a blocking socket whose reads and writes each give up after
    ``seconds`` (``SO_RCVTIMEO``/``SO_SNDTIMEO``; they then raise
    ``BlockingIOError``). Why not ``settimeout``: Python implements a socket
    timeout by polling before every read and write and by an ioctl at every
    change of timeout, each a system call that lets go of the interpreter lock;
    under load every such hand-over can cost a thread switch interval before
    the request's thread gets the lock back. A blocking socket reads or writes
    in one call, and ``receive_timeout`` changes the read limit without
    letting go of the lock. Each call is bounded (a stall cut-off), as Python's
    ``recv`` timeout is; a ``sendall`` can take longer in total while the
    peer keeps reading."""
    conn.settimeout(None)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(seconds))


def receive_timeout(conn: socket.socket, seconds: float) -> None:
    """Set how long each read of a ``kernel_timeouts`` socket may wait."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))


def recv_exact(conn: socket.socket, n: int, between_transfers: bool = False) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = conn.recv_into(view[got:], n - got)
        except BlockingIOError:  # a ``kernel_timeouts`` socket's read limit
            raise TimeoutError(
                f"bulk connection: nothing received for the read limit after {got} of {n} bytes"
            ) from None
        if k == 0:
            if between_transfers and got == 0:
                raise Closed()
            raise OSError(f"bulk connection closed after {got} of {n} preamble bytes")
        got += k
    return bytes(buf)
