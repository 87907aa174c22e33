"""Get replies reuse the catalog record's own metadata message (with the live
fields set) instead of converting the object's metadata back: what a reader
gets must be exactly what converting would give — tensor, session, version,
profile, and the live tier, pin, persisted flag and access time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tiermem.client import AccessHint, ChecksumError, Client, Durability, Kind, Profile, Tier, _wire
from tiermem.client.fastpath import ObjectRef
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier
from tiermem.server.protoconv import meta_to_proto


def test_the_wire_metadata_of_a_read_equals_the_converted_metadata(
    daemon: Daemon, client: Client
) -> None:
    tensor = np.arange(64 * 1024, dtype=np.float16).reshape(256, 256)
    client.put(Kind.KV_BLOCK, "t", tensor, dtype="float16", shape=(256, 256))
    client.put(Kind.KV_BLOCK, "t", tensor, dtype="float16", shape=(256, 256))  # version 2
    client.put(
        Kind.BLOB,
        "b",
        b"blob" * 1000,
        profile=Profile(hint=AccessHint.COLD, durability=Durability.DURABLE),
    )
    client.placement.pin([(Kind.KV_BLOCK, "t")], tier=Tier.DRAM)
    keys = [ObjectKey("default", Kind.KV_BLOCK, "t"), ObjectKey("default", Kind.BLOB, "b")]
    for _ in range(2):  # the second read sees the access time the first one set
        readers = daemon.objects.read_many(keys)
        try:
            for reader in readers:
                assert reader.wire is not None
                assert reader.wire == meta_to_proto(reader.meta)
            kv = readers[0].wire
            assert kv is not None
            assert kv.version == 2 and kv.profile.pin and list(kv.tensor.shape) == [256, 256]
        finally:
            for reader in readers:
                reader.release()
    fetched = client.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "t")], path="bulk")[0]
    stat = client.stat(Kind.KV_BLOCK, "t")
    assert bytes(fetched.data) == tensor.tobytes()
    info = fetched.info
    assert (info.version, info.tier, info.profile.pin, info.shape) == (
        2,
        Tier.DRAM,
        True,
        (256, 256),
    )
    assert (info.tier, info.persisted, info.profile) == (stat.tier, stat.persisted, stat.profile)


@pytest.mark.parametrize("path", ["bulk", "shm"])
def test_a_get_converts_metadata_only_when_it_is_read(
    daemon: Daemon, client: Client, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Values read into the caller's buffers do not pay for converting their
    metadata; ``info`` made later is the same as at once. A reply with inline
    values converts at once (a result must not keep the reply's values alive)."""
    values = [bytes([i]) * (256 << 10) for i in range(4)]
    for i, v in enumerate(values):
        client.put(Kind.KV_BLOCK, f"lazy-{i}", v)
    client.put(Kind.KV_BLOCK, "tiny", b"inline")
    converted: list[object] = []
    convert = _wire.info
    monkeypatch.setattr(_wire, "info", lambda meta: converted.append(meta) or convert(meta))

    refs = [ObjectRef(Kind.KV_BLOCK, f"lazy-{i}") for i in range(4)]
    outs = [bytearray(256 << 10) for _ in values]
    got = client.dataplane.get_many(refs, out=outs, path=path)
    assert [bytes(g.data) for g in got] == values and not converted
    assert [g.info.key for g in got] == [f"lazy-{i}" for i in range(4)]
    assert len(converted) == 4
    stat = client.stat(Kind.KV_BLOCK, "lazy-2")
    assert got[2].info == dataclasses.replace(stat, accessed_unix_ms=got[2].info.accessed_unix_ms)

    converted.clear()  # a caller that allocates by the metadata converts it once
    got = client.dataplane.get_many(
        refs, allocate=lambda info, i: memoryview(bytearray(info.size_bytes)), path=path
    )
    assert [bytes(g.data) for g in got] == values
    assert [g.info.key for g in got] == [f"lazy-{i}" for i in range(4)] and len(converted) == 4

    converted.clear()
    got = client.dataplane.get_many([*refs[:1], ObjectRef(Kind.KV_BLOCK, "tiny")], path=path)
    assert bytes(got[1].data) == b"inline" and len(converted) == 2


def test_a_bulk_get_of_damaged_bytes_raises_naming_the_object(
    daemon: Daemon, client: Client
) -> None:
    """The client checks a value against the daemon's checksum before it hands
    it over, without the metadata converted; the error names the object."""
    client.put(Kind.KV_BLOCK, "rot", b"\x07" * (256 << 10))
    entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.KV_BLOCK, "rot").encode())
    assert entry is not None and entry.tier == ServerTier.DRAM
    dram = daemon.store.memory[ServerTier.DRAM]
    dram.write_view(entry.loc, entry.size)[100] ^= 0xFF  # rots after the put
    with pytest.raises(ChecksumError, match="default/KV_BLOCK/rot arrived damaged"):
        client.dataplane.get_many(
            [ObjectRef(Kind.KV_BLOCK, "rot")], out=[bytearray(256 << 10)], path="bulk"
        )
