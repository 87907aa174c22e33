"""KvService's GetBlocks, LookupPrefix, Prefetch and PutBlocks made as a
session (the "x-tiermem-session" metadata, ``Client.as_session``) follow the
rules of object Get/Stat and Put made as that session, on every path a KV call
takes (the KvService streams, the bulk session, shared memory):

* a session sees its own blocks, blocks owned by no session, and an
  ancestor's blocks one of its grants names; a sibling's blocks (and an
  ancestor's not granted) do not exist for it: GetBlocks reports them not
  found, LookupPrefix's prefix ends at the first of them, Prefetch counts
  them missing and moves none of them;
* what it puts, it owns; it may not put as another session, nor over a block
  another session owns (a put over one shared with it by a grant is refused as
  read-only), and such a refused batch stores none of its blocks.

Before, the KV calls ignored the acting session: a child read, found and
promoted its sibling's blocks and overwrote them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tiermem.client import (
    Client,
    Grant,
    Kind,
    KvBlock,
    KvScope,
    PermissionDeniedError,
)

SCOPE = KvScope("m", world_size=1, worker_id=0, dtype="uint8")
#: 128 KiB: the client moves blocks this large by its fast paths (bulk, shm)
BIG = 128 * 1024


def blocks(first: int, count: int, fill: int = 0) -> list[KvBlock]:
    return [
        KvBlock(i.to_bytes(8, "big"), bytes([(i + fill) % 256]) * BIG, dtype="uint8", shape=(BIG,))
        for i in range(first, first + count)
    ]


def hashes(first: int, count: int) -> list[int]:
    return list(range(first, first + count))


@dataclass
class Tree:
    """A parent with two children: ``a`` granted every KV block of the
    parent, ``b`` granted nothing. Each has put blocks; one block is
    owned by no session."""

    root: str
    a: str
    b: str
    ra: Client
    ca: Client
    cb: Client
    key_of_root_block: str


ROOT_BLOCKS, A_BLOCKS, B_BLOCKS, FREE_BLOCKS = (0, 2), (10, 3), (20, 4), (30, 1)


def tree(aclient: Client, path: str) -> Tree:
    root = aclient.sessions.open(label="main")
    a = aclient.sessions.open(parent=root.id, label="a", grants=[Grant(Kind.KV_BLOCK, "")])
    b = aclient.sessions.open(parent=root.id, label="b")
    ra, ca, cb = (aclient.as_session(s.id) for s in (root, a, b))
    stored = ra.kv.put_blocks(SCOPE, blocks(*ROOT_BLOCKS), path=path)
    ca.kv.put_blocks(SCOPE, blocks(*A_BLOCKS), path=path)
    cb.kv.put_blocks(SCOPE, blocks(*B_BLOCKS), path=path)
    aclient.kv.put_blocks(SCOPE, blocks(*FREE_BLOCKS), path=path)
    return Tree(root.id, a.id, b.id, ra, ca, cb, stored[0].key)


def found(client: Client, first: int, count: int, path: str) -> list[bool]:
    got = client.kv.get_blocks(SCOPE, hashes(first, count), path=path)
    return [b.found for b in got]


@pytest.mark.parametrize("path", ["grpc", "bulk", "shm"])
def test_a_session_gets_only_the_blocks_an_object_get_would_show_it(
    aclient: Client, path: str
) -> None:
    t = tree(aclient, path)
    # its own, and the block owned by no session
    assert found(t.cb, *B_BLOCKS, path) == [True] * 4
    assert found(t.cb, *FREE_BLOCKS, path) == [True]
    # a sibling's, and a parent's its grants do not name, do not exist for it
    assert found(t.cb, *A_BLOCKS, path) == [False] * 3
    assert found(t.cb, *ROOT_BLOCKS, path) == [False] * 2
    # a mixed batch: each block answered as alone
    got = t.cb.kv.get_blocks(SCOPE, [30, 10, 20], path=path)
    assert [g.found for g in got] == [True, False, True]
    assert bytes(got[2].data) == bytes([20]) * BIG
    # a child sees its parent's blocks its grant names; the parent sees its own
    assert found(t.ca, *ROOT_BLOCKS, path) == [True] * 2
    assert found(t.ra, *ROOT_BLOCKS, path) == [True] * 2
    # a trusted tool sees everything
    assert found(aclient, *A_BLOCKS, path) == [True] * 3


@pytest.mark.parametrize("fast_paths", [("grpc",), ("bulk", "grpc")])
def test_a_sessions_prefix_lookup_ends_at_the_first_block_it_may_not_see(
    aclient: Client, fast_paths: tuple[str, ...]
) -> None:
    t = tree(aclient, "grpc")
    with Client(aclient.address, timeout_s=30, fast_paths=fast_paths) as c:
        ca, cb = c.as_session(t.a), c.as_session(t.b)
        assert cb.kv.lookup_prefix(SCOPE, hashes(*A_BLOCKS)).stored_chunks == 0
        assert cb.kv.lookup_prefix(SCOPE, hashes(*ROOT_BLOCKS)).stored_chunks == 0
        assert cb.kv.lookup_prefix(SCOPE, hashes(*B_BLOCKS)).stored_chunks == 4
        assert cb.kv.lookup_prefix(SCOPE, [30, 20, 10, 21]).stored_chunks == 2
        assert ca.kv.lookup_prefix(SCOPE, [0, 1, 10, 30, 20]).stored_chunks == 4
        assert c.kv.lookup_prefix(SCOPE, [0, 1, 10, 30, 20]).stored_chunks == 5


def test_a_session_prefetches_only_the_blocks_it_may_see(aclient: Client) -> None:
    t = tree(aclient, "grpc")
    report = t.cb.kv.prefetch(SCOPE, [*hashes(*A_BLOCKS), *hashes(*B_BLOCKS), 30])
    assert (report.promoted + report.resident, report.missing) == (5, 3)
    report = t.ca.kv.prefetch(SCOPE, hashes(*ROOT_BLOCKS))
    assert (report.promoted + report.resident, report.missing) == (2, 0)


@pytest.mark.parametrize("path", ["grpc", "bulk", "shm"])
def test_a_session_owns_what_it_puts_and_may_not_put_over_anothers_blocks(
    aclient: Client, path: str
) -> None:
    t = tree(aclient, path)
    # what a session puts, it owns (as an object put made as it)
    key = t.cb.kv.put_blocks(SCOPE, blocks(40, 1), path=path)[0].key
    assert aclient.stat(Kind.KV_BLOCK, key).session == t.b
    assert found(t.ca, 40, 1, path) == [False]
    # it may not put as another session
    with pytest.raises(PermissionDeniedError):
        t.cb.kv.put_blocks(SCOPE, blocks(41, 1), session=t.a, path=path)
    # nor over a sibling's block, nor over its parent's shared read-only; the
    # refused batch stores none of its blocks
    with pytest.raises(PermissionDeniedError):
        t.cb.kv.put_blocks(SCOPE, [*blocks(42, 1), *blocks(10, 1, fill=7)], path=path)
    with pytest.raises(PermissionDeniedError, match="read-only"):
        t.ca.kv.put_blocks(SCOPE, [*blocks(43, 1), *blocks(0, 1, fill=7)], path=path)
    assert found(aclient, 41, 3, path) == [False] * 3
    kept = aclient.kv.get_blocks(SCOPE, [10, 0], path=path)
    assert [bytes(k.data[:1]) for k in kept] == [bytes([10]), bytes([0])]
    assert aclient.stat(Kind.KV_BLOCK, t.key_of_root_block).session == t.root
    # a block owned by no session stays free to write, as an object's is
    t.cb.kv.put_blocks(SCOPE, blocks(30, 1, fill=5), path=path)
