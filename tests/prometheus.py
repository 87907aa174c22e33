"""A real Prometheus (Debian's binary) for tests: started on 127.0.0.1 with a
generated config and a temporary TSDB, queried over its HTTP API, stopped by PID."""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PromQLError(Exception):
    pass


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PromQLError(f"{params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant vector result of ``expr`` (raises PromQLError on any error)."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float:
        result = self.query(expr)
        if len(result) != 1:
            raise AssertionError(f"{expr}: expected one series, got {result}")
        return float(result[0]["value"][1])

    def rules(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self._get("/api/v1/rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def wait_for(self, expr: str, expected: float, timeout_s: float = 60.0) -> None:
        """Wait until ``expr`` evaluates to ``expected`` (the scrape caught up)."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                last = float(result[0]["value"][1])
                if math.isclose(last, expected):
                    return
            time.sleep(0.25)
        raise TimeoutError(f"{expr} stayed {last}, expected {expected}")


@contextmanager
def running_prometheus(
    workdir: Path, targets: Sequence[str], rule_files: Sequence[Path] = ()
) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` (HOST:PORT) every second as job "tiermem"."""
    if PROMETHEUS is None:
        raise RuntimeError("the prometheus binary is not installed (apt-get install prometheus)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(p) for p in rule_files],
                "scrape_configs": [
                    {"job_name": "tiermem", "static_configs": [{"targets": list(targets)}]}
                ],
            }
        )
    )
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("prometheus did not become ready")
            time.sleep(0.2)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        log.close()


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name the registry's families can produce, whether or not
    they have produced a sample yet (labelled metrics that saw no traffic)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("", "_count", "_sum", "_created"),
        "info": ("_info",),
        "stateset": ("",),
        "unknown": ("",),
    }
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names
