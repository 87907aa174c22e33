import pytest

from tiermem.client import (
    CapacityError,
    Client,
    Grant,
    Kind,
    NotFoundError,
    PermissionDeniedError,
    RecordKind,
    Tier,
)


def test_siblings_cannot_read_each_others_objects_or_records(aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    a = aclient.sessions.open(parent=root.id, label="a")
    b = aclient.sessions.open(parent=root.id, label="b")
    ca, cb = aclient.as_session(a.id), aclient.as_session(b.id)
    ca.put(Kind.KV_BLOCK, "a/0", b"secret-of-a")
    ca.scratch.append(a.id, RecordKind.THOUGHT, "a's private thought")
    aclient.put(Kind.BLOB, "shared", b"for everyone")

    for call in (
        lambda: cb.get(Kind.KV_BLOCK, "a/0"),
        lambda: cb.stat(Kind.KV_BLOCK, "a/0"),
        lambda: cb.delete(Kind.KV_BLOCK, "a/0"),
        lambda: cb.scratch.replay(a.id),
        lambda: cb.scratch.query(a.id, "thought"),
        lambda: aclient.as_session(root.id).get(Kind.KV_BLOCK, "a/0"),  # nor its parent
    ):
        with pytest.raises(NotFoundError):
            call()
    assert [o.key for o in cb.list(kind=Kind.KV_BLOCK)] == []
    with pytest.raises(PermissionDeniedError):
        cb.scratch.append(a.id, RecordKind.THOUGHT, "planted")
    with pytest.raises(PermissionDeniedError):
        cb.put(Kind.KV_BLOCK, "a/0", b"overwrite")
    # Unowned objects stay visible to all; the owner still sees its own.
    assert cb.get(Kind.BLOB, "shared") == b"for everyone"
    assert ca.get(Kind.KV_BLOCK, "a/0") == b"secret-of-a"
    assert [r.payload for r in ca.scratch.replay(a.id)] == [b"a's private thought"]
    # A trusted tool (no session) sees everything.
    assert aclient.get(Kind.KV_BLOCK, "a/0") == b"secret-of-a"


def test_a_read_only_grant_shares_parent_objects_without_copies_and_refuses_writes(
    aclient: Client,
) -> None:
    root = aclient.sessions.open(label="main")
    pc = aclient.as_session(root.id)
    pc.put(Kind.KV_BLOCK, "prefix/0", b"kv-prefix-block")
    pc.put(Kind.KV_BLOCK, "other/0", b"not granted")
    pc.scratch.append(root.id, RecordKind.DECISION, '{"goal": [5, 5]}', key="plan/goal")
    pc.scratch.append(root.id, RecordKind.THOUGHT, "private musing")
    child = aclient.sessions.open(
        parent=root.id,
        label="sub",
        grants=[Grant(Kind.KV_BLOCK, "prefix/"), Grant(Kind.SCRATCH, "plan/")],
    )
    cc = aclient.as_session(child.id)
    before = aclient.stats()

    assert cc.get(Kind.KV_BLOCK, "prefix/0") == b"kv-prefix-block"
    assert aclient.stats().objects == before.objects  # nothing was copied
    with pytest.raises(NotFoundError):
        cc.get(Kind.KV_BLOCK, "other/0")
    with pytest.raises(PermissionDeniedError, match="read-only"):
        cc.put(Kind.KV_BLOCK, "prefix/0", b"tampered")
    with pytest.raises(PermissionDeniedError, match="read-only"):
        cc.delete(Kind.KV_BLOCK, "prefix/0")
    with pytest.raises(PermissionDeniedError):
        cc.scratch.append(root.id, RecordKind.THOUGHT, "tampered")
    assert [r.key for r in cc.scratch.replay(root.id)] == ["plan/goal"]
    # Rejected writes changed nothing.
    assert pc.get(Kind.KV_BLOCK, "prefix/0") == b"kv-prefix-block"
    assert len(pc.scratch.replay(root.id)) == 2


def test_puts_beyond_a_session_quota_are_refused_with_a_clear_message(aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    child = aclient.sessions.open(parent=root.id, label="small", quotas={Tier.DRAM: 100_000})
    cc = aclient.as_session(child.id)
    cc.put(Kind.KV_BLOCK, "a", b"x" * 60_000)
    with pytest.raises(CapacityError, match="DRAM quota is 100000 bytes"):
        cc.put(Kind.KV_BLOCK, "b", b"x" * 60_000)
    with pytest.raises(NotFoundError):
        cc.get(Kind.KV_BLOCK, "b")
    cc.put(Kind.KV_BLOCK, "a", b"y" * 90_000)  # replacing its own value is credited
    assert aclient.sessions.describe(child.id).used_bytes(Tier.DRAM) == 90_000
    # The quota follows the admitted tier: the same bytes fit on SSD.
    from tiermem.client import Profile

    cc.put(Kind.KV_BLOCK, "c", b"z" * 60_000, profile=Profile(preferred_tier=Tier.SSD))


def test_a_session_acts_only_as_itself(aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    other = aclient.sessions.open(label="other")
    rc = aclient.as_session(root.id)
    with pytest.raises(PermissionDeniedError):
        rc.put(Kind.BLOB, "x", b"y", session=other.id)
    with pytest.raises(PermissionDeniedError):
        rc.sessions.close(other.id)
    with pytest.raises(PermissionDeniedError):
        rc.sessions.open(parent=other.id)
    child = rc.sessions.open(parent=root.id, label="mine")
    rc.sessions.close(child.id, "ok")


@pytest.mark.parametrize("path", ["shm", "bulk"])
def test_isolation_holds_on_the_fast_data_paths(aclient: Client, path: str) -> None:
    root = aclient.sessions.open(label="main")
    a = aclient.sessions.open(parent=root.id, label="a")
    b = aclient.sessions.open(parent=root.id, label="b")
    fast = Client(aclient.address, fast_paths=(path,))
    try:
        ca, cb = fast.as_session(a.id), fast.as_session(b.id)
        big = b"s" * 300_000  # above the fast-path threshold
        ca.put(Kind.KV_BLOCK, "a/big", big)
        assert ca.get(Kind.KV_BLOCK, "a/big") == big
        assert ca.path_stats()[path]["puts"] >= 1
        assert aclient.sessions.describe(a.id).usage  # the session owns what it put
        with pytest.raises(NotFoundError):
            cb.get(Kind.KV_BLOCK, "a/big")
    finally:
        fast.close()
