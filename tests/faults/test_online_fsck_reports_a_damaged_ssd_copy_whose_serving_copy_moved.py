"""Online fsck (``check_online``) verifies each object's SSD copy without the
lock and, on a failure, re-checks under the lock that the object still has
*that SSD copy* before registering damage. The serving copy moving between
tiers meanwhile (a durable object's memory copy dropped, or promoted) leaves
the SSD copy, and its damage, as they were: it is reported. Before, the
re-check compared the whole copy (tier and location too), so damage on an
unchanged SSD copy was skipped whenever the object's memory copy moved
during the check; later, once the memory copy was gone, reads answered
DATA_LOSS for an object fsck had called intact."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.flips import flip
from tiermem.client import Client, Durability, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier
from tiermem.server.services import integrity

DURABLE_IN_DRAM = Profile(durability=Durability.DURABLE, preferred_tier=Tier.DRAM)


def test_damage_on_an_unchanged_ssd_copy_is_reported_when_the_memory_copy_moved(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon()
    encoded = ObjectKey("default", ServerKind.BLOB, "v").encode()
    with Client(daemon.address) as c:
        c.put(Kind.BLOB, "v", b"x" * 300_000, profile=DURABLE_IN_DRAM)
        entry = daemon.store.catalog.find(encoded)
        assert entry is not None and entry.tier == ServerTier.DRAM and entry.persisted
        segment = Path(daemon.config.data_dir) / "segments" / f"seg-{entry.seg:010d}.dat"
        flip(segment, entry.seg_off + 1000)  # the SSD copy only; DRAM serves good bytes

        real = integrity.verify_copy

        def verify_then_drop_the_memory_copy(*args: object, **kw: object) -> object:
            problem = real(*args, **kw)  # type: ignore[arg-type]
            # meanwhile the memory copy is dropped: served from the SSD copy now
            assert daemon.mover.move(encoded, ServerTier.SSD)
            return problem

        monkeypatch.setattr(integrity, "verify_copy", verify_then_drop_the_memory_copy)
        result = c.integrity.check()
        now = daemon.store.catalog.find(encoded)
        assert now is not None and now.tier == ServerTier.SSD and now.same_ssd_copy(entry)
        assert [(d.key, d.where) for d in result.damaged] == [("v", "segment")]
        assert encoded in daemon.store.damage
