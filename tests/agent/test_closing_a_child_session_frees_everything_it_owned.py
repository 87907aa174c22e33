import os

from tiermem.client import (
    Client,
    Durability,
    Kind,
    NewRecord,
    NotFoundError,
    Profile,
    RecordDurability,
    RecordKind,
    Tier,
)
from tiermem.server.app import Daemon

MiB = 1 << 20


def held(client: Client) -> dict[str, int]:
    """What the daemon holds: engine bytes of memory tiers, live object bytes
    per tier, scratchpad bytes (buffered in DRAM, stored on SSD)."""
    stats = client.stats()
    scratch = client.scratch.stats()
    out = {
        "scratch_dram": scratch.buffered_bytes,
        "scratch_ssd": scratch.stored_bytes,
        "scratch_records": scratch.stored_records,
    }
    for t in stats.tiers:
        out[f"{t.tier.name}_objects"] = sum(b for _, b in t.by_kind.values())
        if t.tier in (Tier.HBM, Tier.DRAM):
            out[f"{t.tier.name}_engine"] = t.used_bytes
    return out


def test_closing_a_child_frees_all_it_owned_and_leaves_the_parent_alone(agent_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = agent_daemon(tiers={"hbm": {"enabled": True, "capacity_bytes": 16 * MiB}})
    client = Client(daemon.address)
    parent = client.sessions.open(label="main")
    pc = client.as_session(parent.id)
    parent_kv = os.urandom(200_000)
    pc.put(Kind.KV_BLOCK, "prefix/0", parent_kv, profile=Profile(preferred_tier=Tier.HBM))
    pc.put(Kind.BLOB, "map", b"m" * 70_000)
    pc.scratch.append(parent.id, RecordKind.OBSERVATION, "start at (0,0)")
    client.scratch.flush()
    before = held(client)

    child = client.sessions.open(parent=parent.id, label="think")
    cc = client.as_session(child.id)
    cc.put(Kind.KV_BLOCK, "kv/0", os.urandom(300_000), profile=Profile(preferred_tier=Tier.HBM))
    cc.put(  # DRAM, CACHE
        Kind.KV_BLOCK, "kv/1", os.urandom(100_000), profile=Profile(preferred_tier=Tier.DRAM)
    )
    cc.put(Kind.SCRATCH, "state", os.urandom(5_000), profile=Profile(durability=Durability.DURABLE))
    cc.put(Kind.BLOB, "big", os.urandom(2 * MiB), profile=Profile(preferred_tier=Tier.SSD))
    cc.scratch.append_many(
        child.id, [NewRecord(RecordKind.THOUGHT, f"candidate {i}") for i in range(50)]
    )
    client.scratch.flush()  # some records stored on SSD ...
    cc.scratch.append(
        child.id, RecordKind.THOUGHT, "still thinking", durability=RecordDurability.BUFFERED
    )
    during = held(client)
    assert during["HBM_engine"] > before["HBM_engine"]
    assert during["DRAM_engine"] > before["DRAM_engine"]
    assert during["SSD_objects"] > before["SSD_objects"]
    assert during["scratch_ssd"] > before["scratch_ssd"]
    usage = client.sessions.describe(child.id).usage
    assert usage[Tier.HBM][0] == 300_000

    report = client.sessions.close(child.id, "best frontier: (4, 7)")
    assert report.objects_freed == 4
    assert report.records_freed == 51
    assert report.freed[Tier.HBM] == 300_000
    client.scratch.flush()  # the parent's result record

    after = held(client)
    only_scratch = ("scratch_ssd", "scratch_records")
    assert {k: v for k, v in after.items() if k not in only_scratch} == {
        k: v for k, v in before.items() if k not in only_scratch
    }
    # Only the result record was added to the parent's scratchpad.
    assert after["scratch_records"] == before["scratch_records"] + 1
    assert 0 < after["scratch_ssd"] - before["scratch_ssd"] < 1024
    # The parent's objects are untouched and it got exactly the one-line result.
    assert pc.get(Kind.KV_BLOCK, "prefix/0") == parent_kv
    assert pc.get(Kind.BLOB, "map") == b"m" * 70_000
    records = pc.scratch.replay(parent.id)
    assert [r.payload for r in records] == [b"start at (0,0)", b"best frontier: (4, 7)"]
    assert records[-1].kind == RecordKind.RESULT
    ledger = client.sessions.ledger(parent.id)
    assert [(e.child, e.bytes) for e in ledger] == [(child.id, len(b"best frontier: (4, 7)"))]
    assert client.sessions.describe(parent.id).ledger_bytes == len(b"best frontier: (4, 7)")
    for key in ("kv/0", "kv/1"):
        try:
            client.get(Kind.KV_BLOCK, key)
            raise AssertionError(f"{key} survived its session's close")
        except NotFoundError:
            pass
    client.close()


def test_closing_a_parent_closes_its_open_children_first(aclient: Client) -> None:
    root = aclient.sessions.open(label="root")
    a = aclient.sessions.open(parent=root.id, label="a")
    b = aclient.sessions.open(parent=a.id, label="b")
    aclient.as_session(b.id).put(Kind.BLOB, "deep", b"x" * 1000)
    report = aclient.sessions.close(root.id)
    assert report.sessions_closed == 3
    assert report.objects_freed == 1
    assert aclient.sessions.list() == []


def test_sessions_survive_a_restart(agent_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = agent_daemon()
    with Client(daemon.address) as client:
        root = client.sessions.open(label="main", quotas={Tier.DRAM: 1 * MiB})
        child = client.sessions.open(parent=root.id, label="sub")
        client.as_session(child.id).put(Kind.BLOB, "x", b"y" * 100)
        client.sessions.close(child.id, "done")
    daemon.stop()
    again: Daemon = agent_daemon()
    with Client(again.address) as client:
        info = client.sessions.describe(root.id)
        assert info.label == "main"
        assert info.quotas == {Tier.DRAM: 1 * MiB}
        assert info.ledger_bytes == 4
        assert [r.payload for r in client.scratch.replay(root.id)] == [b"done"]
