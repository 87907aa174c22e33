"""Scratch records count toward a session's quotas (Describe shows them in
its usage), so appending them is refused RESOURCE_EXHAUSTED past a quota, as
object puts are. Appends were never checked: a session with a 100,000-byte
DRAM quota grew to a megabyte of buffered records, and then even a one-byte
object put was refused."""

from __future__ import annotations

import pytest

from tiermem.client import CapacityError, Client, Kind, NewRecord, RecordKind, Tier


def test_appends_stop_at_the_dram_quota(aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    child = aclient.sessions.open(parent=root.id, label="small", quotas={Tier.DRAM: 100_000})
    as_child = aclient.as_session(child.id)
    appended = 0
    with pytest.raises(CapacityError, match="DRAM quota"):
        for i in range(20):
            as_child.scratch.append_many(
                child.id, [NewRecord(RecordKind.THOUGHT, f"{i}:" + "x" * 20_000)]
            )
            appended += 1
    assert 1 <= appended < 20
    assert aclient.sessions.describe(child.id).used_bytes(Tier.DRAM) <= 100_000
    assert len(as_child.scratch.replay(child.id)) == appended  # the refused one stored nothing
    as_child.put(Kind.KV_BLOCK, "tiny", b"x")  # room is left for what fits
