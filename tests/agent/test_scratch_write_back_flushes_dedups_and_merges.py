from collections.abc import Callable

import pytest

from tests.agent.conftest import wait_for
from tiermem.client import Client, NewRecord, RecordDurability, RecordKind
from tiermem.server.app import Daemon


def flushes(client: Client, reason: str) -> int:
    return client.scratch.stats().flushes_by_reason.get(reason, 0)


@pytest.mark.parametrize(
    ("reason", "overrides"),
    [
        ("records", {"flush_records": 20}),
        ("bytes", {"flush_bytes": 3000}),
        ("key_node", {}),
        ("timer", {"flush_interval_s": 0.2}),
    ],
)
def test_each_flush_trigger_fires(
    agent_daemon: Callable[..., Daemon], reason: str, overrides: dict[str, object]
) -> None:
    daemon = agent_daemon(agent={"scratch": overrides})
    with Client(daemon.address) as client:
        s = client.sessions.open(label="t")
        records = [NewRecord(RecordKind.OBSERVATION, f"obs {i} " + "x" * 100) for i in range(19)]
        client.scratch.append_many(s.id, records)
        assert flushes(client, reason) == 0 or reason == "timer"
        if reason == "key_node":
            client.scratch.append(s.id, RecordKind.DECISION, "turn left", key_node=True)
        elif reason != "timer":
            client.scratch.append_many(s.id, records[:2])
        wait_for(lambda: flushes(client, reason) >= 1)
        wait_for(lambda: client.scratch.stats().buffered_records == 0)
        assert all(r.flushed for r in client.scratch.replay(s.id))


def test_client_flush_and_session_close_flush(agent_daemon: Callable[..., Daemon]) -> None:
    daemon = agent_daemon(agent={"scratch": {"flush_on_session_close": True}})
    aclient = Client(daemon.address)
    root = aclient.sessions.open(label="main")
    aclient.scratch.append(root.id, RecordKind.OBSERVATION, "a")
    report = aclient.scratch.flush()
    assert report.records == 1 and flushes(aclient, "client") == 1
    aclient.scratch.append(root.id, RecordKind.OBSERVATION, "b")
    child = aclient.sessions.open(parent=root.id)
    aclient.sessions.close(child.id, "c")
    wait_for(lambda: flushes(aclient, "session_close") >= 1)
    wait_for(lambda: aclient.scratch.stats().buffered_records == 0)
    assert [r.payload for r in aclient.scratch.replay(root.id)] == [b"a", b"b", b"c"]


def test_a_flush_dedups_merges_and_writes_one_batch_and_one_index_update(
    aclient: Client,
) -> None:
    s = aclient.sessions.open(label="main")
    other = aclient.sessions.open(label="other")
    before = aclient.scratch.stats()
    dup = NewRecord(RecordKind.OBSERVATION, "wall at (3, 4)", tags=["wall"])
    aclient.scratch.append_many(
        s.id,
        [
            dup,
            NewRecord(RecordKind.THOUGHT, "pos (0,0)", key="position"),
            dup,
            NewRecord(RecordKind.THOUGHT, "pos (0,1)", key="position"),
            NewRecord(RecordKind.OBSERVATION, "wall at (3, 4)", tags=["other-tag"]),
            NewRecord(RecordKind.THOUGHT, "pos (0,2)", key="position", key_node=False),
            dup,
        ],
    )
    aclient.scratch.append(other.id, RecordKind.OBSERVATION, "wall at (3, 4)", tags=["wall"])
    report = aclient.scratch.flush()
    assert (report.records, report.deduplicated, report.merged) == (4, 2, 2)
    after = aclient.scratch.stats()
    assert after.write_batches - before.write_batches == 1
    assert after.index_updates - before.index_updates == 1
    replay = aclient.scratch.replay(s.id)
    assert [(r.key, r.payload) for r in replay] == [
        ("", b"wall at (3, 4)"),
        ("", b"wall at (3, 4)"),
        ("position", b"pos (0,2)"),
    ]
    # A later update of the key replaces the stored entry; replay shows the latest only.
    aclient.scratch.append(s.id, RecordKind.THOUGHT, "pos (1,2)", key="position")
    assert aclient.scratch.replay(s.id, key="position")[0].payload == b"pos (1,2)"
    aclient.scratch.flush()
    assert [r.payload for r in aclient.scratch.replay(s.id, key="position")] == [b"pos (1,2)"]
    assert len(aclient.scratch.replay(s.id)) == 3


def test_replay_filters_by_time_kind_and_tag_and_query_finds_by_meaning(aclient: Client) -> None:
    s = aclient.sessions.open(label="main")
    aclient.scratch.append_many(
        s.id,
        [
            NewRecord(
                RecordKind.OBSERVATION,
                "the key lies under the red door",
                tags=["item"],
                ts_unix_ms=1000,
            ),
            NewRecord(RecordKind.THOUGHT, "maybe go north", tags=["plan"], ts_unix_ms=2000),
            NewRecord(
                RecordKind.TOOL_CALL,
                "grid.shortest_path -> 12 steps",
                tags=["plan"],
                ts_unix_ms=3000,
            ),
            NewRecord(RecordKind.DECISION, "go north", tags=["plan", "move"], ts_unix_ms=4000),
        ],
    )
    assert [
        r.ts_unix_ms for r in aclient.scratch.replay(s.id, since_unix_ms=2000, until_unix_ms=4000)
    ] == [2000, 3000]
    assert [r.kind for r in aclient.scratch.replay(s.id, kinds=[RecordKind.DECISION])] == [
        RecordKind.DECISION
    ]
    assert len(aclient.scratch.replay(s.id, tags=["plan"])) == 3
    assert aclient.scratch.query(s.id, "red door key") == []  # only flushed records are indexed
    aclient.scratch.flush()
    hits = aclient.scratch.query(s.id, "where is the key? under the red door?", k=2)
    assert hits[0][0].payload == b"the key lies under the red door"
    assert (
        aclient.scratch.query(s.id, "north", k=5, kinds=[RecordKind.DECISION])[0][0].payload
        == b"go north"
    )


def test_sync_appends_are_acknowledged(aclient: Client) -> None:
    s = aclient.sessions.open(label="main")
    ids = aclient.scratch.append_many(
        s.id,
        [
            NewRecord(RecordKind.OBSERVATION, f"{i}", durability=RecordDurability.SYNC)
            for i in range(5)
        ],
    )
    assert len(ids) == 5 and len(aclient.scratch.replay(s.id)) == 5


def test_streamed_appends_arrive_in_order(aclient: Client) -> None:
    s = aclient.sessions.open(label="main")
    n = aclient.scratch.append_stream(
        s.id, (NewRecord(RecordKind.OBSERVATION, f"r{i}") for i in range(1000)), per_message=64
    )
    assert n == 1000
    assert [r.payload for r in aclient.scratch.replay(s.id)] == [
        f"r{i}".encode() for i in range(1000)
    ]


def test_bad_records_are_rejected_and_change_nothing(aclient: Client) -> None:
    from tiermem.client import CapacityError, InvalidArgumentError, NotFoundError

    s = aclient.sessions.open(label="main")
    with pytest.raises(CapacityError, match=r"agent\.scratch\.max_record_bytes"):
        aclient.scratch.append(s.id, RecordKind.THOUGHT, b"x" * (300 * 1024))
    with pytest.raises(InvalidArgumentError, match="kind"):
        aclient.scratch.append(s.id, 9, "x")  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        aclient.scratch.append("no-such-session", RecordKind.THOUGHT, "x")
    assert aclient.scratch.replay(s.id) == []
