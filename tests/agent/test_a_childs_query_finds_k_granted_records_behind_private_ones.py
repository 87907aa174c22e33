"""A child's semantic query of its parent's scratchpad through a SCRATCH grant
returns ``k`` records whenever ``k`` granted records match. The search took the
``4k`` nearest of all the parent's records and dropped the ungranted ones
afterwards, so a parent with many private notes closer to the query text left
the child with fewer than ``k`` results (here: none)."""

from __future__ import annotations

from tiermem.client import Client, Grant, Kind, NewRecord, RecordKind


def test_a_child_query_returns_k_granted_records_behind_many_closer_private_ones(
    aclient: Client,
) -> None:
    root = aclient.sessions.open(label="main")
    parent = aclient.as_session(root.id)
    private = [NewRecord(RecordKind.THOUGHT, f"route to the goal step {i}") for i in range(40)]
    shared = [
        NewRecord(RecordKind.DECISION, f"plan entry {i} to the goal", key=f"plan/{i}")
        for i in range(5)
    ]
    parent.scratch.append_many(root.id, private + shared)
    parent.scratch.flush(root.id)
    grants = [Grant(Kind.SCRATCH, "plan/")]
    child = aclient.sessions.open(parent=root.id, label="sub", grants=grants)
    cc = aclient.as_session(child.id)

    # the parent's own query ranks its private notes first
    own = parent.scratch.query(root.id, "route to the goal step", k=3)
    assert [r.key for r, _ in own] == ["", "", ""]
    hits = cc.scratch.query(root.id, "route to the goal step", k=3)
    assert len(hits) == 3
    assert all(r.key.startswith("plan/") for r, _ in hits)
    # fewer granted records than k: all of them, none of the private ones
    hits = cc.scratch.query(root.id, "route to the goal step", k=10)
    assert sorted(r.key for r, _ in hits) == [f"plan/{i}" for i in range(5)]
