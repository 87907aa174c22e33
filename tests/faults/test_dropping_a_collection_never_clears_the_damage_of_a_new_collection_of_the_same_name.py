"""Dropping a vector collection clears its entry in the damage register, which
is keyed by the collection's name (``namespace/VECTOR/name``). The drop used to
clear it after leaving the registry, with no lock held: a new collection of
the same name created in that window, whose snapshot was then found damaged
(by online fsck or by a load), had its damage cleared by the old one's drop.
Its damaged current snapshot was then neither listed by fsck's known damage
nor counted in ``tiermem_damaged_objects``, and maintenance, which asks the
register, would no longer rewrite it from memory. Until the drop's clearing,
the new collection was also listed as damaged for the old one's snapshot.
The drop now clears the name under the registry lock, in the same step as
removing the collection's record and registry entry, so a collection of that
name can be created only after it.

The interleaving is forced, not hoped for: the drop runs in its own thread
and its clearing of the name is hooked to wait while the test creates the new
collection, damages its snapshot and has it found damaged; unless the drop
holds the registry lock there (then creating the new collection must wait
for the drop: waiting for it would deadlock). Before the fix the hook always
waited and the drop then cleared the new collection's damage."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from tests.faults.flips import damaged_gauge, flip_current_snapshot
from tests.faults.locks import OwnedLock
from tests.vectors.conftest import VECTOR_CONFIG, clustered
from tiermem.client import ChecksumError, Client
from tiermem.server.app import Daemon
from tiermem.server.vectors.types import damage_name

N, D = 300, 8
NAME = damage_name("default", "c")
WAIT_S = 30.0


def create_damaged(c: Client, daemon: Daemon, seed: int) -> None:
    """Collection "c", unloaded (its snapshot holds the only copy), damaged."""
    c.vectors.create("c", D, index="flat")
    c.vectors.upsert("c", np.arange(N), clustered(N, D, seed=seed))
    assert c.vectors.unload("c")
    flip_current_snapshot(daemon)


@pytest.mark.parametrize("found_by", ["fsck", "load"])
def test_dropping_a_collection_never_clears_the_damage_of_a_new_collection_of_the_same_name(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch, found_by: str
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    q = clustered(5, D, seed=9)
    vectors, damage = daemon.vectors, daemon.store.damage
    registry_lock = OwnedLock()
    monkeypatch.setattr(vectors, "_lock", registry_lock)
    real_discard = damage.discard_named
    at_discard, go = threading.Event(), threading.Event()

    def hooked_discard(name: str) -> None:
        if threading.current_thread().name == "racing-drop" and name == NAME:
            at_discard.set()
            if not registry_lock.held_here():
                assert go.wait(WAIT_S), "the test never let the drop go on"
        real_discard(name)

    monkeypatch.setattr(damage, "discard_named", hooked_discard)

    with Client(daemon.address) as c:
        # the old collection is damaged too: dropping it and creating it again
        # is what the DATA_LOSS message tells the operator to do
        create_damaged(c, daemon, seed=1)
        with pytest.raises(ChecksumError):
            c.vectors.search("c", q, 5)
        assert damage.has_named(NAME)

        dropped: list[bool] = []
        drop = threading.Thread(
            target=lambda: dropped.append(vectors.drop("default", "c")),
            name="racing-drop",
            daemon=True,
        )
        drop.start()
        try:
            assert at_discard.wait(WAIT_S), "the drop never cleared the collection's damage"
            # the new collection of the same name, while the drop is held there
            # (or, if it holds the registry lock, once it has finished)
            c.vectors.create("c", D, index="flat")
            listed_when_created = damage.has_named(NAME)
            c.vectors.upsert("c", np.arange(N), clustered(N, D, seed=2))
            assert c.vectors.unload("c")
            flip_current_snapshot(daemon)
            if found_by == "fsck":
                result = c.integrity.check()
                assert [(d.key, d.where) for d in result.damaged] == [("c", "vectors")]
            else:
                with pytest.raises(ChecksumError):
                    c.vectors.search("c", q, 5)
        finally:
            go.set()
            drop.join(WAIT_S)
        assert not drop.is_alive(), "the drop did not finish"
        assert dropped == [True]

        # the new collection's current snapshot is damaged: listed and counted
        assert damage.has_named(NAME), "the drop cleared the new collection's damage"
        assert [d.key for d in daemon.integrity.known_damage()] == [NAME]
        assert damaged_gauge(daemon) == 1
        with pytest.raises(ChecksumError):
            c.vectors.search("c", q, 5)
        # and it was not listed for the old collection's damage when created
        assert not listed_when_created
