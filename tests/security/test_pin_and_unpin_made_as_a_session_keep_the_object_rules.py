"""``PlacementService.Pin`` and ``Unpin`` made as a session (the
"x-tiermem-session" metadata) follow the rules of an object change made as
it: its own objects and those of no session are pinned and unpinned; a
sibling's do not exist for it, so Pin refuses them with the NOT_FOUND of a
missing key (nothing is pinned or moved) and Unpin does not count them; an
ancestor's shared by a read-only grant is PERMISSION_DENIED. Before, the acting
session was ignored: a child pinned, moved and unpinned its sibling's objects,
and Pin's NOT_FOUND told it which of its sibling's keys exist."""

from __future__ import annotations

import pytest

from tiermem.client import Client, Grant, Kind, NotFoundError, PermissionDeniedError
from tiermem.server.app import Daemon
from tiermem.server.model import ObjectKey


def _pinned(daemon: Daemon, key: str) -> bool:
    entry = daemon.store.catalog.find(ObjectKey("default", Kind.BLOB, key).encode())
    assert entry is not None
    return bool(entry.pinned)


def test_a_child_cannot_pin_or_unpin_its_siblings_object(daemon: Daemon, client: Client) -> None:
    root = client.sessions.open(label="main")
    a = client.sessions.open(parent=root.id, label="a")
    b = client.sessions.open(parent=root.id, label="b")
    ca, cb = client.as_session(a.id), client.as_session(b.id)
    ca.put(Kind.BLOB, "a/secret", b"z" * 64)
    with pytest.raises(NotFoundError):  # what a read made as b makes of a's object
        cb.get(Kind.BLOB, "a/secret")
    with pytest.raises(NotFoundError) as sibling:  # ... so Pin made as b says the same
        cb.placement.pin([(Kind.BLOB, "a/secret")])
    with pytest.raises(NotFoundError) as missing:
        cb.placement.pin([(Kind.BLOB, "a/absent")])
    # the same answer as for a missing key, but for the key's name: no oracle
    assert sibling.value.args[0].replace("secret", "absent") == missing.value.args[0]
    assert not _pinned(daemon, "a/secret")
    # a pin of b's own object listing a's pins nothing
    cb.put(Kind.BLOB, "b/own", b"y" * 64)
    with pytest.raises(NotFoundError):
        cb.placement.pin([(Kind.BLOB, "b/own"), (Kind.BLOB, "a/secret")])
    assert not _pinned(daemon, "b/own") and not _pinned(daemon, "a/secret")
    # a's pin stays: b cannot unpin it
    ca.placement.pin([(Kind.BLOB, "a/secret")])
    assert cb.placement.unpin([(Kind.BLOB, "a/secret")]) == 0
    assert _pinned(daemon, "a/secret")
    assert ca.placement.unpin([(Kind.BLOB, "a/secret")]) == 1


def test_a_child_pins_its_own_and_unowned_objects_but_not_through_a_grant(
    daemon: Daemon, client: Client
) -> None:
    root = client.sessions.open(label="main")
    a = client.sessions.open(parent=root.id, label="a", grants=[Grant(Kind.BLOB, "shared/")])
    ra, ca = client.as_session(root.id), client.as_session(a.id)
    ra.put(Kind.BLOB, "shared/x", b"x" * 64)
    ca.put(Kind.BLOB, "a/z", b"z" * 64)
    client.put(Kind.BLOB, "u", b"u" * 64)
    assert ca.get(Kind.BLOB, "shared/x") == b"x" * 64  # readable through the grant
    assert len(ca.placement.pin([(Kind.BLOB, "a/z"), (Kind.BLOB, "u")])) == 2
    assert _pinned(daemon, "a/z") and _pinned(daemon, "u")
    assert ca.placement.unpin([(Kind.BLOB, "a/z"), (Kind.BLOB, "u")]) == 2
    with pytest.raises(PermissionDeniedError):  # a change through a read-only grant
        ca.placement.pin([(Kind.BLOB, "shared/x")])
    assert not _pinned(daemon, "shared/x")
    ra.placement.pin([(Kind.BLOB, "shared/x")])
    with pytest.raises(PermissionDeniedError):
        ca.placement.unpin([(Kind.BLOB, "u"), (Kind.BLOB, "shared/x")])
    assert _pinned(daemon, "shared/x")
    # a trusted tool pins and unpins anything
    assert client.placement.unpin([(Kind.BLOB, "shared/x")]) == 1
