"""``RemoteTier.read_into`` lands payloads straight in buffers the caller
gives (``place``), on the remote tier's threads. Every buffer given is either
answered (a LandedValue, the caller's to verify and keep) or handed back
(``drop``), and never while a read may still write into it: a part given up on
at its deadline keeps its buffers until its read returns; a failed attempt
gives back what it placed before the next one. A landed payload is checked
against its checksum (DATA_LOSS otherwise). Runs against an in-memory backend
that lands values the way the Redis reader does (no peer needed)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import xxhash
from prometheus_client import CollectorRegistry

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore
from tiermem.server.config import RemoteTierConfig
from tiermem.server.errors import Corrupted, Unavailable
from tiermem.server.metrics import Metrics
from tiermem.server.model import Kind, ObjectKey, ObjectMeta, Profile, Tier
from tiermem.server.tiers.remote import RemoteError, RemoteValue
from tiermem.server.tiers.remote.base import LANDED, Landed, Lander
from tiermem.server.tiers.remote.codec import (
    FIXED_HEAD_BYTES,
    FIXED_HEAD_MIN_PAYLOAD_BYTES,
    encode_header,
    remote_name,
)
from tiermem.server.tiers.remote.engine import LandedValue, RemoteTier

DEPLOYMENT = "unit"


class LandingStore(FlakyStore):
    """Values in memory, landed past their head like the Redis reader does (or
    placed whole before reading, like Mooncake: ``before_head``). ``gate``: each read
    waits for it after placing (a slow store); ``failing``: that many reads
    fail after placing."""

    name = "landing"

    def __init__(self) -> None:
        super().__init__(failing_puts=0)
        self.gate: threading.Event | None = None
        self.failing = 0
        self.reads = 0
        self.before_head = False

    def get_many_into(
        self, names: Sequence[str], lander: Lander
    ) -> list[tuple[memoryview, object] | Landed | None]:
        self.reads += 1
        out: list[tuple[memoryview, object] | Landed | None] = []
        targets: list[tuple[memoryview, bytes]] = []
        for i, name in enumerate(names):
            value = self.values.get(name)
            if value is None:
                out.append(None)
                continue
            view = memoryview(value)
            if self.before_head:
                spot = lander.target_whole(i, len(value))
                if spot is None:
                    out.append((view, None))
                    continue
                length, whole = spot
                whole[:] = value  # one transfer: head and payload together
                if not lander.head_read(i, whole[:length], len(value)):
                    # answered as it landed; the placed buffer is given back
                    out.append((memoryview(bytes(whole)), None))
                    continue
                out.append(LANDED)
                continue
            else:
                length = lander.head_length(i, view[: lander.head_bytes], len(value))
                target = lander.target(i, view[:length], len(value)) if length > 0 else None
                if target is None:
                    out.append((view, None))
                    continue
            targets.append((target, value[length:]))
            out.append(LANDED)
        if self.gate is not None:
            self.gate.wait(10)
        if self.failing:
            self.failing -= 1
            raise RemoteError("scripted failure")
        for target, payload in targets:
            target[:] = payload
        return out


def _meta(i: int, payload: bytes) -> ObjectMeta:
    return ObjectMeta(
        key=ObjectKey("default", Kind.KV_BLOCK, f"block-{i}"),
        size_bytes=len(payload),
        checksum=xxhash.xxh3_64_intdigest(payload),
        profile=Profile(),
        tier=Tier.DRAM,
    )


def _stored(
    store: LandingStore, n: int, size: int = 4096, fixed: bool = False
) -> tuple[list[bytes], list[bytes]]:
    """``n`` objects in the store: (their encoded keys, their payloads);
    ``fixed``: with heads of fixed size."""
    keys, payloads = [], []
    for i in range(n):
        payload = bytes([i + 1]) * (size + i)
        meta = _meta(i, payload)
        value = encode_header(meta, fixed) + payload
        store.values[remote_name(DEPLOYMENT, meta.key)] = value
        keys.append(meta.key.encode())
        payloads.append(payload)
    return keys, payloads


class Buffers:
    """What the caller of ``read_into`` gives and gets back, by position."""

    def __init__(self) -> None:
        self.given: dict[int, bytearray] = {}
        self.heads: dict[int, int] = {}
        self.dropped: list[int] = []
        self.lock = threading.Lock()
        self.all_dropped = threading.Event()

    def place(self, i: int, key: ObjectKey, size: int, head: int) -> memoryview:
        buf = bytearray(head + size)
        with self.lock:
            self.given[i] = buf
            self.heads[i] = head
        return memoryview(buf)

    def payload(self, i: int) -> memoryview:
        """The payload's part of the buffer given for the i-th value."""
        return memoryview(self.given[i])[self.heads[i] :]

    def drop(self, i: int) -> None:
        with self.lock:
            self.dropped.append(i)
            if len(self.dropped) == len(self.given):
                self.all_dropped.set()


