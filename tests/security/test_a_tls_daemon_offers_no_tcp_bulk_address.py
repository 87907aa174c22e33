"""A daemon whose gRPC listener serves TLS offers no TCP bulk address: not in
Hello, not in the tickets it issues (objects and blobs). The bulk channel is
plaintext, and a client using it sends its bearer token in the preamble of
every connection, beside the values' bytes; TLS on gRPC is worth nothing if
the daemon invites both onto plain TCP. Only its Unix socket stays offered
(local, see test_a_tls_daemons_local_clients_keep_the_unix_socket_bulk_channel),
and shared memory. A client on another host moves large values over gRPC."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.security.tls_with_tokens import move_large_values, tls_client, tls_daemon
from tiermem.server.app import Daemon
from tiermem.v1 import (
    blobs_pb2,
    blobs_pb2_grpc,
    common_pb2,
    dataplane_pb2,
    dataplane_pb2_grpc,
)


def test_a_tls_daemon_offers_no_tcp_bulk_address(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon, tls = tls_daemon(make_daemon, tmp_path)
    with tls_client(daemon, tls, bulk_unix=False) as client:  # as on another host
        move_large_values(client)
        stats = client.path_stats()
        metadata = client.transport.metadata
        plane = dataplane_pb2_grpc.DataPlaneServiceStub(client.transport.channel)
        hello = plane.Hello(dataplane_pb2.HelloRequest(), metadata=metadata, timeout=10)
        key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="big")
        request = dataplane_pb2.BeginGetRequest(keys=[key])
        ticket = plane.BeginGet(request, metadata=metadata, timeout=10)
        blobs = blobs_pb2_grpc.BlobServiceStub(client.transport.channel)
        ref = blobs_pb2.BlobRef(namespace="default", key="blob")
        download = blobs.OpenDownload(
            blobs_pb2.OpenDownloadRequest(ref=ref, paths=["bulk"]), metadata=metadata, timeout=10
        )
    assert hello.bulk_address == ""
    assert hello.bulk_unix_address.startswith("unix:")  # local clients keep it
    assert ticket.address.startswith("unix:")
    assert download.bulk.address.startswith("unix:")
    assert stats["bulk"]["puts"] == stats["bulk"]["gets"] == 0
    # the object and the blob (KV blocks go by KvService's own streams then)
    assert stats["grpc"]["puts"] == 2 and stats["grpc"]["gets"] == 2
