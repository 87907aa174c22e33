import os
import threading

from tiermem.client import Client, Kind, Profile, Tier
from tiermem.server.app import Daemon


def segment_files(daemon: Daemon) -> list[str]:
    return sorted(p.name for p in (daemon.config.data_dir / "segments").iterdir())


def test_compaction_reclaims_deleted_space_and_keeps_live_values(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"ssd": {"segment_bytes": 4 << 20}}, background={"compaction_interval_s": 3600}
    )
    cold = Profile(preferred_tier=Tier.SSD)
    values = {f"b{i}": os.urandom(700_000) for i in range(30)}
    with Client(daemon.address) as client:
        for key, data in values.items():
            client.put(Kind.BLOB, key, data, profile=cold)
        before = daemon.store.ssd.used_bytes
        files_before = segment_files(daemon)
        for i in range(30):
            if i % 4 != 0:
                client.delete(Kind.BLOB, f"b{i}")
                del values[f"b{i}"]

        stop = threading.Event()
        errors: list[str] = []

        def reader() -> None:
            while not stop.is_set():
                for key, data in values.items():
                    if client.get(Kind.BLOB, key) != data:
                        errors.append(key)

        t = threading.Thread(target=reader)
        t.start()
        try:
            compacted = daemon.mover.compact()
        finally:
            stop.set()
            t.join()
        assert compacted >= 3
        assert not errors
        after = daemon.store.ssd.used_bytes
        assert after < before / 2
        assert set(segment_files(daemon)) != set(files_before)
        for key, data in values.items():
            assert client.get(Kind.BLOB, key) == data

    daemon.stop()
    again = make_daemon(name="d")
    with Client(again.address) as client:
        for key, data in values.items():
            assert client.get(Kind.BLOB, key) == data
