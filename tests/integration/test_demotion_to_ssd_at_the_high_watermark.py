import os
import time

from tests.polling import poll_until
from tiermem.client import Client, Kind, Tier
from tiermem.server.app import Daemon


def test_background_demotion_brings_dram_to_the_low_watermark(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 32 << 20, "high_watermark": 0.6, "low_watermark": 0.4}}
    )
    values = {f"v{i}": os.urandom(1 << 20) for i in range(24)}
    with Client(daemon.address) as client:
        for key, data in values.items():
            client.put(Kind.KV_BLOCK, key, data)
            time.sleep(0.01)

        def dram_used() -> int:
            return next(t.used_bytes for t in client.stats().tiers if t.tier == Tier.DRAM)

        assert poll_until(lambda: dram_used() <= 0.6 * (32 << 20), 10)
        tiers = {key: client.stat(Kind.KV_BLOCK, key).tier for key in values}
        assert Tier.SSD in tiers.values() and Tier.DRAM in tiers.values()
        # Least recently used went first: the earliest keys are the ones on SSD.
        assert tiers["v0"] == Tier.SSD and tiers["v23"] == Tier.DRAM
        for key, data in values.items():
            assert client.get(Kind.KV_BLOCK, key) == data


def test_a_put_that_does_not_fit_demotes_synchronously(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 8 << 20}}, background={"migrate_interval_s": 60}
    )
    with Client(daemon.address) as client:
        a, b = os.urandom(6 << 20), os.urandom(6 << 20)
        client.put(Kind.KV_BLOCK, "a", a)
        info = client.put(Kind.KV_BLOCK, "b", b)
        assert info.tier == Tier.DRAM
        assert client.stat(Kind.KV_BLOCK, "a").tier == Tier.SSD
        assert client.get(Kind.KV_BLOCK, "a") == a and client.get(Kind.KV_BLOCK, "b") == b


def test_pinned_objects_are_never_demoted(make_daemon) -> None:  # type: ignore[no-untyped-def]
    from tiermem.client import Profile

    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 8 << 20, "high_watermark": 0.5, "low_watermark": 0.2}}
    )
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "pinned", os.urandom(3 << 20), profile=Profile(pin=True))
        for i in range(6):
            client.put(Kind.KV_BLOCK, f"other{i}", os.urandom(1 << 20))
        daemon.maintain()
        assert client.stat(Kind.KV_BLOCK, "pinned").tier == Tier.DRAM
