"""A blob put and an object put of one session that run at the same time
cannot together take it past its SSD quota: the blob put checks the quota
again, and commits, under the store lock, as object puts do, and when the
object came first it is refused RESOURCE_EXHAUSTED and stores nothing (the
bytes it had adopted are removed). It checked the quota only under the blob
lock, so an object put landing between that check and the blob's commit
passed its own check too, and a session with a 4 MiB quota held 6 MiB."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import CapacityError, Client, Durability, Kind, NotFoundError, Profile, Tier
from tiermem.server.app import Daemon

LIGHT = {
    "agent": {"scratch": {"embedder": "hash"}},
    "blobs": {"text_embedder": "off"},
}
DURABLE = Profile(durability=Durability.DURABLE)  # charged on SSD, as a blob is


def test_an_object_put_between_a_blob_puts_check_and_commit(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon(**LIGHT)
    blobs = daemon.blobs
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        s = c.sessions.open(parent=root.id, label="small", quotas={Tier.SSD: 4 * MiB})
        as_s = c.as_session(s.id)
        real_next_uid = blobs.catalog.next_uid
        raced: list[bool] = []

        def next_uid() -> int:  # the blob put passed its first check and adopted its bytes
            if not raced:
                raced.append(True)
                as_s.put(Kind.BLOB, "obj", b"o" * (3 * MiB), profile=DURABLE)
            return real_next_uid()

        monkeypatch.setattr(blobs.catalog, "next_uid", next_uid)
        data = pattern(3 * MiB, seed=1)
        with pytest.raises(CapacityError, match="SSD quota"):
            as_s.blobs.put("a.bin", data)
        assert raced
        with pytest.raises(NotFoundError):
            as_s.blobs.stat("a.bin")
        assert c.sessions.describe(s.id).used_bytes(Tier.SSD) == 3 * MiB
        assert hashlib.sha256(data).digest() not in set(blobs.payloads.hashes())
