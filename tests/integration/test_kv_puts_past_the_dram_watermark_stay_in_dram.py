"""A daemon whose DRAM is full of KV blocks read once keeps admitting new KV
blocks (HOT, CACHE) to DRAM: the older blocks make way (to SSD), the new ones
are not written to SSD and read from there. Reads stay byte-exact."""

from tiermem.client import Client, Kind, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
BLOCK = 16 * MiB


def test_new_kv_blocks_land_in_dram_past_its_high_watermark(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 128 * MiB}},
        background={"migrate_interval_s": 0.5},
    )
    blocks = 20  # 320 MiB through a 128 MiB DRAM (high watermark 115 MiB)
    with Client(daemon.address) as client:
        tiers = []
        for i in range(blocks):
            data = bytes([i]) * BLOCK
            tiers.append(client.put(Kind.KV_BLOCK, f"blk{i}", data).tier)
            assert client.get(Kind.KV_BLOCK, f"blk{i}") == data
        assert tiers == [Tier.DRAM] * blocks
        # the newest block is still served from DRAM; older ones made way
        where = [client.stat(Kind.KV_BLOCK, f"blk{i}").tier for i in range(blocks)]
        assert where[-1] == Tier.DRAM
        demoted = [i for i, t in enumerate(where) if t == Tier.SSD]
        assert len(demoted) >= blocks - 128 * MiB // BLOCK
        assert client.get(Kind.KV_BLOCK, f"blk{demoted[0]}") == bytes([demoted[0]]) * BLOCK
        used = {t.tier: t.used_bytes for t in client.stats().tiers}
        assert used[Tier.DRAM] <= 128 * MiB
