import os

from tests.helpers import DaemonProcess
from tiermem.client import Client, Durability, Kind, NotFoundError, Profile, Tier
from tiermem.server.app import Daemon


def test_clean_restart_keeps_durable_and_persisted_objects(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon()
    big, small = os.urandom(3 << 20), os.urandom(100)
    with Client(daemon.address) as client:
        client.put(Kind.BLOB, "big", big)
        client.put(Kind.SCRATCH, "small", small)
        client.put(Kind.KV_BLOCK, "kv-durable", big, profile=Profile(durability=Durability.DURABLE))
        client.put(Kind.KV_BLOCK, "kv-cache-ram", b"c" * 50_000)
        client.put(
            Kind.KV_BLOCK, "kv-cache-ssd", b"d" * 50_000, profile=Profile(preferred_tier=Tier.SSD)
        )
    daemon.stop()
    again = make_daemon(name="d")
    with Client(again.address) as client:
        assert client.get(Kind.BLOB, "big") == big
        assert client.get(Kind.SCRATCH, "small") == small
        assert client.get(Kind.KV_BLOCK, "kv-durable") == big
        assert client.get(Kind.KV_BLOCK, "kv-cache-ssd") == b"d" * 50_000
        # A CACHE object that only lived in DRAM is gone, reported missing, never corrupt.
        try:
            client.get(Kind.KV_BLOCK, "kv-cache-ram")
            raise AssertionError("volatile CACHE object survived a restart")
        except NotFoundError:
            pass
        assert again.recovery is not None and again.recovery.purged_volatile == 1


def test_kill_9_loses_no_acknowledged_durable_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = DaemonProcess(tmp_path / "data")
    expected: dict[str, bytes] = {}
    try:
        address = proc.start()
        with Client(address) as client:
            for i in range(200):
                data = os.urandom(100 if i % 2 else 150_000)
                client.put(Kind.SCRATCH if i % 2 else Kind.BLOB, f"k{i}", data)
                expected[f"k{i}"] = data
            client.delete(Kind.BLOB, "k0")
            del expected["k0"]
            client.put(Kind.SCRATCH, "k1", b"overwritten")
            expected["k1"] = b"overwritten"
        proc.kill9()
        address = proc.start()
        with Client(address) as client:
            for key, data in expected.items():
                i = int(key[1:])
                assert client.get(Kind.SCRATCH if i % 2 else Kind.BLOB, key) == data
            try:
                client.get(Kind.BLOB, "k0")
                raise AssertionError("deleted object came back")
            except NotFoundError:
                pass
    finally:
        proc.stop()


def test_sigterm_shuts_down_gracefully(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = DaemonProcess(tmp_path / "data")
    try:
        address = proc.start()
        with Client(address) as client:
            client.put(Kind.BLOB, "x", b"y")
        assert proc.terminate() == 0
        assert "tiermem stopped" in proc.log_path.read_text()
    finally:
        proc.stop()
