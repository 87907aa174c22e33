"""Bad blob requests get their status and change nothing: hash mismatches,
chunks past the announced size, unknown or expired upload ids, bad offsets,
bad names and sizes."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import grpc
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc


def stub(c: Client) -> blobs_pb2_grpc.BlobServiceStub:
    return blobs_pb2_grpc.BlobServiceStub(c.transport.channel)


def status_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), err.value.details()  # type: ignore[attr-defined]


def upload(s: blobs_pb2_grpc.BlobServiceStub, upload_id: str, data: bytes, sha: bytes) -> object:
    chunks = [blobs_pb2.UploadChunk(upload_id=upload_id, offset=0)]
    chunks += [blobs_pb2.UploadChunk(data=data[i : i + MiB]) for i in range(0, len(data), MiB)]
    chunks.append(
        blobs_pb2.UploadChunk(finish=blobs_pb2.FinishUploadRequest(upload_id=upload_id, sha256=sha))
    )
    return s.Upload(iter(chunks), timeout=30)


def test_a_hash_mismatch_is_data_loss_and_stores_nothing(client: Client) -> None:
    data = pattern(5 * MiB, seed=14)
    s = stub(client)
    begun = client.blobs.begin("mismatch.bin", len(data))
    code, details = status_of(lambda: upload(s, begun.upload_id, data, b"\x01" * 32))
    assert code == grpc.StatusCode.DATA_LOSS and "does not match" in details
    # the upload is over, nothing is stored
    code, details = status_of(
        lambda: s.GetUpload(blobs_pb2.GetUploadRequest(upload_id=begun.upload_id), timeout=5)
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "did not match" in details
    with pytest.raises(TiermemClientError) as err:
        client.blobs.stat("mismatch.bin")
    assert err.value.code == "NOT_FOUND"
    stats = client.blobs.stats()
    assert (stats.blobs, stats.contents, stats.uploads_active) == (0, 0, 0)
    # a claimed hash in the announcement is checked too (inline data)
    request = blobs_pb2.BeginUploadRequest(
        ref=blobs_pb2.BlobRef(namespace="default", key="inline.bin"), size_bytes=3,
        data=b"abc", has_data=True, sha256=hashlib.sha256(b"abd").digest(),
    )  # fmt: skip
    code, details = status_of(lambda: s.BeginUpload(request, timeout=5))
    assert code == grpc.StatusCode.DATA_LOSS
    assert client.blobs.stats().blobs == 0


def test_a_chunk_past_the_announced_size_is_refused(client: Client) -> None:
    s = stub(client)
    begun = client.blobs.begin("short.bin", 2 * MiB)
    data = pattern(3 * MiB, seed=15)
    code, details = status_of(lambda: upload(s, begun.upload_id, data, b"\x00" * 32))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "announced size_bytes" in details
    # what fit is kept: the upload can still be finished with the right bytes
    status = client.blobs.status(begun.upload_id)
    assert status.acknowledged_offset == 2 * MiB
    info = client.blobs.resume(begun.upload_id, data[: 2 * MiB])
    assert client.blobs.get("short.bin") == data[: 2 * MiB] and info.size_bytes == 2 * MiB


def test_unknown_and_expired_upload_ids(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(blobs={"upload_ttl_s": 0.2})
    with Client(daemon.address) as c:
        s = stub(c)
        for call in (
            lambda: s.GetUpload(blobs_pb2.GetUploadRequest(upload_id="nope"), timeout=5),
            lambda: s.FinishUpload(
                blobs_pb2.FinishUploadRequest(upload_id="nope", sha256=b"\x00" * 32), timeout=5
            ),
            lambda: upload(s, "nope", b"x", b"\x00" * 32),
        ):
            code, details = status_of(call)
            assert code == grpc.StatusCode.NOT_FOUND and "unknown" in details
        begun = c.blobs.begin("idle.bin", MiB)
        time.sleep(0.3)
        daemon.blobs.maintain()  # the reaper runs this every maintain_interval_s
        code, details = status_of(
            lambda: s.GetUpload(blobs_pb2.GetUploadRequest(upload_id=begun.upload_id), timeout=5)
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "expired" in details
        assert c.blobs.stats().uploads_active == 0
        assert not any(daemon.blobs.uploads.directory.iterdir())  # staging file removed


def test_bad_offsets_names_and_sizes(client: Client) -> None:
    s = stub(client)
    begun = client.blobs.begin("offsets.bin", 2 * MiB)
    chunks = [blobs_pb2.UploadChunk(upload_id=begun.upload_id, offset=MiB),
              blobs_pb2.UploadChunk(data=b"x")]  # fmt: skip
    code, details = status_of(lambda: s.Upload(iter(chunks), timeout=5))
    assert code == grpc.StatusCode.OUT_OF_RANGE and "acknowledged_offset" in details
    code, _ = status_of(lambda: s.Upload(iter([blobs_pb2.UploadChunk(data=b"x")]), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    for ref, size in (
        (blobs_pb2.BlobRef(namespace="bad name!", key="k"), 1),
        (blobs_pb2.BlobRef(namespace="default", key=""), 1),
        (blobs_pb2.BlobRef(namespace="default", key="k" * 5000), 1),
        (blobs_pb2.BlobRef(namespace="default", key="huge"), 1 << 50),
    ):
        request = blobs_pb2.BeginUploadRequest(ref=ref, size_bytes=size)
        code, details = status_of(lambda: s.BeginUpload(request, timeout=5))  # noqa: B023
        assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert details
    assert client.blobs.stats().blobs == 0