def _tier(store: LandingStore, **config: object) -> RemoteTier:
    cfg = RemoteTierConfig(enabled=True, deployment=DEPLOYMENT, **config)  # type: ignore[arg-type]
    return RemoteTier(cfg, lambda: store, Metrics(CollectorRegistry()))


def test_payloads_land_in_the_buffers_given_and_are_verified_there() -> None:
    store = LandingStore()
    keys, payloads = _stored(store, 3)
    tier = _tier(store)
    buffers = Buffers()
    got = [v for _part, values in tier.read_into(keys, buffers.place, buffers.drop) for v in values]
    assert all(isinstance(v, LandedValue) for v in got)
    for i, (value, payload) in enumerate(zip(got, payloads, strict=True)):
        assert isinstance(value, LandedValue)
        assert bytes(buffers.given[i]) == payload
        tier.check(value.meta, memoryview(buffers.given[i]))
    assert buffers.dropped == []
    buffers.given[1][7] ^= 0xFF  # damaged after it landed
    with pytest.raises(Corrupted):
        assert isinstance(got[1], LandedValue)
        tier.check(got[1].meta, memoryview(buffers.given[1]))
    tier.close()


def test_a_part_given_up_at_its_deadline_keeps_its_buffers_until_its_read_returns() -> None:
    store = LandingStore()
    keys, _payloads = _stored(store, 2)
    store.gate = threading.Event()
    tier = _tier(store, op_timeout_s=0.2, retries=0)
    buffers = Buffers()
    with pytest.raises(Unavailable):
        for _part in tier.read_into(keys, buffers.place, buffers.drop):
            pass
    assert sorted(buffers.given) == [0, 1]
    assert buffers.dropped == []  # the read may still write into them
    store.gate.set()  # the read returns: its buffers are given back
    assert buffers.all_dropped.wait(10)
    tier.close()
    assert sorted(buffers.dropped) == [0, 1]


def test_a_failed_attempt_gives_back_what_it_placed_before_the_next_one() -> None:
    store = LandingStore()
    keys, payloads = _stored(store, 2)
    store.failing = 1
    tier = _tier(store, retries=1)
    buffers = Buffers()
    dropped_before_retry: list[int] = []
    place = buffers.place

    def placing(i: int, key: ObjectKey, size: int, head: int) -> memoryview:
        if store.reads == 2 and not dropped_before_retry:
            dropped_before_retry.extend(buffers.dropped)
        return place(i, key, size, head)

    got = [v for _part, values in tier.read_into(keys, placing, buffers.drop) for v in values]
    assert store.reads == 2
    assert sorted(dropped_before_retry) == [0, 1]
    assert all(isinstance(v, LandedValue) for v in got)
    assert [bytes(buffers.given[i]) for i in range(2)] == payloads
    tier.close()


def test_a_value_whose_head_is_damaged_comes_whole_and_is_data_loss() -> None:
    store = LandingStore()
    keys, _payloads = _stored(store, 2)
    name = next(iter(store.values))
    damaged = bytearray(store.values[name])
    damaged[30] ^= 0xFF  # inside the metadata: its CRC fails
    store.values[name] = bytes(damaged)
    tier = _tier(store)
    buffers = Buffers()
    got = [v for _part, values in tier.read_into(keys, buffers.place, buffers.drop) for v in values]
    assert isinstance(got[0], Corrupted)
    assert isinstance(got[1], LandedValue)
    assert sorted(buffers.given) == [1] and buffers.dropped == []
    tier.close()


def test_a_store_that_places_before_reading_lands_values_whole_with_a_fixed_head() -> None:
    store = LandingStore()
    store.before_head = True
    keys, payloads = _stored(store, 2, size=FIXED_HEAD_MIN_PAYLOAD_BYTES, fixed=True)
    # one written with a head of its own length (an older writer): misplaced at
    # first, then answered whole and still served, byte-exact
    payload = bytes([9]) * (FIXED_HEAD_MIN_PAYLOAD_BYTES + 5000)
    meta = _meta(7, payload)
    store.values[remote_name(DEPLOYMENT, meta.key)] = encode_header(meta) + payload
    tier = _tier(store)
    buffers = Buffers()
    wanted = [*keys, meta.key.encode()]
    got = [v for _part, vs in tier.read_into(wanted, buffers.place, buffers.drop) for v in vs]
    for i in range(2):
        value = got[i]
        assert isinstance(value, LandedValue)
        assert buffers.heads[i] == FIXED_HEAD_BYTES  # the head landed before the payload
        assert bytes(buffers.payload(i)) == payloads[i]
        tier.check(value.meta, buffers.payload(i))
    whole = got[2]
    assert isinstance(whole, RemoteValue) and bytes(whole.payload) == payload
    tier.verify(whole, meta.checksum, meta.size_bytes)
    assert buffers.dropped == [2]  # placed for it, given back
    tier.close()
