import numpy as np

from tiermem.server.catalog import records
from tiermem.server.catalog.index import SEG_INLINE, SEG_NONE, key_hash
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
            meta(i, i % 3 == 0), f"key{i}".encode(), 5, (i if i % 2 else SEG_INLINE), i * 4096
        )
        for i in range(6)
    ]
    raws.append(records.encode(meta(9, False), b"key9", 5, SEG_NONE, 0))
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
        hi, lo = key_hash(f"key{i if i < 6 else 9}".encode())
        assert (int(h["key_hi"][i]), int(h["key_lo"][i]), int(h["key_len"][i])) == (hi, lo, 4)
        assert records.encoded_key_of(rec) == rec_key(rec)
    assert bool(h["flags"][2] & 4)  # pinned


def rec_key(rec: records.StoredRecord) -> bytes:
    k = rec.meta.key
    return ObjectKey(k.namespace, Kind(k.kind), k.key).encode()


def test_patching_the_ssd_location_keeps_the_metadata() -> None:
    raw = records.encode(meta(1, False), b"k1", 1, SEG_NONE, 0)
    moved = records.decode(records.with_ssd_location(raw, 42, 8192))
    assert moved.on_ssd and moved.seg == 42 and moved.seg_off == 8192
    assert moved.meta.tensor.shape == [2, 251]
    unpinned = records.decode(
        records.with_pinned(records.encode(meta(2, True), b"k2", 1, 3, 0), False)
    )
    assert not unpinned.flags & 4 and unpinned.flags & 2


def test_vectorised_segment_accounting_matches_entry_bytes() -> None:
    key_len = np.array([1, 30, 1000, 5], dtype=np.int64)
    size = np.array([0, 4096, 1 << 20, 123_457], dtype=np.int64)
    expected = [entry_bytes(int(k), int(s)) for k, s in zip(key_len, size, strict=True)]
    assert list(_aligned_entry_bytes(key_len, size)) == expected
