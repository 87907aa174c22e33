"""A client on the daemon's host reaches the bulk channel by the abstract Unix
socket the daemon offers in Hello (same framing and credentials as TCP, about
half the cost per message); it uses TCP when told to, when the daemon offers no
socket, when the socket cannot be reached, and when the daemon would take it
for another caller on each channel (anonymous, dialled by a non-local
address)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.dataplane.helpers import wait_for
from tests.prometheus import free_port
from tiermem.client import Client, Kind, TiermemClientError
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.client.fastpath.bulk import present, unix_connect
from tiermem.dataplane_wire import SESSION_TICKET, frame, preamble
from tiermem.server.app import Daemon
from tiermem.server.dataplane.identity import LOCAL_HOST, grpc_peer_host, normal_host
from tiermem.v1 import common_pb2, dataplane_pb2, dataplane_pb2_grpc

MiB = 1 << 20


def connections_to(abstract_name: str) -> int:
    """Sockets the kernel lists under an abstract name: the listener and the
    daemon's end of each connection made to it (a client's end has no name)."""
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return sum(1 for line in lines if line.split()[-1] == "@" + abstract_name)


def outward_address() -> str | None:
    """This host's address on its default route (no packet is sent), if any."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def daemon_bulk_port(daemon: Daemon) -> int:
    assert daemon.dataplane is not None
    return int(daemon.dataplane.hello().bulk_address.rpartition(":")[2])


def round_trip(client: Client, key: str, data: bytes) -> None:
    """A value through the bulk path and back, and one of a few bytes."""
    client.dataplane.put_many([PutItem(Kind.BLOB, key, data)], path="bulk")
    got = client.dataplane.get_many([ObjectRef(Kind.BLOB, key)], path="bulk")[0]
    assert got.path == "bulk" and bytes(got.data) == data
    client.put(Kind.SCRATCH, key, b"note")
    assert client.get(Kind.SCRATCH, key) == b"note"


def test_a_local_client_moves_its_bytes_over_the_unix_socket(client: Client) -> None:
    address = client.dataplane.offer().bulk_address
    assert address.startswith("unix:@tiermem-bulk-")
    name = address.removeprefix("unix:@")
    # the client tried the socket once while negotiating; the daemon closes its
    # end of that connection when it sees it end
    wait_for(lambda: connections_to(name) == 1, "the probe connection to close", 5)
    data = bytes(range(256)) * 4096  # 1 MiB
    round_trip(client, "over-unix", data)
    # the client's pooled session is a connection to that socket
    assert connections_to(name) == 2
    # a large value, on the session too
    big = bytes(range(256)) * (32 * 4096)  # 32 MiB
    client.dataplane.put_many([PutItem(Kind.BLOB, "big", big)], path="bulk")
    got = client.dataplane.get_many([ObjectRef(Kind.BLOB, "big")], path="bulk")[0]
    assert bytes(got.data) == big


def test_a_lease_taken_over_grpc_is_released_on_the_unix_socket(
    daemon: Daemon, client: Client
) -> None:
    """An anonymous caller is one caller on loopback gRPC and on the Unix
    socket, so what it holds through one it can give back through the other
    (the client falls back to gRPC when its sessions are full, and back)."""
    assert client.dataplane.offer().bulk_address.startswith("unix:")
    client.put(Kind.BLOB, "leased", bytes(range(256)) * 4096)
    stub = dataplane_pb2_grpc.DataPlaneServiceStub(client.transport.channel)
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="leased")
    reply = stub.Lease(dataplane_pb2.LeaseRequest(keys=[key], inline_max_bytes=1))
    (lease_id,) = [x.lease_id for x in reply.leases]
    assert lease_id and daemon.dataplane is not None and len(daemon.dataplane.leases) == 1
    client.dataplane.release_leases([lease_id])  # on the session, not waited for
    wait_for(lambda: len(daemon.dataplane.leases) == 0, "the release on the Unix socket")


