"""A segment file that went missing keeps its id: records naming it stay (and
report "segment file N is missing"), and new segments are numbered above the
highest id any record names. New segments were numbered above the files
present, so the missing id was handed out again: the damaged record then
pointed into a new file of other objects (a checksum error on someone else's
bytes), and deleting it discounted the new file's live bytes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tiermem.client import ChecksumError, Client, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

SSD = Profile(preferred_tier=Tier.SSD)
CONFIG = {
    "tiers": {"ssd": {"segment_bytes": 1 << 20}},
    "background": {"compaction_interval_s": 3600},
}


def _segment_of(daemon: Daemon, name: str) -> int:
    entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.BLOB, name).encode())
    assert entry is not None
    return int(entry.seg)


def test_the_new_segment_takes_a_new_id(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(**CONFIG)
    with Client(daemon.address) as c:
        c.put(Kind.BLOB, "X", os.urandom(300_000), profile=SSD)
    lost = _segment_of(daemon, "X")
    daemon.stop()
    (Path(daemon.config.data_dir) / "segments" / f"seg-{lost:010d}.dat").unlink()
    daemon = make_daemon(**CONFIG)
    y = os.urandom(300_000)
    with Client(daemon.address) as c:
        c.put(Kind.BLOB, "Y", y, profile=SSD)
        assert _segment_of(daemon, "Y") != lost
        with pytest.raises(ChecksumError, match="does not exist"):
            c.get(Kind.BLOB, "X")
        c.delete(Kind.BLOB, "X")
        assert c.get(Kind.BLOB, "Y") == y
        seg = _segment_of(daemon, "Y")
        assert daemon.store.ssd.segments.live_bytes(seg) >= len(y)  # Y still counted
