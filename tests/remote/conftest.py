"""Remote stores for the remote tier's tests: one three-node Redis Cluster and
one Mooncake Store (master + storage node) per test session, on free ports of
127.0.0.1, stopped by PID at the end. Tests share them and stay apart by using
their own ``tiers.remote.deployment`` (which is what namespacing is for); tests
that kill a store start their own.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config
from tests.remote.peers import MooncakeStore, RedisCluster, mooncake_unavailable
from tiermem.server.app import Daemon

BACKENDS = ["redis_cluster", "mooncake"]

Peer = RedisCluster | MooncakeStore


def redis_unavailable() -> str:
    for binary in ("redis-server", "redis-cli"):
        if shutil.which(binary) is None:
            return f"{binary} is not installed (apt-get install redis-server)"
    return ""


def new_peer(backend: str, directory: Path) -> Peer:
    """A stopped store of ``backend``, or a skip saying why it cannot run here."""
    why = redis_unavailable() if backend == "redis_cluster" else mooncake_unavailable()
    if why:
        pytest.skip(why)
    if backend == "redis_cluster":
        return RedisCluster(directory)
    return MooncakeStore(directory, segment_bytes=256 << 20)


@pytest.fixture(scope="session")
def shared_peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Peer]]:
    """Stores started on first use, stopped at the end of the session."""
    started: dict[str, Peer] = {}
    yield started
    for peer in started.values():
        peer.stop()


@pytest.fixture(params=BACKENDS)
def peer(
    request: pytest.FixtureRequest,
    shared_peers: dict[str, Peer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Peer:
    """The session's store of each backend (the test is run once per backend)."""
    backend: str = request.param
    if backend not in shared_peers:
        store = new_peer(backend, tmp_path_factory.mktemp(backend))
        shared_peers[backend] = store.start()
    return shared_peers[backend]


@pytest.fixture
def own_peer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Peer]:
    """A store of the test's own (to kill and restart); parametrize ``backend``."""
    store = new_peer(request.param, tmp_path / "peer")
    store.start()
    try:
        yield store
    finally:
        store.stop()


def remote_config(peer: Peer, deployment: str = "", **extra: Any) -> dict[str, Any]:
    """``tiers.remote`` for a daemon on ``peer``: a deployment of its own unless named."""
    return {
        "enabled": True,
        "deployment": deployment or f"t-{uuid.uuid4().hex[:12]}",
        "op_timeout_s": 2.0,
        **peer.config(),
        **extra,
    }


@pytest.fixture
def make_remote_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """make_remote_daemon(name, remote={...tiers.remote...}, **overrides) -> Daemon."""
    started: list[Daemon] = []

    def make(name: str, remote: dict[str, Any], **overrides: Any) -> Daemon:
        tiers = {**overrides.pop("tiers", {}), "remote": remote}
        config = daemon_config(tmp_path / name, tiers=tiers, **overrides)
        daemon = Daemon(config, registry=CollectorRegistry())
        daemon.start()
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.stop(grace_s=0)


def sample(daemon: Daemon, name: str, **labels: str) -> float:
    return daemon.metrics.registry.get_sample_value(name, labels) or 0.0


def forget(peer: Peer, names: list[str]) -> None:
    """Remove values behind tiermem's back with the store's own client, as the
    store does when it evicts by itself."""
    if isinstance(peer, RedisCluster):
        import redis

        cluster = redis.RedisCluster(host="127.0.0.1", port=peer.ports[0])
        try:
            for name in names:
                cluster.delete(name)
        finally:
            cluster.close()
        return
    from mooncake.store import MooncakeDistributedStore

    cfg = peer.config()["mooncake"]
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", cfg["metadata_server"], 0, 16 << 20, "tcp", "", cfg["master"])
    assert rc == 0, f"Mooncake client setup returned {rc}"
    try:
        codes = store.batch_remove(names, True)
        assert all(c == 0 for c in codes), codes
    finally:
        store.close()
