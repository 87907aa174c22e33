"""``KvService.DeleteBlocks`` made as a session (the "x-tiermem-session"
metadata) follows the rules of an object delete made as that session: it
deletes the session's own blocks and blocks owned by no session; a sibling's
blocks do not exist for it and a parent's, shared by a read-only grant, cannot
be changed through it, so both are left (and not counted). A caller without a
session (a trusted tool) still deletes every block in scope. Before, the
acting session was ignored: a session deleted its siblings' and its parent's
blocks, which an object delete refuses (NOT_FOUND / PERMISSION_DENIED)."""

from __future__ import annotations

import pytest

from tiermem.client import (
    Client,
    Grant,
    Kind,
    KvBlock,
    KvScope,
    NotFoundError,
    PermissionDeniedError,
)

SCOPE = KvScope("m", world_size=1, worker_id=0, dtype="uint8")


def blocks(first: int, count: int) -> list[KvBlock]:
    return [
        KvBlock(i.to_bytes(8, "big"), bytes([i]) * 64, dtype="uint8", shape=(64,))
        for i in range(first, first + count)
    ]


def found(client: Client, first: int, count: int) -> int:
    got = client.kv.get_blocks(SCOPE, [b.chunk_hash for b in blocks(first, count)])
    return sum(1 for b in got if b.found)


def test_a_session_deletes_only_the_blocks_an_object_delete_would_let_it(
    aclient: Client,
) -> None:
    root = aclient.sessions.open(label="main")
    a = aclient.sessions.open(parent=root.id, label="a", grants=[Grant(Kind.KV_BLOCK, "")])
    b = aclient.sessions.open(parent=root.id, label="b")
    ra, ca, cb = (aclient.as_session(s.id) for s in (root, a, b))
    shared = ra.kv.put_blocks(SCOPE, blocks(0, 2), session=root.id)  # a's grant shares them
    ca.kv.put_blocks(SCOPE, blocks(10, 3), session=a.id)
    cb.kv.put_blocks(SCOPE, blocks(20, 4), session=b.id)
    aclient.kv.put_blocks(SCOPE, blocks(30, 1))  # owned by no session

    # the object rules these blocks' deletes follow, one at a time
    key = shared[0].key
    with pytest.raises(PermissionDeniedError, match="read-only"):
        ca.delete(Kind.KV_BLOCK, key)
    with pytest.raises(NotFoundError):
        cb.delete(Kind.KV_BLOCK, key)

    # a sibling's blocks, named by its session or not, do not exist for b
    assert cb.kv.delete(model="m", session=a.id) == (0, 0)
    # a deletes its own and the unowned block; its parent's and b's stay
    assert ca.kv.delete(model="m") == (4, 4 * 64)
    assert found(aclient, 10, 3) == 0
    assert found(aclient, 30, 1) == 0
    assert found(aclient, 0, 2) == 2
    assert found(aclient, 20, 4) == 4
    # a trusted tool deletes everything in scope
    assert aclient.kv.delete(model="m") == (6, 6 * 64)
