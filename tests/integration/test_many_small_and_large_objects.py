import hashlib
import os

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon


def test_ten_thousand_small_objects(client: Client) -> None:
    for i in range(10_000):
        client.put(Kind.SCRATCH, f"small-{i}", i.to_bytes(4, "little") * 16)
    for i in range(0, 10_000, 97):
        assert client.get(Kind.SCRATCH, f"small-{i}") == i.to_bytes(4, "little") * 16
    assert sum(1 for _ in client.list(kind=Kind.SCRATCH, page_size=1000)) == 10_000


def test_twenty_32_mib_objects_spill_past_dram_and_read_back(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(tiers={"dram": {"capacity_bytes": 128 << 20}})
    digests = {}
    with Client(daemon.address, timeout_s=120) as client:
        for i in range(20):
            data = os.urandom(32 << 20)
            digests[i] = hashlib.sha256(data).digest()
            client.put(Kind.KV_BLOCK, f"big-{i}", data)
        for i in range(20):
            assert hashlib.sha256(client.get(Kind.KV_BLOCK, f"big-{i}")).digest() == digests[i]
        stats = {t.tier.name: t for t in client.stats().tiers}
        assert stats["DRAM"].used_bytes <= 128 << 20
        assert stats["SSD"].by_kind[Kind.KV_BLOCK][0] >= 16
