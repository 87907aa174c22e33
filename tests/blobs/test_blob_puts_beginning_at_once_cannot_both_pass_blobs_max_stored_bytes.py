"""Blob puts that begin at the same moment cannot together take the store past
``blobs.max_stored_bytes``: checking the limit and counting the put's bytes
(an upload's announced size, an inline put's new content) are one step, so
the second put sees the first one's bytes and is refused RESOURCE_EXHAUSTED,
storing nothing. Each test holds the first put between its check and its
count (a pause injected there) while the second one begins."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client, TiermemClientError
from tiermem.server.app import Daemon
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc

LIGHT = {"blobs": {"text_embedder": "off", "max_stored_bytes": 8 * MiB}}
#: How long the first put waits, between its check and its count, for the
#: second to arrive there too: it does at once when the two steps are apart;
#: when they are one step it never does, and the first goes on after this.
PAUSE_S = 1.0


def test_two_streamed_uploads_beginning_at_once_cannot_both_pass(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon(**LIGHT)
    uploads = daemon.blobs.uploads
    real_begin = uploads.begin
    arrivals = threading.Condition()
    arrived = [0]

    def begin(*args: Any, **kwargs: Any) -> Any:  # the capacity was checked; not yet counted
        with arrivals:
            arrived[0] += 1
            arrivals.notify_all()
            arrivals.wait_for(lambda: arrived[0] >= 2, timeout=PAUSE_S)
        return real_begin(*args, **kwargs)

    monkeypatch.setattr(uploads, "begin", begin)
    data = {key: pattern(5 * MiB, seed=i) for i, key in enumerate(("a.bin", "b.bin"))}
    errors: dict[str, TiermemClientError] = {}
    start = threading.Barrier(2)

    def put(c: Client, key: str) -> None:
        start.wait(30)
        try:
            c.blobs.put(key, data[key], path="grpc")  # over the inline size: streamed
        except TiermemClientError as exc:
            errors[key] = exc

    with Client(daemon.address, retries=0, timeout_s=60) as c:
        threads = [threading.Thread(target=put, args=(c, key)) for key in data]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stored = [b.key for b in c.blobs.list()]
        assert len(stored) == 1, f"both 5 MiB uploads were stored under an 8 MiB limit: {stored}"
        (refused,) = errors.values()
        assert refused.code == "RESOURCE_EXHAUSTED", refused
        assert "blobs.max_stored_bytes=8388608" in refused.message, refused
        assert c.blobs.get(stored[0]) == data[stored[0]]
        assert daemon.blobs.uploads.pending_bytes == 0
        assert daemon.blobs.catalog.totals.stored_bytes == 5 * MiB


def test_an_upload_beginning_while_an_inline_put_commits_sees_its_bytes(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon(**LIGHT)
    blobs = daemon.blobs
    channel = grpc.insecure_channel(daemon.address)
    stub = blobs_pb2_grpc.BlobServiceStub(channel)
    real_next_uid = blobs.catalog.next_uid
    begun: list[grpc.StatusCode] = []

    def next_uid() -> int:  # the inline put passed its check and has not committed yet
        if not begun:
            request = blobs_pb2.BeginUploadRequest(
                ref=blobs_pb2.BlobRef(namespace="default", key="streamed.bin"),
                size_bytes=5 * MiB,
            )
            try:
                stub.BeginUpload(request, timeout=30)
                begun.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                begun.append(exc.code())  # type: ignore[attr-defined]
        return real_next_uid()

    monkeypatch.setattr(blobs.catalog, "next_uid", next_uid)
    inline = pattern(3 * MiB + 1, seed=7)  # under the client's 4 MiB: sent with BeginUpload
    try:
        with Client(daemon.address, retries=0, timeout_s=60) as c:
            c.blobs.put("inline.bin", inline)
            assert begun == [grpc.StatusCode.RESOURCE_EXHAUSTED]
            assert [b.key for b in c.blobs.list()] == ["inline.bin"]
            assert (
                hashlib.sha256(c.blobs.get("inline.bin")).digest()
                == hashlib.sha256(inline).digest()
            )
    finally:
        channel.close()
    assert blobs.uploads.pending_bytes == 0
