"""Pin re-checks every key under the lock it pins under (a key may have been
deleted, or taken by another session's object, since the first check). A key
that fails that second check refuses the whole call, and then nothing is
pinned, as its NOT_FOUND says. Before, the keys were re-checked and pinned one
by one: the keys before the failing one stayed pinned."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tiermem.client import Client, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import ObjectKey

KEYS = ["p/first", "p/second", "p/third"]


def _pinned(daemon: Daemon, key: str) -> bool:
    entry = daemon.store.catalog.find(ObjectKey("default", Kind.BLOB, key).encode())
    assert entry is not None
    return bool(entry.pinned)


def test_a_key_that_fails_its_second_check_leaves_no_key_pinned(
    daemon: Daemon, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = client.sessions.open(label="main")
    own = client.as_session(root.id)
    for key in KEYS:
        own.put(Kind.BLOB, key, b"v" * 64)
    placement = daemon.placement
    real = placement._changeable_locked
    checks: Counter[bytes] = Counter()
    last = ObjectKey("default", Kind.BLOB, KEYS[-1]).encode()

    def changeable(enc: bytes, *args: Any, **kw: Any) -> bool:
        checks[enc] += 1
        if enc == last and checks[enc] == 2:  # the last key, when pinning
            return False  # (as if another session's object had taken it)
        return real(enc, *args, **kw)

    monkeypatch.setattr(placement, "_changeable_locked", changeable)
    with pytest.raises(NotFoundError):
        own.placement.pin([(Kind.BLOB, k) for k in KEYS])
    assert checks[last] == 2  # refused by the second check
    assert [k for k in KEYS if _pinned(daemon, k)] == []
    monkeypatch.undo()
    assert len(own.placement.pin([(Kind.BLOB, k) for k in KEYS])) == len(KEYS)
    assert all(_pinned(daemon, k) for k in KEYS)
