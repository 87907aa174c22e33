"""Property-based: random sequences of put / get / overwrite / delete against
the object service, interleaved with demotion, compaction and restarts, always
agree with a plain dict (CACHE objects may vanish at a restart if they had no
SSD copy, and when making room in memory evicts them rather than writing them to
SSD, as a cache does; DURABLE ones never), and the per-namespace accounting
matches what is listed."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config
from tiermem.server.app import Daemon
from tiermem.server.errors import NotFound
from tiermem.server.model import Durability, Kind, ObjectKey, Profile, Tier
from tiermem.server.services.objects import PutSpec

KEYS = [f"k{i}" for i in range(6)]
SIZES = [0, 1, 100, 4095, 16_384, 65_536, 65_537, 200_000, 600_000]
KINDS = [Kind.KV_BLOCK, Kind.BLOB, Kind.SCRATCH]


class ObjectStoreMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tiermem-model-"))
        self.config = daemon_config(
            self.dir,
            tiers={
                "dram": {"capacity_bytes": 1 << 20, "arena_min_bytes": 16_384},
                "ssd": {"segment_bytes": 1 << 20, "compaction_live_ratio": 0.9},
            },
            background={"migrate_interval_s": 3600, "compaction_interval_s": 3600},
        )
        self.daemon = Daemon(self.config, registry=CollectorRegistry())
        self.daemon.start()
        self.model: dict[ObjectKey, bytes] = {}
        self.durable: set[ObjectKey] = set()
        self.restarts = 0
        self.counter = 0

    def teardown(self) -> None:
        if hasattr(self, "daemon"):
            self.daemon.stop(grace_s=0)
            shutil.rmtree(self.dir, ignore_errors=True)

    def _value(self, size: int) -> bytes:
        self.counter += 1
        return (self.counter.to_bytes(4, "little") * (size // 4 + 1))[:size]

    @rule(
        key=st.sampled_from(KEYS),
        kind=st.sampled_from(KINDS),
        size=st.sampled_from(SIZES),
        durable=st.booleans(),
        tier=st.sampled_from([None, Tier.DRAM, Tier.SSD]),
    )
    def put(self, key: str, kind: Kind, size: int, durable: bool, tier: Tier | None) -> None:
        okey = ObjectKey("default", kind, key)
        data = self._value(size)
        profile = Profile(
            durability=Durability.DURABLE if durable else Durability.CACHE, preferred_tier=tier
        )
        meta = self.daemon.objects.put(
            PutSpec(okey, size, profile), [data[: size // 2], data[size // 2 :]]
        )
        assert meta.size_bytes == size
        self.model[okey] = data
        if durable:
            self.durable.add(okey)
        else:
            self.durable.discard(okey)
        self._forget_evicted()  # making room for this put may evict CACHE objects

    @rule(key=st.sampled_from(KEYS), kind=st.sampled_from(KINDS))
    def get(self, key: str, kind: Kind) -> None:
        okey = ObjectKey("default", kind, key)
        try:
            _meta, data = self.daemon.objects.get_bytes(okey)
        except NotFound:
            assert okey not in self.model
            return
        assert data == self.model[okey]

    @rule(key=st.sampled_from(KEYS), kind=st.sampled_from(KINDS))
    def delete(self, key: str, kind: Kind) -> None:
        okey = ObjectKey("default", kind, key)
        freed = self.daemon.objects.delete(okey)
        assert (freed is not None) == (okey in self.model)
        self.model.pop(okey, None)
        self.durable.discard(okey)

    @rule()
    def demote(self) -> None:
        self.daemon.placement.make_room(Tier.DRAM, 1 << 20)
        self._forget_evicted()

    def _forget_evicted(self) -> None:
        for k in list(self.model):
            try:
                self.daemon.objects.stat(k)
            except NotFound:
                # the planner may evict a CACHE object instead of writing it to
                # SSD when that write does not pay for itself; never a DURABLE one
                assert k not in self.durable
                del self.model[k]

    @rule()
    def compact(self) -> None:
        self.daemon.mover.compact()

    @precondition(lambda self: self.restarts < 2)
    @rule()
    def restart(self) -> None:
        volatile = {k for k in self.model if not self.daemon.objects.stat(k).persisted}
        self.daemon.stop(grace_s=0)
        self.daemon = Daemon(self.config, registry=CollectorRegistry())
        self.daemon.start()
        self.restarts += 1
        for k in volatile:
            assert k not in self.durable
            del self.model[k]

    @invariant()
    def listing_and_accounting_match_the_model(self) -> None:
        if not hasattr(self, "daemon"):
            return
        metas, _token = self.daemon.objects.list("default", None, "", "", 1000, "")
        assert {m.key for m in metas} == set(self.model)
        sizes = {m.key: m.size_bytes for m in metas}
        assert all(sizes[k] == len(v) for k, v in self.model.items())
        assert self.daemon.store.catalog.namespace_usage("default") == (
            len(self.model),
            sum(len(v) for v in self.model.values()),
        )


ObjectStoreMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_service_layer_matches_a_model_dict = ObjectStoreMachine.TestCase
