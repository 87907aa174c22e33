from tiermem.client import Client, Kind, NotFoundError, RecordKind
from tiermem.server.app import Daemon


def test_ttl_expiry_closes_a_session_like_a_client_close(adaemon: Daemon, aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    child = aclient.sessions.open(parent=root.id, label="short", ttl_s=5)
    cc = aclient.as_session(child.id)
    cc.put(Kind.KV_BLOCK, "kv", b"x" * 40_000)
    cc.scratch.append(child.id, RecordKind.THOUGHT, "half-way")
    assert adaemon.sessions.reap_due(child.expires_unix_ms - 1) == 0
    assert adaemon.sessions.reap_due(child.expires_unix_ms) == 1
    try:
        aclient.get(Kind.KV_BLOCK, "kv")
        raise AssertionError("an expired session's object survived")
    except NotFoundError:
        pass
    assert [s.id for s in aclient.sessions.list()] == [root.id]
    results = aclient.scratch.replay(root.id, kinds=[RecordKind.RESULT])
    assert len(results) == 1 and results[0].payload.startswith(b"[expired]")
    assert aclient.sessions.ledger(root.id)[0].reason.name == "EXPIRED"


def test_a_client_that_stops_heartbeating_has_its_session_closed(
    adaemon: Daemon, aclient: Client
) -> None:
    s = aclient.sessions.open(label="worker", lease_s=10)
    aclient.as_session(s.id).put(Kind.BLOB, "b", b"y" * 1000)
    expires = aclient.sessions.heartbeat(s.id)
    assert adaemon.sessions.reap_due(expires - 1) == 0
    assert adaemon.sessions.reap_due(expires + 1) == 1
    assert aclient.sessions.list() == []
    try:
        aclient.get(Kind.BLOB, "b")
        raise AssertionError("an abandoned session's object survived")
    except NotFoundError:
        pass
