"""Vector collections a session owns follow the rules of its objects: a
session creates collections only as itself, a closed session owns no new
collection (none of its closes would ever drop it), the collections count in
the session's usage, and closing it reports their bytes freed. Before, any
caller could name any session as the owner, and the close report counted the
number of collections as DRAM bytes."""

from __future__ import annotations

import numpy as np
import pytest

from tiermem.client import Client, NotFoundError, PermissionDeniedError, Tier


def test_closing_reports_the_collections_bytes(aclient: Client) -> None:
    s = aclient.sessions.open(label="rag")
    x = np.random.default_rng(0).standard_normal((1000, 64)).astype(np.float32)
    aclient.vectors.create("owned", 64, session=s.id, index="flat")
    aclient.vectors.upsert("owned", list(range(1000)), x)
    held = aclient.sessions.describe(s.id).usage[Tier.DRAM]
    assert held[0] >= x.nbytes and held[1] >= 1  # (bytes, items), the collection included
    report = aclient.sessions.close(s.id)
    assert report.freed[Tier.DRAM] >= x.nbytes
    with pytest.raises(NotFoundError):
        aclient.vectors.describe("owned")


def test_a_closed_session_owns_no_new_collection(aclient: Client) -> None:
    s = aclient.sessions.open(label="rag")
    aclient.sessions.close(s.id)
    with pytest.raises(NotFoundError, match="closed"):
        aclient.vectors.create("orphan", 8, session=s.id)
    with pytest.raises(NotFoundError):
        aclient.vectors.describe("orphan")


def test_a_session_creates_collections_only_as_itself(aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    a = aclient.sessions.open(parent=root.id, label="a")
    b = aclient.sessions.open(parent=root.id, label="b")
    with pytest.raises(PermissionDeniedError, match="only as itself"):
        aclient.as_session(a.id).vectors.create("planted", 8, session=b.id)
    made = aclient.as_session(a.id).vectors.create("mine", 8)  # owned by a
    assert made.session == a.id
