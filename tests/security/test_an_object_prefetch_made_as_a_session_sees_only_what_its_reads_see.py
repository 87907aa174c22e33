"""``PlacementService.Prefetch`` made as a session (the "x-tiermem-session"
metadata) follows the rules of an object read made as it: its own objects,
those of no session and an ancestor's its grants name are prefetched; a
sibling's do not exist for it, so they count as missing and get no deadline
(nothing is promoted for them). Before, the acting session was ignored: a
child prefetched its sibling's objects and the counts said they existed."""

from __future__ import annotations

import time

import pytest

from tiermem.client import Client, Grant, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import ObjectKey


def _deadline_set(daemon: Daemon, key: str) -> bool:
    encoded = ObjectKey("default", Kind.BLOB, key).encode()
    row = daemon.store.catalog.index.find(encoded)
    return row is not None and row in daemon.placement.deadlines


def test_a_childs_prefetch_skips_its_siblings_objects(daemon: Daemon, client: Client) -> None:
    root = client.sessions.open(label="main")
    a = client.sessions.open(parent=root.id, label="a", grants=[Grant(Kind.BLOB, "shared/")])
    b = client.sessions.open(parent=root.id, label="b")
    ra, ca, cb = (client.as_session(s.id) for s in (root, a, b))
    ra.put(Kind.BLOB, "shared/x", b"x" * 64)
    ca.put(Kind.BLOB, "a/z", b"z" * 64)
    cb.put(Kind.BLOB, "b/y", b"y" * 64)
    client.put(Kind.BLOB, "u", b"u" * 64)
    with pytest.raises(NotFoundError):  # what a read made as a makes of b's object
        ca.get(Kind.BLOB, "b/y")

    keys = [(Kind.BLOB, k) for k in ("a/z", "u", "shared/x", "b/y", "absent")]
    got = ca.placement.prefetch(keys, deadline_s=time.time() + 600)
    assert (got.queued + got.resident, got.missing) == (3, 2)
    assert not _deadline_set(daemon, "b/y")
    assert all(_deadline_set(daemon, k) for k in ("a/z", "u", "shared/x"))
    # b sees its own object, and neither a's nor its parent's (b has no grant)
    got = cb.placement.prefetch(keys)
    assert (got.queued + got.resident, got.missing) == (2, 3)
    # a trusted tool prefetches every object that exists
    got = client.placement.prefetch(keys)
    assert (got.queued + got.resident, got.missing) == (4, 1)
