"""A move to the remote tier that finds the object's record gone when it comes
to release the SSD copy moves nothing (as a demotion to SSD does since
50f8049): it used to place the entry on the remote tier still naming the SSD
copy the record no longer had. The value it uploaded is deleted again. Runs
against an in-memory backend (no peer needed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore, daemon_on
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.catalog.catalog import SEG_NONE
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier

KEY = ObjectKey("default", ServerKind.KV_BLOCK, "block").encode()


def test_a_move_to_the_remote_tier_whose_record_is_gone_moves_nothing(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    a = daemon_on(store, make_daemon, monkeypatch, share=False)
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "block", b"1" * 4096)
        assert a.mover.move(KEY, ServerTier.SSD)
        before = a.store.catalog.find(KEY)
        assert before is not None and before.seg != SEG_NONE
        monkeypatch.setattr(a.store.catalog, "stage_ssd_location", lambda *_a: False)
        assert not a.mover.move(KEY, ServerTier.REMOTE)
        after = a.store.catalog.find(KEY)
        assert after is not None and after.same_copy(before) and not after.remote_copy
        a.maintain()
        assert not store.values  # the upload was deleted again
        assert c.get(Kind.KV_BLOCK, "block") == b"1" * 4096
