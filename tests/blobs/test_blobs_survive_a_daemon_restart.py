"""Blobs, their metadata, embeddings and reference counts persist across a
daemon restart; so does a search over them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.server.app import Daemon


def test_blobs_metadata_and_search_survive_a_restart(make_daemon: Callable[..., Daemon]) -> None:
    big, small = pattern(3 * MiB + 1, seed=12), b"tiny inline blob"
    v = np.linspace(-1, 1, 12).astype(np.float32)
    daemon = make_daemon("p")
    with Client(daemon.address) as c:
        c.blobs.put("big.bin", big, media_type="image/tiff", tags=["scan"], embeddings={"e": v})
        c.blobs.put("again.bin", big)
        c.blobs.put("small.txt", small, media_type="text/plain", tags=["note"])
        c.blobs.delete("again.bin")
        c.blobs.put("gone.bin", pattern(MiB, seed=13))
        c.blobs.delete("gone.bin")
        before = {i.key: i for i in c.blobs.list()}
    daemon.stop(grace_s=0)

    daemon = make_daemon("p")
    with Client(daemon.address) as c:
        after = {i.key: i for i in c.blobs.list()}
        assert after.keys() == {"big.bin", "small.txt"}
        for key, info in before.items():
            got = after[key]
            assert (got.sha256, got.size_bytes, got.media_type, got.tags, got.version) == (
                info.sha256, info.size_bytes, info.media_type, info.tags, info.version,
            )  # fmt: skip
        assert c.blobs.get("big.bin") == big and c.blobs.get("small.txt") == small
        assert c.blobs.stat("big.bin").content_refs == 1
        stats = c.blobs.stats()
        assert (stats.blobs, stats.contents) == (2, 2)
        assert stats.stored_bytes == len(big) + len(small)
        hits = c.blobs.search(vector=v, space="e", k=5)
        assert [h.info.key for h in hits] == ["big.bin"]
        assert [i.key for i in c.blobs.list(tags_all=["note"])] == ["small.txt"]
