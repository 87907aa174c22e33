"""When a blob put fails before its record is applied, each of its cleanups
runs on its own: a removal of the adopted payload that raises (an OSError from
the payload store) is logged, the embedding spaces the put registered are
still dropped, and the client gets the put's own error. Before, the payload
removal ran first and unguarded: its OSError replaced the put's error and the
new spaces stayed registered (listed by BlobStats, counted against
``blobs.max_spaces``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

from tiermem.client import CapacityError, Client, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded

LIGHT = {
    "agent": {"scratch": {"embedder": "hash"}},
    "blobs": {"text_embedder": "off"},
}


def test_a_put_whose_payload_removal_fails_still_drops_its_spaces_and_keeps_its_error(
    make_daemon: Callable[..., Daemon],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    daemon = make_daemon("p", **LIGHT)
    blobs = daemon.blobs
    shared = np.linspace(-1, 1, 8).astype(np.float32)
    fresh = np.linspace(0, 1, 6).astype(np.float32)
    with Client(daemon.address, timeout_s=30) as c:
        c.blobs.put("kept.bin", b"k" * 100, embeddings={"shared": shared})

        def refused() -> int:  # the put registered its spaces, then its commit fails
            raise CapacityExceeded("injected: refused at commit")

        def delete_fails(sha: bytes) -> None:
            raise OSError("injected: the payload could not be removed")

        monkeypatch.setattr(blobs.catalog, "next_uid", refused)
        monkeypatch.setattr(blobs.payloads, "delete", delete_fails)
        with caplog.at_level(logging.ERROR), pytest.raises(CapacityError, match="injected"):
            c.blobs.put("a.bin", b"a" * 1000, embeddings={"shared": shared, "fresh": fresh})
        assert any("injected: the payload" in str(r.exc_info) for r in caplog.records)
        monkeypatch.undo()
        with pytest.raises(NotFoundError):
            c.blobs.stat("a.bin")
        assert list(c.blobs.stats().spaces) == ["shared"]
        assert blobs.catalog.spaces() == {"shared": 8}
