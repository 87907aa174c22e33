"""An upload's finish refused by admission (a namespace's concurrent-request
limit, "retry later"; its byte quota, until space is freed) leaves the fully
received upload in place: the finish can be retried without sending a byte
again. The refusal used to fail the upload, so the retry was told it had
failed and everything had to be sent again."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import CapacityError, Client
from tiermem.server.app import Daemon
from tiermem.server.services.guard import Role
from tiermem.v1 import blobs_pb2


def _send(c: Client, upload_id: str, data: bytes) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        yield blobs_pb2.UploadChunk(upload_id=upload_id, offset=0)
        for i in range(0, len(data), MiB):
            yield blobs_pb2.UploadChunk(data=data[i : i + MiB])

    c.blobs._stub.Upload(chunks(), timeout=30)


def test_a_finish_refused_for_now_can_be_retried(make_daemon: Callable[..., Daemon]) -> None:
    limits = {"namespaces": {"q": {"max_concurrent_rpcs": 1}}}
    daemon = make_daemon(namespaces=["default", "q"], limits=limits)
    data = pattern(3 * MiB, seed=31)
    sha = hashlib.sha256(data).digest()
    with Client(daemon.address, namespace="q", timeout_s=30) as c:
        upload = c.blobs.begin("a.bin", len(data)).upload_id
        _send(c, upload, data)
        busy = daemon.blobs.guard.admit("q", Role.WRITE)  # another request in progress
        with pytest.raises(CapacityError, match="retry later"):
            c.blobs._finish(upload, sha, None)
        busy.release()
        assert c.blobs.status(upload).acknowledged_offset == len(data)
        assert c.blobs._finish(upload, sha, None).size_bytes == len(data)
        assert c.blobs.get("a.bin") == data


def test_a_finish_over_the_quota_can_be_retried_once_space_is_freed(
    make_daemon: Callable[..., Daemon],
) -> None:
    limits = {"namespaces": {"q": {"max_bytes": "8MiB"}}}
    daemon = make_daemon(namespaces=["default", "q"], limits=limits)
    data = pattern(3 * MiB, seed=32)
    sha = hashlib.sha256(data).digest()
    with Client(daemon.address, namespace="q", timeout_s=30) as c:
        upload = c.blobs.begin("a.bin", len(data)).upload_id
        _send(c, upload, data)
        c.blobs.put("filler.bin", pattern(6 * MiB, seed=33))
        with pytest.raises(CapacityError):
            c.blobs._finish(upload, sha, None)
        c.blobs.delete("filler.bin")
        assert c.blobs.status(upload).acknowledged_offset == len(data)
        assert c.blobs._finish(upload, sha, None).size_bytes == len(data)
