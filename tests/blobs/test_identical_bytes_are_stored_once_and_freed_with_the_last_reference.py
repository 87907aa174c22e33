"""Content addressing: identical bytes under several keys are stored once,
counted by reference, and their payload is removed with the last reference."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.server.app import Daemon


def test_identical_uploads_share_one_payload_until_the_last_delete(
    daemon: Daemon, client: Client
) -> None:
    data = pattern(3 * MiB + 11, seed=7)
    sha = hashlib.sha256(data).digest()
    first = client.blobs.put("a.bin", data, tags=["x"])
    second = client.blobs.put("b.bin", data, media_type="image/png")  # bytes sent again
    # naming known content by hash stores a reference without sending the bytes
    fourth = client.blobs.put("d.bin", data, sha256=sha, path="grpc")
    assert first.sha256 == second.sha256 == fourth.sha256 == sha
    assert client.blobs.stat("a.bin").content_refs == 3
    stats = client.blobs.stats()
    assert (stats.blobs, stats.contents) == (3, 1)
    assert (stats.logical_bytes, stats.stored_bytes) == (3 * len(data), len(data))
    payload = daemon.blobs.payload_path(sha)
    assert payload is not None and payload.stat().st_size == len(data)

    assert client.blobs.delete("a.bin")
    assert not client.blobs.delete("a.bin")  # already gone
    assert client.blobs.get("b.bin") == data
    assert client.blobs.delete("b.bin")
    assert client.blobs.stat("d.bin").content_refs == 1
    assert payload.exists()
    assert client.blobs.delete("d.bin")
    assert not payload.exists()
    stats = client.blobs.stats()
    assert (stats.blobs, stats.contents, stats.stored_bytes) == (0, 0, 0)


def test_overwriting_a_key_moves_its_reference(client: Client) -> None:
    old, new = pattern(2 * MiB, seed=8), pattern(2 * MiB, seed=9)
    client.blobs.put("k.bin", old)
    client.blobs.put("other.bin", old)
    info = client.blobs.put("k.bin", new)
    assert info.version == 2
    assert client.blobs.get("k.bin") == new
    assert client.blobs.stat("other.bin").content_refs == 1
    assert client.blobs.stats().contents == 2
    client.blobs.delete("other.bin")
    assert client.blobs.stats().contents == 1


def test_the_hash_of_content_another_namespace_holds_does_not_grant_it(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(namespaces=["default", "other"])
    data = pattern(MiB * 2, seed=10)
    with Client(daemon.address) as client:
        client.blobs.put("secret.bin", data)
    with Client(daemon.address, namespace="other") as other:
        # naming the hash is not enough: the bytes must be sent (and are checked)
        info = other.blobs.put("guess.bin", data, sha256=hashlib.sha256(data).digest())
        assert info.content_refs == 2
        assert other.blobs.get("guess.bin") == data
