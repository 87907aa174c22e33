"""Helpers shared by the benchmarks: machine description, result files, peers."""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "gpu": None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def goal(
    name: str, value: float, target: float, unit: str, higher_is_better: bool = True
) -> dict[str, Any]:
    met = value >= target if higher_is_better else value <= target
    return {
        "name": name,
        "value": round(value, 4),
        "target": target,
        "unit": unit,
        "met": bool(met),
    }


def write_result(name: str, goals: list[dict[str, Any]], details: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine_info(), "goals": goals, **details}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    for g in goals:
        mark = "met" if g["met"] else "NOT MET"
        print(f"  {g['name']}: {g['value']} {g['unit']} (target {g['target']}) {mark}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def summarize(latencies_s: list[float], size_bytes: int) -> dict[str, float]:
    total = sum(latencies_s)
    return {
        "ops": len(latencies_s),
        "mb_per_s": size_bytes * len(latencies_s) / total / 1e6 if total else 0.0,
        "p50_ms": percentile(latencies_s, 50) * 1000,
        "p99_ms": percentile(latencies_s, 99) * 1000,
        "mean_ms": statistics.fmean(latencies_s) * 1000 if latencies_s else 0.0,
    }


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@contextmanager
def redis_server() -> Iterator[int]:
    """A single Redis node on 127.0.0.1, persistence off; yields its port."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        pidfile = Path(tmp) / "redis.pid"
        subprocess.run(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "yes", "--pidfile", str(pidfile),
             "--dir", tmp, "--proto-max-bulk-len", "1gb"],
            check=True,
        )  # fmt: skip
        try:
            wait_port(port)
            yield port
        finally:
            for _ in range(50):
                if pidfile.exists():
                    break
                time.sleep(0.05)
            if pidfile.exists():
                os.kill(int(pidfile.read_text()), 15)


@contextmanager
def tiermem_daemon(
    data_dir: Path, *extra_env: tuple[str, str], config: Path | None = None
) -> Iterator[str]:
    """`tiermem serve` in a subprocess (as an operator runs it); yields its address."""
    env = {**os.environ, **dict(extra_env)}
    cmd = [sys.executable, "-m", "tiermem.cli.main", "serve", "--data-dir", str(data_dir),
           "--listen", "127.0.0.1:0", "--metrics-listen", ""]  # fmt: skip
    if config is not None:
        cmd += ["--config", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert proc.stdout is not None
        address = ""
        for line in proc.stdout:
            if line.startswith("listening on "):
                address = line.split()[-1]
                break
        if not address:
            raise RuntimeError("tiermem did not start")
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
