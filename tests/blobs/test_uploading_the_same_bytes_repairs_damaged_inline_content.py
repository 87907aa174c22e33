"""Content small enough to be kept inline whose bytes were lost is repaired by
uploading the same bytes again, as content in payload files is. The repair
marked the content whole but never wrote the inline bytes back: every key
referring to it kept answering DATA_LOSS while the log said "repaired"."""

from __future__ import annotations

import hashlib

import pytest

from tiermem.client import ChecksumError, Client
from tiermem.server.app import Daemon
from tiermem.server.blobs.catalog import INLINE


def test_a_new_upload_of_the_bytes_repairs_every_key(daemon: Daemon, client: Client) -> None:
    data = b"hello inline " * 100  # far below the inline limit
    sha = hashlib.sha256(data).digest()
    client.blobs.put("a.txt", data, skip_text_embedding=True)
    rocks = daemon.blobs.catalog.rocks
    lose = rocks.batch()
    lose.delete(INLINE, sha)
    lose.commit(sync=True)
    with pytest.raises(ChecksumError):
        client.blobs.get("a.txt", path="grpc")
    client.blobs.put("b.txt", data, skip_text_embedding=True)  # the same bytes
    assert not daemon.blobs.catalog.content(sha).damaged
    assert client.blobs.get("b.txt", path="grpc") == data
    assert client.blobs.get("a.txt", path="grpc") == data
