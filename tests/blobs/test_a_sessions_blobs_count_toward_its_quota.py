"""Blobs a session owns count toward its SSD quota exactly as its objects do:
``Describe`` shows them in its usage, a blob put (inline, or announced for a
resumable upload) that would pass the quota is refused RESOURCE_EXHAUSTED
and stores nothing, replacing one of its own blobs is charged only the
difference, and closing the session frees them. Blobs were never counted: a
session with a 4 MiB SSD quota stored any number of megabytes as blobs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import CapacityError, Client, Durability, Kind, NotFoundError, Profile, Tier
from tiermem.server.app import Daemon

LIGHT = {
    "agent": {"scratch": {"embedder": "hash"}},
    "blobs": {"text_embedder": "off"},
}


def test_blob_puts_stop_at_the_sessions_ssd_quota(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(**LIGHT)
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        s = c.sessions.open(parent=root.id, label="small", quotas={Tier.SSD: 4 * MiB})
        as_s = c.as_session(s.id)
        as_s.blobs.put("a.bin", pattern(3 * MiB, seed=1))
        assert c.sessions.describe(s.id).used_bytes(Tier.SSD) == 3 * MiB

        with pytest.raises(CapacityError, match="SSD quota") as err:
            as_s.blobs.put("b.bin", pattern(2 * MiB, seed=2))  # 3 + 2 > 4 MiB
        assert s.id in err.value.message
        with pytest.raises(CapacityError, match="SSD quota"):  # an upload announced only
            as_s.blobs.begin("b.bin", 2 * MiB)
        with pytest.raises(CapacityError, match="SSD quota"):  # owner named by a tool
            c.blobs.put("c.bin", pattern(2 * MiB, seed=3), session=s.id)
        with pytest.raises(NotFoundError):
            c.blobs.stat("b.bin")
        assert [i.key for i in c.blobs.list()] == ["a.bin"]  # the refused ones stored nothing
        assert c.sessions.describe(s.id).used_bytes(Tier.SSD) == 3 * MiB

        # replacing its own blob is charged only the difference; objects and blobs add up
        as_s.blobs.put("a.bin", pattern(4 * MiB - 1000, seed=4))
        with pytest.raises(CapacityError, match="SSD quota"):
            as_s.put(Kind.BLOB, "obj", b"o" * 2000, profile=Profile(durability=Durability.DURABLE))

        c.sessions.close(s.id)
        with pytest.raises(NotFoundError):
            c.blobs.stat("a.bin")
        fresh = c.sessions.open(parent=root.id, label="again", quotas={Tier.SSD: 4 * MiB})
        c.as_session(fresh.id).blobs.put("a.bin", pattern(3 * MiB, seed=5))
        assert c.sessions.describe(fresh.id).used_bytes(Tier.SSD) == 3 * MiB
