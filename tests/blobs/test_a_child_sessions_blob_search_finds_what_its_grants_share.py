"""A child session's blob search returns the blobs its grants let it read (an
ancestor's blobs under a granted key prefix), as get, stat and list do, next
to its own and unowned ones, and never an ancestor's ungranted blobs, a
sibling's, or another namespace's. The search filtered on the owner alone
("" or the caller), so granted blobs were hidden from it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tiermem.client import Client, Grant, Kind
from tiermem.server.app import Daemon

LIGHT = {
    "namespaces": ["default", "other"],
    "agent": {"scratch": {"embedder": "hash"}},
    "blobs": {"text_embedder": "off"},
}


def test_search_returns_granted_blobs_and_nothing_else(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**LIGHT)
    v = np.ones(4, dtype=np.float32)
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        parent = c.as_session(root.id)
        parent.blobs.put("shared/plan.md", b"plan", embeddings={"e": v})
        parent.blobs.put("shared/deep/notes.md", b"notes", embeddings={"e": v})
        parent.blobs.put("private/diary.md", b"diary", embeddings={"e": v})
        child = c.sessions.open(parent=root.id, label="sub", grants=[Grant(Kind.BLOB, "shared/")])
        sibling = c.sessions.open(parent=root.id, label="other")
        c.as_session(sibling.id).blobs.put("shared/sibling.md", b"sib", embeddings={"e": v})
        c.blobs.put("unowned.md", b"any", embeddings={"e": v})
        c.blobs.put("shared/elsewhere.md", b"x", namespace="other", embeddings={"e": v})
        as_child = c.as_session(child.id)
        as_child.blobs.put("mine.md", b"mine", embeddings={"e": v})

        listed = sorted(i.key for i in as_child.blobs.list())
        found = sorted(h.info.key for h in as_child.blobs.search(vector=v, space="e", k=20))
        expected = ["mine.md", "shared/deep/notes.md", "shared/plan.md", "unowned.md"]
        assert listed == expected
        assert found == expected
        assert as_child.blobs.get("shared/plan.md") == b"plan"
        by_owner = as_child.blobs.search(vector=v, space="e", k=20, session=root.id)
        assert sorted(h.info.key for h in by_owner) == ["shared/deep/notes.md", "shared/plan.md"]
        # the sibling, without grants, sees only its own and unowned blobs
        sib = c.as_session(sibling.id).blobs.search(vector=v, space="e", k=20)
        assert sorted(h.info.key for h in sib) == ["shared/sibling.md", "unowned.md"]
