"""A collection created under a name whose old collection is being dropped
keeps its durable record. The drop used to take the name out of the registry
first and delete the record (keyed by name) once it held the old collection's
write lock (behind a search, say): the late delete erased a new collection's
record and a kill -9 lost it. Now the name stays taken until the old record
is gone (so a failed drop can be retried): a create meanwhile is refused, one
after the drop keeps its record. Also: ``create(if_absent=True)`` of an
existing collection answers it (it took the service's lock twice and hung
every vector call)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tiermem.client import AlreadyExistsError, Client
from tiermem.server.app import Daemon


def test_the_new_collections_record_outlives_the_old_ones_drop(
    vdaemon: Daemon, vclient: Client
) -> None:
    c = vclient
    c.vectors.create("r", 4, index="flat")
    c.vectors.upsert("r", [0], np.ones((1, 4)))
    old = vdaemon.vectors._collections[("default", "r")]
    with old.lock.read():  # a search on the old collection, still running
        dropping = threading.Thread(target=vdaemon.vectors.drop, args=("default", "r"))
        dropping.start()
        time.sleep(0.2)  # the drop waits for the search
        with pytest.raises(AlreadyExistsError):  # the name is not free before the drop ends
            c.vectors.create("r", 4, index="flat")
    dropping.join(10)
    assert not dropping.is_alive()
    c.vectors.create("r", 4, index="flat")  # acknowledged
    c.vectors.upsert("r", [7], np.full((1, 4), 2.0))
    new = vdaemon.vectors._collections[("default", "r")]
    assert new is not old
    records = {r.name: r.id for r in vdaemon.vectors.log.collection_records()}
    assert records.get("r") == new.record.id  # what a restart after kill -9 reads
    assert c.vectors.count("r") == 1


def test_create_if_absent_of_an_existing_collection_answers_it(vclient: Client) -> None:
    c = vclient
    first = c.vectors.create("x", 4, index="flat", if_absent=True)
    again = c.vectors.create("x", 4, index="flat", if_absent=True, timeout_s=10)
    assert again.name == first.name == "x"
    with pytest.raises(AlreadyExistsError):
        c.vectors.create("x", 8, index="flat", if_absent=True, timeout_s=10)
    assert c.vectors.count("x", timeout_s=10) == 0  # the service still answers
