"""A real Prometheus scrapes a running daemon under a small scripted load:
PromQL over its HTTP API returns the expected counts, bytes and hit ratios;
every Grafana panel query and alert rule runs without error and names only
metrics the daemon exports."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config
from tests.helpers import REPO
from tests.prometheus import PROMETHEUS, Prometheus, exported_names, running_prometheus
from tiermem.client import Client, Kind
from tiermem.client.errors import NotFoundError
from tiermem.server.app import Daemon

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed")

DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "tiermem.json"
RULES = REPO / "deploy" / "prometheus" / "rules" / "tiermem.yml"
BLOB, KV = 50_000, 32 << 10
#: Grafana's variables, as they expand with "All" selected.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$instance": ".*",
    "$namespace": ".*",
}
METRIC_NAME = re.compile(r"\b((?:tiermem|process|python)_[a-zA-Z0-9_]+)\b")


class Setup:
    def __init__(self, daemon: Daemon, prometheus: Prometheus) -> None:
        self.daemon = daemon
        self.prometheus = prometheus


def _workload(address: str) -> None:
    with Client(address, fast_paths=()) as c:  # counts gRPC RPCs
        c.create_namespace("tenant-a")
        for i in range(4):
            c.put(Kind.BLOB, f"blob-{i}", bytes([i]) * BLOB)
        for i in range(2):
            c.put(Kind.KV_BLOCK, f"kv-{i}", bytes([i]) * KV)
        c.put(Kind.SCRATCH, "note", b"n" * 100, namespace="tenant-a")
        for _ in range(2):
            for i in range(4):
                c.get(Kind.BLOB, f"blob-{i}")
        for _ in range(3):
            for i in range(2):
                c.get(Kind.KV_BLOCK, f"kv-{i}")
        with pytest.raises(NotFoundError):
            c.get(Kind.BLOB, "missing")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("prometheus")
    config = daemon_config(work / "data", metrics={"listen": "127.0.0.1:0"})
    daemon = Daemon(config, registry=CollectorRegistry())
    daemon.start()
    try:
        with running_prometheus(work / "prom", [daemon.metrics_address], [RULES]) as prometheus:
            _workload(daemon.address)
            total = sum(
                s.value
                for f in daemon.metrics.registry.collect()
                if f.name == "tiermem_requests"
                for s in f.samples
                if s.name == "tiermem_requests_total"
            )
            # Scrapes add no RPCs, so once Prometheus sees this total it has a
            # scrape taken after the whole workload.
            prometheus.wait_for("sum(tiermem_requests_total)", total)
            yield Setup(daemon, prometheus)
    finally:
        daemon.stop(grace_s=0)


def test_promql_returns_the_workload_counts_bytes_and_hit_ratios(setup: Setup) -> None:
    p = setup.prometheus
    assert p.value('up{job="tiermem"}') == 1
    assert p.value("tiermem_ready") == 1
    assert p.value('sum(tiermem_requests_total{method="ObjectService/Put", code="OK"})') == 7
    assert p.value('sum(tiermem_requests_total{method="ObjectService/Get", code="OK"})') == 14
    assert p.value('tiermem_requests_total{method="ObjectService/Get", code="NOT_FOUND"}') == 1
    assert (
        p.value('tiermem_data_bytes_total{path="grpc", direction="in"}') == 4 * BLOB + 2 * KV + 100
    )
    assert p.value('tiermem_data_bytes_total{path="grpc", direction="out"}') == 8 * BLOB + 6 * KV
    assert p.value('tiermem_objects{tier="SSD", kind="BLOB", namespace="default"}') == 4
    assert (
        p.value('tiermem_object_bytes{tier="DRAM", kind="KV_BLOCK", namespace="default"}') == 2 * KV
    )
    # The scratch record is served from DRAM and, being DURABLE, has an SSD copy:
    # tiermem_objects counts copies.
    by_ns = p.query('sum by (namespace) (tiermem_objects{kind="SCRATCH", tier="SSD"})')
    assert {r["metric"]["namespace"]: float(r["value"][1]) for r in by_ns} == {
        "default": 0.0,
        "tenant-a": 1.0,
    }
    assert p.value('sum(tiermem_objects{kind="SCRATCH", namespace="tenant-a"})') == 2
    # DRAM hit ratio: 6 KV reads hit; 8 blob reads and 1 missing key looked there first.
    dram = (
        'sum(tiermem_hits_total{tier="DRAM"}) / (sum(tiermem_hits_total{tier="DRAM"})'
        ' + sum(tiermem_misses_total{tier="DRAM"}))'
    )
    assert p.value(dram) == pytest.approx(6 / 15)
    memory_share = 'sum(tiermem_hits_total{tier=~"HBM|DRAM"}) / sum(tiermem_hits_total)'
    assert p.value(memory_share) == pytest.approx(6 / 14)
    p50 = p.value(
        "histogram_quantile(0.5, sum by (le) "
        '(tiermem_request_duration_seconds_bucket{method="ObjectService/Put"}))'
    )
    assert 0 < p50 < 30
    assert p.value("sum(tiermem_cost_usd_per_hour)") > 0
    assert p.value('tiermem_tier_capacity_bytes{tier="DRAM"}') == 64 << 20


def test_every_dashboard_query_runs_and_names_only_exported_metrics(setup: Setup) -> None:
    exported = exported_names(setup.daemon.metrics.registry)
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]
    queries += [(v["name"], v["definition"]) for v in dashboard["templating"]["list"]]
    assert len(queries) > 50
    unknown: list[str] = []
    for title, expr in queries:
        for name in METRIC_NAME.findall(expr):
            if name not in exported:
                unknown.append(f"{title}: {name}")
        if expr.startswith("label_values("):
            continue  # a Grafana function, not PromQL; its metric is checked above
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"{title}: unexpanded variable in {expr}"
        setup.prometheus.query(expr)  # raises on any PromQL error
    assert not unknown, f"panels name metrics the daemon does not export: {unknown}"


def test_alert_rules_load_evaluate_and_name_exported_metrics(setup: Setup) -> None:
    exported = exported_names(setup.daemon.metrics.registry)
    rules = setup.prometheus.rules()
    assert {r["name"] for r in rules} >= {"TiermemDown", "TiermemChecksumFailures"}
    for rule in rules:
        for name in METRIC_NAME.findall(rule["query"]):
            assert name in exported, f"rule {rule['name']}: unknown metric {name}"
    # Rules are evaluated every second: wait for one evaluation of each; all clean.
    deadline = time.monotonic() + 30
    while any(r["health"] == "unknown" for r in rules) and time.monotonic() < deadline:
        time.sleep(0.25)
        rules = setup.prometheus.rules()
    for rule in rules:
        assert rule["health"] == "ok" and not rule.get("lastError"), rule
    # Nothing is wrong with this daemon, so nothing fires.
    assert not [r["name"] for r in rules if r["state"] == "firing"]
