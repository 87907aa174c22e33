"""The remote tier's docker-compose profiles, checked without a Docker engine:
`docker compose up` stays the default three services; the `remote-redis`
profile is three cluster-mode Redis nodes, a one-shot that joins them, and a
tiermem whose environment is a valid remote-tier config naming those nodes;
the `remote-mooncake` profile is a Mooncake master, a storage node pointed at
it, and a tiermem pointed at both; their image carries the `remote` extra."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from tiermem.server.config import load_config

COMPOSE = REPO / "deploy" / "docker-compose.yml"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _profile(name: str) -> dict[str, Any]:
    return {k: v for k, v in _services().items() if name in v.get("profiles", [])}


def _flags(command: list[str] | str) -> dict[str, str]:
    words = command.split() if isinstance(command, str) else command
    return dict(w[2:].partition("=")[::2] for w in words if w.startswith("--") and "=" in w)


def _config_of(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **extra: str) -> Any:
    for key, value in {**service["environment"], **extra}.items():
        monkeypatch.setenv(key, value)
    return load_config()


def test_default_services_are_unchanged_and_remote_ones_are_in_profiles() -> None:
    services = _services()
    default = {k for k, v in services.items() if "profiles" not in v}
    assert default == {"tiermem", "prometheus", "grafana"}
    assert set(_profile("remote-redis")) == {
        "redis-1", "redis-2", "redis-3", "redis-cluster-init", "tiermem-redis",
    }  # fmt: skip
    assert set(_profile("remote-mooncake")) == {
        "mooncake-master", "mooncake-storage", "tiermem-mooncake",
    }  # fmt: skip
    ports = [p for s in services.values() for p in s.get("ports", [])]
    assert len(ports) == len(set(ports)) and all(p.startswith("127.0.0.1:") for p in ports)


def test_redis_profile_is_a_three_node_cluster_that_tiermem_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = _profile("remote-redis")
    for node in ("redis-1", "redis-2", "redis-3"):
        command = profile[node]["command"]
        assert command[command.index("--cluster-enabled") + 1] == "yes"
        assert command[command.index("--port") + 1] == "6379"
    init = profile["redis-cluster-init"]
    script = init["command"][0]
    assert "--cluster create" in script and "--cluster-replicas 0" in script
    assert all(f"ip redis-{i})" in script for i in (1, 2, 3))
    assert set(init["depends_on"]) == {"redis-1", "redis-2", "redis-3"}
    tiermem = profile["tiermem-redis"]
    assert tiermem["depends_on"]["redis-cluster-init"]["condition"] == (
        "service_completed_successfully"
    )
    remote = _config_of(tiermem, monkeypatch).tiers.remote
    assert remote.enabled and remote.backend == "redis_cluster"
    assert remote.redis.nodes == ["redis-1:6379", "redis-2:6379", "redis-3:6379"]


def test_mooncake_profile_points_the_storage_node_and_tiermem_at_the_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = _profile("remote-mooncake")
    master = _flags(profile["mooncake-master"]["command"])
    assert profile["mooncake-master"]["entrypoint"] == ["mooncake_master"]
    metadata = f"http://mooncake-master:{master['http_metadata_server_port']}/metadata"
    storage = _flags(profile["mooncake-storage"]["command"][0])
    assert storage["master_server_address"] == f"mooncake-master:{master['rpc_port']}"
    assert storage["metadata_server"] == metadata and storage["protocol"] == "tcp"
    assert "MC_TCP_BIND_ADDRESS" in profile["mooncake-storage"]["command"][0]
    tiermem = profile["tiermem-mooncake"]
    assert "LOCAL_HOSTNAME" in tiermem["command"][0]
    remote = _config_of(
        tiermem, monkeypatch, TIERMEM_TIERS__REMOTE__MOONCAKE__LOCAL_HOSTNAME="10.0.0.2"
    ).tiers.remote
    assert remote.enabled and remote.backend == "mooncake"
    assert remote.mooncake.master == storage["master_server_address"]
    assert remote.mooncake.metadata_server == metadata
    assert (
        remote.deployment
        == _config_of(
            _profile("remote-redis")["tiermem-redis"], monkeypatch
        ).tiers.remote.deployment
    )


def test_remote_services_run_an_image_built_with_the_remote_extra() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("mooncake-transfer-engine-non-cuda") for d in extras["remote"])
    assert any(d.startswith("redis") for d in extras["remote"])
    for name in ("tiermem-redis", "mooncake-master", "mooncake-storage", "tiermem-mooncake"):
        service = _services()[name]
        assert service["image"] == "tiermem:remote"
        assert set(service["build"]["args"]["EXTRA"].split(",")) == {"server", "remote"}
    # the CPU wheel needs the verbs libraries at run time
    assert "libibverbs1" in (REPO / "Dockerfile").read_text()


def test_prometheus_scrapes_every_tiermem_service_without_alerting_on_absent_profiles() -> None:
    """Each tiermem service's metrics port is a scrape target, so the remote
    profiles' daemons are visible too; those are in a job of their own, so
    the daemon-down alert (on job tiermem) does not fire when their profile
    is not up."""
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        target: job["job_name"]
        for job in prometheus["scrape_configs"]
        for group in job["static_configs"]
        for target in group["targets"]
    }
    tiermems = [name for name in _services() if name.startswith("tiermem")]
    assert {f"{name}:9464" for name in tiermems} <= set(targets)
    assert targets["tiermem:9464"] == "tiermem"
    assert all(targets[f"{n}:9464"] != "tiermem" for n in tiermems if n != "tiermem")
