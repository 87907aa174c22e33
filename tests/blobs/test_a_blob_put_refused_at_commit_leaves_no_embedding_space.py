"""A blob put refused at commit (its session's quota checked again under the
store lock) leaves no trace: no blob, no payload, and none of the embedding
spaces it registered (their records, search tables and the stats' list),
not even after a restart. A space another blob already used stays. The
refused put's new spaces stayed registered, counted against
``blobs.max_spaces`` and listed by BlobStats."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import (
    CapacityError,
    Client,
    Durability,
    Kind,
    NotFoundError,
    Profile,
    Tier,
)
from tiermem.server.app import Daemon

LIGHT = {
    "agent": {"scratch": {"embedder": "hash"}},
    "blobs": {"text_embedder": "off"},
}
DURABLE = Profile(durability=Durability.DURABLE)  # charged on SSD, as a blob is


def test_a_put_refused_at_commit_leaves_no_embedding_space(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon("p", **LIGHT)
    blobs = daemon.blobs
    shared = np.linspace(-1, 1, 8).astype(np.float32)
    fresh = np.linspace(0, 1, 6).astype(np.float32)
    with Client(daemon.address, timeout_s=30) as c:
        c.blobs.put("kept.bin", b"k" * 100, embeddings={"shared": shared})
        root = c.sessions.open(label="main")
        s = c.sessions.open(parent=root.id, label="small", quotas={Tier.SSD: 4 * MiB})
        as_s = c.as_session(s.id)
        real_next_uid = blobs.catalog.next_uid
        raced: list[bool] = []

        def next_uid() -> int:  # the put passed its first check and registered its spaces
            if not raced:
                raced.append(True)
                as_s.put(Kind.BLOB, "obj", b"o" * (3 * MiB), profile=DURABLE)
            return real_next_uid()

        monkeypatch.setattr(blobs.catalog, "next_uid", next_uid)
        with pytest.raises(CapacityError, match="SSD quota"):
            as_s.blobs.put(
                "a.bin", pattern(3 * MiB, seed=1), embeddings={"shared": shared, "fresh": fresh}
            )
        assert raced
        with pytest.raises(NotFoundError):
            as_s.blobs.stat("a.bin")
        assert list(c.blobs.stats().spaces) == ["shared"]
        assert blobs.catalog.spaces() == {"shared": 8}
        assert blobs._require_index().spaces == {"shared": 8}
        with pytest.raises(NotFoundError):
            c.blobs.search(vector=fresh, space="fresh", k=3)
        hits = c.blobs.search(vector=shared, space="shared", k=3)
        assert [h.info.key for h in hits] == ["kept.bin"]
    lance = Path(blobs.lance_uri)
    assert not (lance / "space_fresh.lance").exists()
    daemon.stop(grace_s=0)

    daemon = make_daemon("p", **LIGHT)
    with Client(daemon.address, timeout_s=30) as c:
        assert list(c.blobs.stats().spaces) == ["shared"]
        c.blobs.put("b.bin", b"b" * 100, embeddings={"fresh": fresh[:4]})  # any dimension now
        assert [h.info.key for h in c.blobs.search(vector=fresh[:4], space="fresh", k=3)] == [
            "b.bin"
        ]
