"""Bulk sessions: requests on the bulk TCP channel without a gRPC call each.

A client authenticates once when it opens the session (its credential, as
for gRPC) and then sends framed BeginPut/BeginGet requests followed by (put)
or followed by the daemon's reply and (get) the raw bytes; framing in
``tiermem.dataplane_wire``. Each request runs exactly the checks and the code
of its gRPC twin: the same authorization of every namespace it names
(``authorize_request``), then ``BulkTransfers.begin_put`` / ``begin_get``
(validation, guard admission, quotas, acting session) and the same
``receive`` / ``send`` that ticketed transfers use. The ticket is used at
once on the session's own connection, so it never enters the ticket table
(no id to draw, nothing to claim or reap); the data plane's byte budget
holds as for gRPC-negotiated transfers, and the number of such tickets is
bounded by the bulk connections (one request at a time each).

Requests answered by one message (``UnaryOp``: KV prefix lookups, the
shared-memory Lease, Release, Reserve and Commit, and ObjectService's Stat,
Delete and List) run their gRPC method's reply function with the session's
principal as the lease owner: a local client's control and metadata traffic
needs no gRPC call either.

A session is bound to the credentials that opened it: every request runs as
that principal. It is closed when idle for ``dataplane.bulk.idle_timeout_s``,
when a request is malformed (an INVALID_ARGUMENT status first), and when a
transfer breaks; a refused request (quota, missing object, ...) leaves it open.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError, Message

from tiermem.dataplane_wire import (
    FLAG_ACCEPT_WITH_RESULT,
    LENGTH,
    MAX_ACTING_BYTES,
    MAX_REQUEST_BYTES,
    OP_COMMIT,
    OP_DELETE,
    OP_GET,
    OP_LEASE,
    OP_LIST,
    OP_PUT,
    OP_RELEASE,
    OP_RESERVE,
    OP_STAT,
    PIPELINED_PUT_MAX_BYTES,
    REQUEST,
    frame,
)
from tiermem.server.api.access import Authenticator
from tiermem.server.api.convert import put_spec
from tiermem.server.api.dataplane import (
    commit_reply,
    lease_reply,
    release_reply,
    reserve_reply,
    ticket_message,
)
from tiermem.server.api.interceptor import new_request_id, request_id
from tiermem.server.api.namespaces import authorize_request
from tiermem.server.api.objects import delete_reply, list_reply, stat_reply
from tiermem.server.config import Config
from tiermem.server.dataplane import after_reply
from tiermem.server.dataplane.bulk import Closed, receive_timeout, recv_exact, status
from tiermem.server.dataplane.identity import principal_of
from tiermem.server.dataplane.plane import DataPlane
from tiermem.server.dataplane.transfers import BulkTransfers, TransferBroken
from tiermem.server.errors import (
    InvalidArgument,
    TiermemError,
    Unauthenticated,
)
from tiermem.server.metrics import Metrics
from tiermem.server.model import validate_session
from tiermem.server.protoconv import key_from_proto
from tiermem.server.services.guard import Guard, Principal, current_deadline, current_principal
from tiermem.server.services.objects import ObjectService
from tiermem.v1 import dataplane_pb2, object_pb2

log = logging.getLogger(__name__)

_METHOD = "/tiermem.v1.DataPlaneService/"


@dataclass(frozen=True, slots=True)
class UnaryOp:
    """A session op answered by one message, served exactly as its gRPC method:
    the same authorization of every namespace the request names, the same code
    (``run(owner, acting, request)``), counted in the method's request metrics."""

    method: str  # the gRPC method, "/tiermem.v1.KvService/LookupPrefix"
    request: type[Message]
    run: Callable[[str, str, Any], Message]

    @property
    def label(self) -> str:
        """The method's name in request metrics ("KvService/LookupPrefix")."""
        return self.method.rsplit(".", 1)[-1]


