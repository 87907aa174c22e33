"""The daemon feeds the access model what it knows at run time: a read ends the
boost of the deadline a Prefetch announced, and reads of a session's KV blocks
are counted with the session half-life (shared blocks keep the longer one)."""

import math

from tiermem.client import AccessHint, Client, Kind, Profile
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

MiB = 1 << 20


def row_of(daemon: Daemon, kind: ServerKind, key: str) -> int:
    row = daemon.store.catalog.index.find(ObjectKey("default", kind, key).encode())
    assert row is not None
    return row


def test_a_read_ends_the_boost_of_the_deadline_a_prefetch_announced(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(placement={"plan_interval_s": 0.1})
    with Client(daemon.address) as client:
        data = bytes(range(256)) * (3 * MiB // 256)
        client.put(Kind.BLOB, "doc", data, profile=Profile(hint=AccessHint.COLD))
        client.put(Kind.BLOB, "later", data, profile=Profile(hint=AccessHint.COLD))
        result = client.placement.prefetch_in([(Kind.BLOB, "doc"), (Kind.BLOB, "later")], 60)
        assert result.missing == 0
        doc, later = (
            row_of(daemon, ServerKind.BLOB, "doc"),
            row_of(daemon, ServerKind.BLOB, "later"),
        )
        assert {doc, later} <= set(daemon.placement.deadlines)
        assert client.get(Kind.BLOB, "doc") == data
        assert doc not in daemon.placement.deadlines  # the announced read happened
        assert later in daemon.placement.deadlines  # still expected


def test_reads_of_a_session_kv_block_count_with_the_session_half_life(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        placement={"rate_half_life_s": 40.0, "session_rate_half_life_s": 10.0}
    )
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "turn", b"t" * 4096, session="chat-1")
        client.put(Kind.KV_BLOCK, "shared", b"s" * 4096)
        turn = row_of(daemon, ServerKind.KV_BLOCK, "turn")
        shared = row_of(daemon, ServerKind.KV_BLOCK, "shared")
        catalog = daemon.store.catalog
        assert catalog.session_kv(turn) and not catalog.session_kv(shared)
        cols = catalog.index.cols
        before = {r: (float(cols["rate"][r]), float(cols["atime"][r])) for r in (turn, shared)}
        client.get(Kind.KV_BLOCK, "turn")
        client.get(Kind.KV_BLOCK, "shared")
        with daemon.store.lock:  # reads of objects in memory are counted as it is taken
            pass
        for row, half_life in ((turn, 10.0), (shared, 40.0)):
            rate0, atime0 = before[row]
            tau = half_life / math.log(2)
            age = float(cols["atime"][row]) - atime0
            expected = rate0 * math.exp(-age / tau) + 1 / tau
            assert math.isclose(float(cols["rate"][row]), expected, rel_tol=1e-5)
