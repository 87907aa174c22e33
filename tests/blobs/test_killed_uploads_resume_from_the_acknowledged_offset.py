"""An upload whose connection dies mid-way keeps what the daemon acknowledged,
across a daemon restart too, and is finished by resuming from there."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

import grpc
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.server.app import Daemon
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc


class Killed(Exception):
    pass


def send_until_killed(c: Client, upload_id: str, data: bytes, cut: int) -> None:
    """Stream ``data[:cut]`` of an upload, then kill the call (client crash)."""

    def chunks() -> Iterator[blobs_pb2.UploadChunk]:
        yield blobs_pb2.UploadChunk(upload_id=upload_id, offset=0)
        for start in range(0, cut, MiB):
            yield blobs_pb2.UploadChunk(data=data[start : min(cut, start + MiB)])
        raise Killed

    stub = blobs_pb2_grpc.BlobServiceStub(c.transport.channel)
    with pytest.raises((grpc.RpcError, Killed)):
        stub.Upload(chunks(), timeout=60)


def test_killed_upload_resumes_after_a_daemon_restart(
    make_daemon: Callable[..., Daemon],
) -> None:
    cfg = {"blobs": {"checkpoint_bytes": MiB}}
    data = pattern(12 * MiB + 5, seed=3)
    daemon = make_daemon("r", **cfg)
    with Client(daemon.address) as c:
        upload_id = c.blobs.begin("resumed.bin", len(data), media_type="video/mp4").upload_id
        send_until_killed(c, upload_id, data, 7 * MiB + 3)
    daemon.stop(grace_s=0)

    daemon = make_daemon("r", **cfg)
    with Client(daemon.address) as c:
        status = c.blobs.status(upload_id)
        assert 0 < status.acknowledged_offset <= 7 * MiB + 3
        assert status.blob is None
        sent: list[int] = []
        info = c.blobs.resume(upload_id, data, path="grpc", progress=sent.append)
        assert sum(sent) == len(data) - status.acknowledged_offset  # only the rest was sent
        assert info.sha256 == hashlib.sha256(data).digest()
        assert info.media_type == "video/mp4"
        assert c.blobs.get("resumed.bin") == data


def test_killed_bulk_upload_resumes_in_the_same_daemon(client: Client) -> None:
    data = pattern(10 * MiB, seed=4)
    ids: list[str] = []

    def kill_after_first_piece(n: int) -> None:
        raise Killed

    with pytest.raises(Killed):
        client.blobs.put(
            "bulk-resumed.bin", data, path="bulk", on_upload_id=ids.append,
            progress=kill_after_first_piece,
        )  # fmt: skip
    info = client.blobs.resume(ids[0], data, path="bulk")
    assert info.sha256 == hashlib.sha256(data).digest()
    assert client.blobs.get("bulk-resumed.bin") == data
    assert client.blobs.stats().uploads_active == 0