def shm_ops(plane: DataPlane) -> dict[int, UnaryOp]:
    """The shared-memory control ops (Lease, Release, Reserve, Commit): each
    runs its gRPC method's reply function with the session's principal as the
    lease owner."""
    return {
        OP_LEASE: UnaryOp(
            _METHOD + "Lease",
            dataplane_pb2.LeaseRequest,
            lambda owner, acting, request: lease_reply(plane, owner, acting, request),
        ),
        OP_RELEASE: UnaryOp(
            _METHOD + "Release",
            dataplane_pb2.ReleaseRequest,
            lambda owner, _acting, request: release_reply(plane, owner, request),
        ),
        OP_RESERVE: UnaryOp(
            _METHOD + "Reserve",
            dataplane_pb2.ReserveRequest,
            lambda owner, acting, request: reserve_reply(plane, owner, acting, request),
        ),
        OP_COMMIT: UnaryOp(
            _METHOD + "Commit",
            dataplane_pb2.CommitRequest,
            lambda owner, _acting, request: commit_reply(plane, owner, request),
        ),
    }


def object_ops(objects: ObjectService) -> dict[int, UnaryOp]:
    """ObjectService's Stat, Delete and List: each runs its gRPC method's reply
    function with the session's acting session."""
    method = "/tiermem.v1.ObjectService/"
    return {
        OP_STAT: UnaryOp(
            method + "Stat",
            object_pb2.StatRequest,
            lambda _owner, acting, request: stat_reply(objects, acting, request),
        ),
        OP_DELETE: UnaryOp(
            method + "Delete",
            object_pb2.DeleteRequest,
            lambda _owner, acting, request: delete_reply(objects, acting, request),
        ),
        OP_LIST: UnaryOp(
            method + "List",
            object_pb2.ListRequest,
            lambda _owner, acting, request: list_reply(objects, acting, request),
        ),
    }


