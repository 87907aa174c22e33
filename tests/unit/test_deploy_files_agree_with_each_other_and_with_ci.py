"""What can be checked of the deployment without a Docker engine: the compose
file parses and references files that exist, the Dockerfile is multi-stage,
slim, non-root, with a data volume and a gRPC health check, and installs with
the same script CI runs; Prometheus and Grafana provisioning fit together;
the dashboard JSON is what its generator writes."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dockerfile import parse
from tests.helpers import REPO

DEPLOY = REPO / "deploy"


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return loaded


def _build_dashboard() -> Any:
    spec = importlib.util.spec_from_file_location(
        "build_dashboard", DEPLOY / "grafana" / "build_dashboard.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compose_parses_and_every_referenced_file_exists() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"tiermem", "prometheus", "grafana"} <= set(services)
    named = set(compose["volumes"])
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no health check"
        for volume in service.get("volumes", ()):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in named, f"{name}: volume {source} is not declared"
    build = services["tiermem"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == REPO / "Dockerfile"
    assert services["tiermem"]["healthcheck"]["test"][1:3] == ["tiermem", "health"]
    assert services["prometheus"]["depends_on"]["tiermem"]["condition"] == "service_healthy"
    # The data directory is a volume, where the image declares it.
    final = parse(REPO / "Dockerfile").stages[-1]
    data_volume = json.loads(final.last("VOLUME"))[0]
    mounts = {v.split(":")[1] for v in services["tiermem"]["volumes"]}
    assert data_volume in mounts
    # The DRAM arena lives in /dev/shm: the container must get more than the tier's budget.
    shm = services["tiermem"]["shm_size"]
    assert shm.endswith("m") and int(shm[:-1]) << 20 > 1 << 30
    # The place where the remote tier's optional profiles go is marked.
    assert "profiles:" in (DEPLOY / "docker-compose.yml").read_text()


def test_dockerfile_is_multi_stage_slim_non_root_with_volume_and_health_check() -> None:
    dockerfile = parse(REPO / "Dockerfile")
    assert len(dockerfile.stages) >= 2
    for stage in dockerfile.stages:
        assert "-slim" in stage.base, stage.base
    build, final = dockerfile.stages[0], dockerfile.stages[-1]
    assert final.last("USER") not in ("root", "0")
    assert final.all("VOLUME")
    assert final.healthcheck()[:2] == ["tiermem", "health"]
    assert final.exec_form("ENTRYPOINT") == ["tiermem"]
    assert final.exec_form("CMD")[0] == "serve"
    # The final stage takes only the installed environment from the build stage.
    assert [c for c in final.copies() if c[2]] == [(["/opt/tiermem"], "/opt/tiermem", build.name)]
    # Every file the build copies exists, and every package folder is copied.
    copied = {src.rstrip("/") for sources, _, _ in build.copies() for src in sources}
    for source in copied:
        assert (REPO / source).exists(), source
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(pyproject["tool"]["setuptools"]["package-dir"].values()) <= copied
    for sources, _, origin in final.copies():
        if not origin:
            assert all((REPO / s).exists() for s in sources), sources


def test_image_installs_with_the_same_script_and_extras_ci_uses() -> None:
    dockerfile = parse(REPO / "Dockerfile")
    build = dockerfile.stages[0]
    runs = build.all("RUN")
    assert len(runs) == 1 and '.ci/install-python /opt/tiermem "${EXTRA}"' in runs[0]
    args = dict(a.partition("=")[::2] for a in build.all("ARG"))
    assert args["EXTRA"] == "server"
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert ".ci/install-python $(VENV) server,test --editable" in recipe
    # No other pip steps on either side that could drift apart.
    assert "pip" not in recipe.replace("install-python", "")
    assert all("pip install" not in r for r in runs)
    for stage in dockerfile.stages:
        assert all("pip install" not in r for r in stage.all("RUN"))
    # The GPU build argument names an extra that is the server extra with faiss-gpu.
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "gpu" in extras and "EXTRA=gpu" in (REPO / "Dockerfile").read_text()
    swap = {d.replace("faiss-cpu", "faiss-gpu") for d in extras["server"]}
    assert swap == set(extras["gpu"])
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv*" in ignored


def test_grafana_provisioning_dashboard_and_prometheus_config_fit_together() -> None:
    compose = _compose()
    datasources = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    uid = datasources[0]["uid"]
    host_port = re.match(r"http://([^:/]+):(\d+)", datasources[0]["url"])
    assert host_port is not None and host_port.group(1) in compose["services"]
    dashboard = json.loads((DEPLOY / "grafana/dashboards/tiermem.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid
            assert panel["targets"] and all(t["datasource"]["uid"] == uid for t in panel["targets"])
    titles = " ".join(p["title"] for p in dashboard["panels"] if p["type"] == "row").lower()
    for topic in (
        "tiers",
        "hit ratios",
        "requests",
        "migrations",
        "write-back",
        "sessions",
        "cost",
    ):
        assert topic in titles
    providers = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/tiermem.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == path


def test_dashboard_json_is_what_its_generator_writes() -> None:
    module = _build_dashboard()
    assert (DEPLOY / "grafana/dashboards/tiermem.json").read_text() == module.render(), (
        "run: python deploy/grafana/build_dashboard.py"
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_prometheus_config_and_rules(tmp_path: Path) -> None:
    config = DEPLOY / "prometheus" / "prometheus.yml"
    run = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_prometheus_scrapes_the_port_the_container_config_serves_metrics_on() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (target,) = config["scrape_configs"][0]["static_configs"][0]["targets"]
    host, port = target.rsplit(":", 1)
    assert host in _compose()["services"]
    container = tomllib.loads((DEPLOY / "tiermem.toml").read_text())
    assert container["metrics"]["listen"] == f"0.0.0.0:{port}"
    assert f"127.0.0.1:{port}:{port}" in _compose()["services"]["tiermem"]["ports"]
