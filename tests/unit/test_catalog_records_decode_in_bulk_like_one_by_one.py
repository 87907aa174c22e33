import numpy as np

from tiermem.server.catalog import records
from tiermem.server.catalog.index import SEG_INLINE, SEG_NONE
from tiermem.server.model import Durability, Kind, ObjectKey, ObjectMeta, Profile, TensorInfo, Tier
from tiermem.server.services.recovery import _aligned_entry_bytes
from tiermem.server.tiers.segments import entry_bytes


def meta(i: int, durable: bool) -> ObjectMeta:
    return ObjectMeta(
        key=ObjectKey("ns", Kind.KV_BLOCK, f"k{i}"),
        size_bytes=1000 + i,
        checksum=(1 << 63) + i,
        profile=Profile(durability=Durability.DURABLE if durable else Durability.CACHE, pin=i == 2),
        tier=Tier.DRAM,
        session="s" if i % 2 else "",
        tensor=TensorInfo("bfloat16", (2, 250 + i)),
        expires_unix_ms=i * 7,
    )


def test_encode_decode_round_trip_and_bulk_headers() -> None:
    raws = [
        records.encode(
            meta(i, i % 3 == 0), ns_id=5, seg=(i if i % 2 else SEG_INLINE), seg_off=i * 4096
        )
        for i in range(6)
    ]
    raws.append(records.encode(meta(9, False), ns_id=5, seg=SEG_NONE, seg_off=0))
    h = records.headers(raws)
    for i, raw in enumerate(raws):
        rec = records.decode(raw)
        assert rec.meta.key.key == (f"k{i}" if i < 6 else "k9")
        assert int(h["seg"][i]) == rec.seg and int(h["seg_off"][i]) == rec.seg_off
        assert int(h["size"][i]) == rec.meta.size_bytes
        assert int(h["checksum"][i]) == rec.meta.checksum.value
        assert int(h["expires"][i]) == rec.meta.expires_unix_ms
        assert bool(h["flags"][i] & records.FLAG_ON_SSD) == rec.on_ssd == (i < 6)
        assert int(h["ns"][i]) == 5
    assert bool(h["flags"][2] & 4)  # pinned


def test_patching_the_ssd_location_keeps_the_metadata() -> None:
    raw = records.encode(meta(1, False), ns_id=1, seg=SEG_NONE, seg_off=0)
    moved = records.decode(records.with_ssd_location(raw, 42, 8192))
    assert moved.on_ssd and moved.seg == 42 and moved.seg_off == 8192
    assert moved.meta.tensor.shape == [2, 251]
    unpinned = records.decode(records.with_pinned(records.encode(meta(2, True), 1, 3, 0), False))
    assert not unpinned.flags & 4 and unpinned.flags & 2


def test_vectorised_segment_accounting_matches_entry_bytes() -> None:
    key_len = np.array([1, 30, 1000, 5], dtype=np.int64)
    size = np.array([0, 4096, 1 << 20, 123_457], dtype=np.int64)
    expected = [entry_bytes(int(k), int(s)) for k, s in zip(key_len, size, strict=True)]
    assert list(_aligned_entry_bytes(key_len, size)) == expected
