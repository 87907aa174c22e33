"""With ``dataplane.bulk.sendfile`` on, a bulk get sends values of at least
``SENDFILE_MIN_BYTES`` held in the DRAM arena with sendfile from the arena's
file; smaller values, and large ones on SSD, leave from memory as before. Off
(the default), nothing leaves by sendfile. Mixed in one batch, every value
comes back byte-exact and in order either way."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.integration.dataplane.helpers import MiB
from tiermem.client import Client, Kind, Profile, Tier
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.server.app import Daemon


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "default"])
def test_a_mixed_batch_of_arena_ssd_and_small_values_comes_back_exact(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch, sendfile: bool
) -> None:
    daemon = make_daemon(
        background={"migrate_interval_s": 3600},  # nothing moves meanwhile
        dataplane={"bulk": {"sendfile": sendfile}} if sendfile else {},
    )
    values = {
        "big-a": os.urandom(3 * MiB),
        "small": os.urandom(40 << 10),
        "cold": os.urandom(2 * MiB),
        "big-b": os.urandom(2 * MiB + 5),  # not a multiple of a page
    }
    sent_by_sendfile: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out: int, in_: int, offset: int | None, count: int) -> int:
        sent = real_sendfile(out, in_, offset, count)
        sent_by_sendfile.append(sent)
        return sent

    with Client(daemon.address, timeout_s=30) as c:
        for name, data in values.items():
            tier = Tier.SSD if name == "cold" else Tier.DRAM
            item = PutItem(Kind.BLOB, name, data, profile=Profile(preferred_tier=tier))
            c.dataplane.put_many([item], path="bulk")
        assert c.stat(Kind.BLOB, "cold").tier == Tier.SSD
        assert c.stat(Kind.BLOB, "big-a").tier == Tier.DRAM
        monkeypatch.setattr(os, "sendfile", counting_sendfile)
        refs = [ObjectRef(Kind.BLOB, name) for name in values]
        got = c.dataplane.get_many(refs, path="bulk")
    assert [bytes(g.data) for g in got] == list(values.values())
    large = len(values["big-a"]) + len(values["big-b"])
    assert sum(sent_by_sendfile) == (large if sendfile else 0)