class BulkSessions:
    """Serves sessions on connections the bulk server hands over (``serve``)."""

    def __init__(
        self,
        transfers: BulkTransfers,
        guard: Guard,
        config: Config,
        metrics: Metrics,
        unary: Mapping[int, UnaryOp] | None = None,
    ) -> None:
        """``unary``: the ops beyond put and get this daemon's sessions carry."""
        #: the unary ops served, by op number
        self.unary = dict(unary or {})
        self._transfers = transfers
        self._guard = guard
        self._auth = Authenticator(config.security)
        self._bulk = config.dataplane.bulk
        self._max_request_s = config.limits.max_request_s
        self._metrics = metrics
        # shutdown drains sessions (``drain``): those waiting for a request are
        # closed at once, the others after the request they are serving
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self._serving = 0
        self._waiting: set[socket.socket] = set()
        self._draining = False

    def drain(self) -> None:
        """Take no more requests: a session waiting for one is closed now (its
        read side shut), one serving a request after it has answered, and a
        session opened from now on is refused UNAVAILABLE. ``wait_drained``
        waits for them to end."""
        with self._lock:
            self._draining = True
            waiting = list(self._waiting)
        for conn in waiting:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)  # its pending read returns: the session ends

    def wait_drained(self, timeout_s: float) -> bool:
        """After ``drain``: wait up to ``timeout_s`` for every session to end."""
        with self._ended:
            return self._ended.wait_for(lambda: self._serving == 0, timeout_s)

    def serve(self, conn: socket.socket, credential: bytes, host: str) -> bool:
        """Run a session on ``conn`` until it ends; False: close the connection."""
        with self._lock:
            draining = self._draining
            if not draining:
                self._serving += 1
        if draining:
            conn.sendall(status("UNAVAILABLE", "the daemon is shutting down"))
            return False
        try:
            return self._serve(conn, credential, host)
        finally:
            with self._lock:
                self._serving -= 1
                self._waiting.discard(conn)
                self._ended.notify_all()

    def _serve(self, conn: socket.socket, credential: bytes, host: str) -> bool:
        try:
            principal = self._auth.principal(
                [("authorization", credential.decode(errors="replace"))] if credential else []
            )
        except Unauthenticated as exc:
            self._metrics.auth_failures.labels("token").inc()
            conn.sendall(status(exc.code, exc.message))
            return False
        try:
            acting = self._read_acting(conn)
        except TiermemError as exc:
            conn.sendall(status(exc.code, exc.message))
            return False
        owner = principal_of(credential, host)
        conn.sendall(status("OK", ""))
        self._metrics.bulk_sessions.inc()
        while True:
            receive_timeout(conn, self._bulk.idle_timeout_s)
            with self._lock:
                if self._draining:
                    return False
                self._waiting.add(conn)
            try:
                head = recv_exact(conn, REQUEST.size, between_transfers=True)
            except (Closed, TimeoutError):
                return False  # the client left, the session expired idle, or shutdown
            finally:
                with self._lock:
                    self._waiting.discard(conn)
            receive_timeout(conn, self._bulk.io_timeout_s)
            op, flags, timeout_cs, length = REQUEST.unpack(head)
            unary = self.unary.get(op)
            if (op not in (OP_PUT, OP_GET) and unary is None) or length > MAX_REQUEST_BYTES:
                self._malformed(
                    conn,
                    f"session request with op {op} and {length} bytes: ops are {OP_PUT} (put), "
                    f"{OP_GET} (get) and {', '.join(map(str, sorted(self.unary)))}, at most "
                    f"{MAX_REQUEST_BYTES} bytes; session closed",
                )
                return False
            payload = recv_exact(conn, length)
            msg: Any = (
                unary.request()
                if unary is not None
                else dataplane_pb2.BeginPutRequest()
                if op == OP_PUT
                else dataplane_pb2.BeginGetRequest()
            )
            try:
                msg.ParseFromString(payload)
            except DecodeError:
                self._malformed(
                    conn, f"session request payload is not a {type(msg).__name__}; session closed"
                )
                return False
            budget_s = self._max_request_s
            if timeout_cs:  # the caller's timeout, within the daemon's own limit
                budget_s = min(budget_s, timeout_cs / 100)
            if not self._request(conn, principal, owner, acting, op, flags, msg, budget_s):
                return False

    def _read_acting(self, conn: socket.socket) -> str:
        (length,) = LENGTH.unpack(recv_exact(conn, LENGTH.size))
        if length > MAX_ACTING_BYTES:
            raise InvalidArgument(
                f"session opening names an acting session of {length} bytes "
                f"(at most {MAX_ACTING_BYTES})"
            )
        try:
            acting = recv_exact(conn, length).decode()
        except UnicodeDecodeError:
            raise InvalidArgument("the acting session name is not UTF-8") from None
        validate_session(acting)
        return acting

    def _malformed(self, conn: socket.socket, message: str) -> None:
        self._metrics.child(self._metrics.bulk_transfers, "-", "refused").inc()
        conn.sendall(status("INVALID_ARGUMENT", message))

    def _request(
        self,
        conn: socket.socket,
        principal: Principal,
        owner: str,
        acting: str,
        op: int,
        flags: int,
        msg: Any,
        budget_s: float,
    ) -> bool:
        """One request, run as ``principal`` within ``budget_s`` seconds (as the
        guard checks deadlines); False when the session must end."""
        p_token = current_principal.set(principal)
        d_token = current_deadline.set(time.monotonic() + budget_s)
        r_token = request_id.set(new_request_id())  # log lines and refusals carry it
        try:
            if op == OP_PUT:
                return self._put(conn, owner, acting, msg, flags)
            if op == OP_GET:
                return self._get(conn, owner, acting, msg)
            return self._answer(conn, owner, acting, self.unary[op], msg)
        except (TiermemError, OSError, TransferBroken):
            raise
        except Exception as exc:
            # a bug, not the caller's fault: answer INTERNAL (as gRPC does) rather
            # than dropping the connection without a word, then end the session
            # (the request may have stopped mid-way through its bytes)
            log.error("internal error in a bulk session request (op %d)", op, exc_info=exc)
            with contextlib.suppress(OSError):
                conn.sendall(
                    status(
                        "INTERNAL",
                        f"internal error: {type(exc).__name__}: {exc}",
                        request_id=request_id.get(),
                    )
                )
            return False
        finally:
            current_principal.reset(p_token)
            current_deadline.reset(d_token)
            request_id.reset(r_token)

    def _put(
        self,
        conn: socket.socket,
        owner: str,
        acting: str,
        msg: dataplane_pb2.BeginPutRequest,
        flags: int,
    ) -> bool:
        transfers = self._transfers
        announced = sum(int(h.size_bytes) for h in msg.objects)
        try:
            authorize_request(self._guard, _METHOD + "BeginPut", msg)
            ticket = transfers.begin_put(
                owner, [put_spec(h, acting) for h in msg.objects], issue=False
            )
        except TiermemError as exc:
            self._metrics.child(self._metrics.bulk_transfers, "put", "refused").inc()
            conn.sendall(_refusal(exc))
            return announced > PIPELINED_PUT_MAX_BYTES or _drop(conn, announced)
        # A pipelined put's bytes follow its request unasked: when its client
        # says it reads both statuses together, the "OK" goes out with the final
        # one (one reply, one wake-up of the client); a larger put waits for it.
        accepted = status("OK", "")
        if announced > PIPELINED_PUT_MAX_BYTES or not flags & FLAG_ACCEPT_WITH_RESULT:
            try:
                conn.sendall(accepted)
            except OSError as exc:  # the client is gone: give its reservations back
                ticket.end()
                self._metrics.child(self._metrics.bulk_transfers, "put", "broken").inc()
                log.warning("bulk session put broken before its bytes, nothing stored: %s", exc)
                return False
            accepted = b""
        try:
            metas = transfers.receive(ticket, conn)
        except (TransferBroken, OSError) as exc:
            self._metrics.child(self._metrics.bulk_transfers, "put", "broken").inc()
            log.warning("bulk session put broken, nothing stored: %s", exc)
            return False
        except TiermemError as exc:
            self._metrics.child(self._metrics.bulk_transfers, "put", "failed").inc()
            conn.sendall(accepted + _refusal(exc))
            return True
        self._metrics.child(self._metrics.bulk_transfers, "put", "ok").inc()
        conn.sendall(accepted + status("OK", "", metas))
        return True

    def _get(
        self, conn: socket.socket, owner: str, acting: str, msg: dataplane_pb2.BeginGetRequest
    ) -> bool:
        transfers = self._transfers
        try:
            authorize_request(self._guard, _METHOD + "BeginGet", msg)
            keys = [key_from_proto(k) for k in msg.keys]
            ticket = transfers.begin_get(
                owner, keys, int(msg.inline_max_bytes), acting, issue=False
            )
        except TiermemError as exc:
            self._metrics.child(self._metrics.bulk_transfers, "get", "refused").inc()
            conn.sendall(_refusal(exc))
            return True
        try:
            reply = ticket_message(ticket, "").SerializeToString()
            transfers.send(ticket, conn, header=status("OK", "") + frame(reply))
        except OSError:
            self._metrics.child(self._metrics.bulk_transfers, "get", "broken").inc()
            return False
        finally:
            ticket.end()  # idempotent: ``send`` ends it too
        self._metrics.child(self._metrics.bulk_transfers, "get", "ok").inc()
        return True

    def _answer(
        self, conn: socket.socket, owner: str, acting: str, op: UnaryOp, msg: Message
    ) -> bool:
        """A unary op without a gRPC call: the same authorization and code; a
        refusal leaves the session open."""
        # work the op leaves for after its reply (a Lease's adoption of remote
        # blocks) runs before the session reads its next request, while the
        # client is busy with this reply
        with after_reply.collecting() as deferred:
            try:
                self._reply(conn, owner, acting, op, msg)
            finally:
                after_reply.run(deferred)
        return True

    def _reply(
        self, conn: socket.socket, owner: str, acting: str, op: UnaryOp, msg: Message
    ) -> None:
        started = time.perf_counter()
        try:
            authorize_request(self._guard, op.method, msg)
            reply = op.run(owner, acting, msg)
        except TiermemError as exc:
            self._record(op, exc.code, started)
            conn.sendall(_refusal(exc))
            return
        self._record(op, "OK", started)
        conn.sendall(status("OK", "") + frame(reply.SerializeToString()))

    def _record(self, op: UnaryOp, code: str, started: float) -> None:
        # counted with the gRPC method's own requests (same name, same labels)
        metrics = self._metrics
        metrics.child(metrics.requests, op.label, code).inc()
        metrics.child(metrics.request_seconds, op.label, code).observe(
            time.perf_counter() - started
        )


def _refusal(exc: TiermemError) -> bytes:
    """The STATUS of a refused request, with the request's id."""
    return status(exc.code, exc.message, request_id=request_id.get())


def _drop(conn: socket.socket, nbytes: int) -> bool:
    """Read and discard the ``nbytes`` that follow a refused pipelined put;
    False if the connection ended first (the session is over)."""
    scratch = memoryview(bytearray(min(nbytes, 1 << 20) or 1))
    left = nbytes
    try:
        while left:
            got = conn.recv_into(scratch, min(left, len(scratch)))
            if got == 0:
                return False
            left -= got
    except OSError:
        return False
    return True
