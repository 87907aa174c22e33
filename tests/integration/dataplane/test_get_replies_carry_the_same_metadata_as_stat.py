"""Get replies reuse the catalog record's own metadata message (with the live
fields set) instead of converting the object's metadata back: what a reader
gets must be exactly what converting would give — tensor, session, version,
profile, and the live tier, pin, persisted flag and access time."""

from __future__ import annotations

import numpy as np

from tiermem.client import AccessHint, Client, Durability, Kind, Profile, Tier
from tiermem.client.fastpath import ObjectRef
from tiermem.server.app import Daemon
from tiermem.server.model import ObjectKey
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
