"""Shared fixtures: real daemons on port 0 with a fresh data dir and registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tiermem.client import Client
from tiermem.server.app import Daemon
from tiermem.server.config import Config, load_config

MiB = 1 << 20


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def daemon_config(data_dir: Path, **overrides: Any) -> Config:
    base: dict[str, Any] = {
        "data_dir": str(data_dir),
        "server": {"listen": "127.0.0.1:0", "shutdown_grace_s": 1.0},
        "metrics": {"listen": ""},
        "tiers": {
            "dram": {"capacity_bytes": 64 * MiB},
            "ssd": {"capacity_bytes": 2048 * MiB, "segment_bytes": 16 * MiB},
        },
        "background": {"migrate_interval_s": 0.1},
    }
    return load_config(**deep_merge(base, overrides))


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Factory: make_daemon(name="d", **config_overrides) -> started Daemon."""
    started: list[Daemon] = []

    def make(name: str = "d", **overrides: Any) -> Daemon:
        daemon = Daemon(daemon_config(tmp_path / name, **overrides), registry=CollectorRegistry())
        daemon.start()
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.stop(grace_s=0)


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    with Client(daemon.address, timeout_s=30) as c:
        yield c