def test_tcp_when_the_client_asks_for_it(daemon: Daemon) -> None:
    with Client(daemon.address, bulk_unix=False) as c:
        host, _, port = c.dataplane.offer().bulk_address.rpartition(":")
        assert (host, int(port)) == ("127.0.0.1", daemon_bulk_port(daemon))
        round_trip(c, "over-tcp", bytes(range(256)) * 1024)


def test_tcp_when_the_daemon_offers_no_unix_socket(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(dataplane={"bulk": {"unix": False}})
    with Client(daemon.address) as c:
        hello = c.dataplane.offer().hello
        assert hello is not None and hello.bulk_unix_address == ""
        assert not c.dataplane.offer().bulk_address.startswith("unix:")
        round_trip(c, "no-unix", bytes(range(256)) * 1024)


def test_tcp_when_the_unix_socket_cannot_be_reached(client: Client) -> None:
    hello = dataplane_pb2.HelloResponse()
    hello.CopyFrom(client.dataplane.offer().hello)
    assert client.dataplane._local_bulk_address(hello).startswith("unix:@")
    # e.g. a container on the same kernel but in another network namespace
    hello.bulk_unix_address = "unix:@tiermem-bulk-nobody-listens-here"
    assert client.dataplane._local_bulk_address(hello) == ""


def dialled_outward(make_daemon: Callable[..., Daemon], **config: object) -> str:
    """A daemon listening on every address; the gRPC target naming it by this
    host's non-loopback address (the test is skipped without one)."""
    outward = outward_address()
    if outward is None:
        pytest.skip("this host has no non-loopback address")
    daemon = make_daemon(
        server={"listen": "0.0.0.0:0"}, dataplane={"bulk": {"host": "0.0.0.0"}}, **config
    )
    return f"{outward}:{daemon.address.rpartition(':')[2]}"


def test_an_anonymous_client_dialling_a_non_local_address_stays_on_tcp(
    make_daemon: Callable[..., Daemon],
) -> None:
    target = dialled_outward(make_daemon)
    # the daemon names this caller by that address on gRPC, "local" on the
    # Unix socket: a ticket or lease would not be found as the same caller's
    with Client(target) as c:
        assert not c.dataplane.offer().bulk_address.startswith("unix:")
        round_trip(c, "anonymous-outward", bytes(range(256)) * 4096)


def test_a_client_with_a_token_takes_the_unix_socket_whatever_it_dialled(
    make_daemon: Callable[..., Daemon],
) -> None:
    tokens = [{"name": "root", "token": "t-admin", "roles": ["admin"]}]
    target = dialled_outward(make_daemon, security={"tokens": tokens})
    with Client(target, token="t-admin") as c:
        assert c.dataplane.offer().bulk_address.startswith("unix:@")
        round_trip(c, "token-outward", bytes(range(256)) * 4096)
    with (
        Client(target, token="wrong", retries=0) as bad,
        pytest.raises(TiermemClientError) as refused,
    ):
        bad.put(Kind.SCRATCH, "x", b"y")
    assert refused.value.code == "UNAUTHENTICATED"


def test_every_way_in_from_this_host_is_one_host() -> None:
    for peer in ("ipv4:127.0.0.1:5000", "ipv4:127.0.1.1:5000", "ipv6:[::1]:5000", "unix:/a/b"):
        assert grpc_peer_host(peer) == LOCAL_HOST
    for host in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert normal_host(host) == LOCAL_HOST
    # other hosts keep their address, as gRPC names them
    assert grpc_peer_host("ipv4:10.1.2.3:5000") == "10.1.2.3"
    assert grpc_peer_host("ipv6:[2001:db8::1]:5000") == "2001:db8::1"
    assert normal_host("::ffff:10.1.2.3") == "10.1.2.3"
    assert normal_host("2001:db8::1") == "2001:db8::1"


def test_without_sessions_a_unix_socket_client_claims_its_tickets_over_tcp(
    make_daemon: Callable[..., Daemon],
) -> None:
    """Tickets name the TCP address: BeginPut/BeginGet over loopback gRPC, the
    bytes over TCP, the same anonymous caller on both."""
    daemon = make_daemon(dataplane={"bulk": {"sessions": False}})
    with Client(daemon.address, fast_paths=("bulk", "grpc")) as c:
        assert c.dataplane.offer().bulk_address.startswith("unix:@")
        data = bytes(range(256)) * 4096
        c.dataplane.put_many([PutItem(Kind.BLOB, "by-ticket", data)], path="bulk")
        got = c.dataplane.get_many([ObjectRef(Kind.BLOB, "by-ticket")], path="bulk")[0]
        assert bytes(got.data) == data
        assert c.path_stats()["bulk"]["puts"] == 1 and c.path_stats()["bulk"]["gets"] == 1


def test_the_unix_socket_asks_for_the_same_token(make_daemon: Callable[..., Daemon]) -> None:
    tokens = [{"name": "root", "token": "t-admin", "roles": ["admin"]}]
    daemon = make_daemon(security={"tokens": tokens})
    assert daemon.dataplane is not None
    address = daemon.dataplane.hello().bulk_unix_address
    for credential, expected in ((b"", "UNAUTHENTICATED"), (b"Bearer wrong", "UNAUTHENTICATED"),
                                 (b"Bearer t-admin", "OK")):  # fmt: skip
        with contextlib.closing(unix_connect(address, 5.0)) as sock:
            status, delivered = present(sock, preamble(SESSION_TICKET, credential) + frame(b""))
            assert (status.code, delivered) == (expected, True), status.message


def test_a_restarted_daemon_moves_a_unix_socket_client_to_tcp(
    make_daemon: Callable[..., Daemon],
) -> None:
    """The restarted daemon listens on another Unix socket; the client's next
    session finds the old one gone and goes on over TCP (same ports here)."""
    ports = {"server": {"listen": f"127.0.0.1:{free_port()}"},
             "dataplane": {"bulk": {"port": free_port()}}}  # fmt: skip
    first = make_daemon("restart", **ports)
    with Client(first.address, fast_paths=("bulk", "grpc")) as c:
        old = c.dataplane.offer().bulk_address
        assert old.startswith("unix:@")
        c.put(Kind.SCRATCH, "before", b"1")
        first.stop(grace_s=0)
        second = make_daemon("restart", **ports)
        assert second.dataplane is not None
        assert second.dataplane.hello().bulk_unix_address != old
        c.put(Kind.SCRATCH, "during", b"2")  # the old socket is gone: this one by gRPC
        c.put(Kind.SCRATCH, "after", b"3")  # and this one over TCP
        assert not c.dataplane.offer().bulk_address.startswith("unix:")
        assert [c.get(Kind.SCRATCH, k) for k in ("before", "during", "after")] == [b"1", b"2", b"3"]
        assert c.path_stats()["bulk"]["puts"] == 2


def test_a_full_accept_queue_is_waited_out(tmp_path: Path) -> None:
    """A Unix connect fails at once (EAGAIN) while the listener's queue is full;
    ``unix_connect`` tries again until its timeout, so a daemon slow to accept
    is reached, and one that never accepts fails at the timeout."""
    name = f"tiermem-test-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(0)
    queued = []
    with contextlib.ExitStack() as stack:
        stack.callback(listener.close)
        with pytest.raises(BlockingIOError):  # fill the queue, then one more
            for _ in range(64):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                stack.callback(s.close)
                s.setblocking(False)
                s.connect("\0" + name)
                queued.append(s)
        started = time.monotonic()
        with pytest.raises(BlockingIOError):
            unix_connect(f"unix:@{name}", 0.2)
        assert time.monotonic() - started >= 0.15
        timer = threading.Timer(0.1, lambda: stack.callback(listener.accept()[0].close))
        timer.start()
        stack.callback(timer.join)
        unix_connect(f"unix:@{name}", 5.0).close()  # in once the daemon accepts one
