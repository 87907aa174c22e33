"""Collections owned by a session are dropped together (the sessions service
calls ``VectorService.drop_session``); nothing of them is left on disk."""

from __future__ import annotations

import numpy as np

from tiermem.client import Client, NotFoundError
from tiermem.server.app import Daemon


def test_drop_session_drops_only_that_sessions_collections(
    vdaemon: Daemon, vclient: Client
) -> None:
    vclient.create_namespace("other")
    x = np.eye(4, dtype=np.float32)
    for name, session, ns in (
        ("a", "s1", "default"),
        ("b", "s1", "default"),
        ("c", "s2", "default"),
        ("d", "", "default"),
        ("e", "s1", "other"),
    ):
        vclient.vectors.create(name, 4, session=session, namespace=ns)
        vclient.vectors.upsert(name, [1, 2, 3, 4], x, namespace=ns)
    vclient.vectors.unload("b")  # one of them only on SSD
    assert [i.name for i in vclient.vectors.list(session="s1")] == ["a", "b"]
    snapshots = vdaemon.config.data_dir / "vectors"
    assert len(list(snapshots.iterdir())) == 1  # b's snapshot folder

    assert vdaemon.vectors.drop_session("s1", namespace="default") == 2
    assert [i.name for i in vclient.vectors.list()] == ["c", "d"]
    assert list(snapshots.iterdir()) == []
    try:
        vclient.vectors.search("a", x[:1], 1)
        raise AssertionError("a dropped collection answered")
    except NotFoundError:
        pass
    assert vclient.vectors.count("e", namespace="other") == 4  # other namespace untouched
    assert vdaemon.vectors.drop_session("s1") == 1  # all namespaces
    # A dropped name can be created afresh, empty.
    vclient.vectors.create("a", 4)
    assert vclient.vectors.count("a") == 0
