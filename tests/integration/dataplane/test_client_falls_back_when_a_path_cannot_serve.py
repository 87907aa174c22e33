"""The client moves on to the next data path when one cannot serve a request
(switched off, arena full, daemon restarted with a new arena), and keeps the
plain API working throughout."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config
from tiermem.client import Client, Durability, Kind, Profile
from tiermem.server.app import Daemon

MiB = 1 << 20


def test_without_shared_memory_the_bulk_channel_is_used(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(dataplane={"shm_enabled": False})
    with Client(daemon.address) as c:
        assert c.dataplane.paths() == ["bulk", "grpc"]
        c.put(Kind.KV_BLOCK, "k", b"\x01" * MiB)
        assert c.get(Kind.KV_BLOCK, "k") == b"\x01" * MiB
        assert c.path_stats()["bulk"]["puts"] == 1


def test_without_either_fast_path_grpc_is_used(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(dataplane={"shm_enabled": False, "bulk": {"enabled": False}})
    with Client(daemon.address) as c:
        assert c.dataplane.paths() == ["grpc"]
        c.put(Kind.KV_BLOCK, "k", b"\x02" * MiB)
        assert c.get(Kind.KV_BLOCK, "k") == b"\x02" * MiB
        assert c.path_stats()["grpc"] == {
            "puts": 1,
            "gets": 1,
            "put_bytes": MiB,
            "get_bytes": MiB,
        }


def test_a_full_arena_sends_the_put_over_the_bulk_channel(
    make_daemon: Callable[..., Daemon],
) -> None:
    # two 4 MiB values and their arena overhead (64 bytes each) fit, a third does not
    daemon = make_daemon(tiers={"dram": {"capacity_bytes": 9 * MiB}})
    with Client(daemon.address) as c:
        for i in range(2):  # pinned: nothing can be demoted to make room
            c.put(Kind.KV_BLOCK, f"pinned-{i}", b"\x03" * (4 * MiB), profile=Profile(pin=True))
        c.put(Kind.KV_BLOCK, "spill", b"\x04" * (4 * MiB))
        assert c.stat(Kind.KV_BLOCK, "spill").tier.name == "SSD"
        stats = c.path_stats()
        assert stats["shm"]["puts"] == 2 and stats["bulk"]["puts"] == 1
        assert c.get(Kind.KV_BLOCK, "spill") == b"\x04" * (4 * MiB)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_restarted_daemon_is_renegotiated(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"

    def start() -> Daemon:
        cfg = daemon_config(tmp_path / "d", server={"listen": address})
        daemon = Daemon(cfg, registry=CollectorRegistry())
        daemon.start()
        return daemon

    durable = Profile(durability=Durability.DURABLE)
    daemon = start()
    try:
        # shared memory for every size: this test is about the arena renegotiated
        with Client(address, timeout_s=30, retries=8, fast_shm_min_bytes=0) as c:
            c.put(Kind.BLOB, "kept", b"\x05" * MiB, profile=durable)
            first_arena = c.dataplane.offer().arena
            assert first_arena is not None
            daemon.stop(grace_s=0)
            daemon = start()
            assert c.get(Kind.BLOB, "kept") == b"\x05" * MiB  # stale arena: another path
            c.put(Kind.BLOB, "again", b"\x06" * MiB, profile=durable)
            arena = c.dataplane.offer().arena
            assert arena is not None and arena.arena_id != first_arena.arena_id
            assert c.get(Kind.BLOB, "again") == b"\x06" * MiB
            assert c.path_stats()["shm"]["puts"] == 2
    finally:
        daemon.stop(grace_s=0)
