"""Raw access to the data plane for tests: gRPC stubs, the mapped arena, and
bulk connections driven byte by byte."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from tiermem.dataplane_wire import LENGTH, preamble
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2, dataplane_pb2, dataplane_pb2_grpc, object_pb2

MiB = 1 << 20


@contextmanager
def dataplane_stub(daemon: Daemon) -> Iterator[dataplane_pb2_grpc.DataPlaneServiceStub]:
    channel = grpc.insecure_channel(daemon.address)
    try:
        yield dataplane_pb2_grpc.DataPlaneServiceStub(channel)
    finally:
        channel.close()


def key(name: str, kind: int = common_pb2.KV_BLOCK) -> common_pb2.ObjectKey:
    return common_pb2.ObjectKey(namespace="default", kind=kind, key=name)  # type: ignore[arg-type]


def header(name: str, size: int, **kw: object) -> object_pb2.PutHeader:
    return object_pb2.PutHeader(key=key(name), size_bytes=size, **kw)  # type: ignore[arg-type]


def rpc_error(fn: object, *args: object, **kw: object) -> grpc.RpcError:
    try:
        fn(*args, **kw)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the call succeeded but should have failed")


def check(err: grpc.RpcError, code: grpc.StatusCode, words: str) -> None:
    assert err.code() == code, (err.code(), err.details())
    assert words in (err.details() or ""), err.details()


def read_status(sock: socket.socket) -> dataplane_pb2.TransferStatus:
    head = recv_exact(sock, LENGTH.size)
    (n,) = LENGTH.unpack(head)
    msg = dataplane_pb2.TransferStatus()
    msg.ParseFromString(recv_exact(sock, n))
    return msg


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def present(ticket: dataplane_pb2.Ticket, credential: bytes = b"") -> tuple[socket.socket, str]:
    """Connect to the ticket's bulk address, present it; returns the socket and the
    daemon's first status code."""
    host, _, port = ticket.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(preamble(ticket.ticket_id, credential))
    return sock, read_status(sock).code


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll until ``condition()`` holds (background work, unanswered releases)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextmanager
def stalled_hello(daemon: Daemon, stall_s: float) -> Iterator[threading.Event]:
    """The daemon's Hello waits (up to ``stall_s``) until the event is set; a
    client's first call negotiating the data plane meets a stalled daemon."""
    plane = daemon.dataplane
    assert plane is not None
    go_on = threading.Event()
    real = plane.hello

    def hello() -> Any:
        go_on.wait(stall_s)
        return real()

    plane.hello = hello  # type: ignore[method-assign]
    try:
        yield go_on
    finally:
        go_on.set()
        plane.hello = real  # type: ignore[method-assign]
