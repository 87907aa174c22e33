"""Helpers shared by the benchmarks: machine description and result files.

Every result file has top-level ``"goals"`` (name, value, target, unit, met),
``"details"`` and ``"machine"``."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info() -> dict[str, Any]:
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def goal(
    name: str, value: float, target: float, unit: str, higher_is_better: bool
) -> dict[str, Any]:
    met = value >= target if higher_is_better else value <= target
    return {
        "name": name,
        "value": value,
        "target": f"{'>=' if higher_is_better else '<='} {target}",
        "unit": unit,
        "met": bool(met),
    }


def write_result(name: str, goals: list[dict[str, Any]], details: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {"goals": goals, "details": details, "machine": machine_info()}
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


class ServedDaemon:
    """``tiermem serve`` in a child process (its own interpreter and GIL, as
    deployed), on a free port; stopped by PID."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        import subprocess
        import sys

        cmd = [
            sys.executable, "-m", "tiermem.cli.main", "serve", "--data-dir", str(data_dir),
            "--listen", "127.0.0.1:0", "--metrics-listen", "",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.address = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("listening on "):
                self.address = line.split()[-1]
                break
        if not self.address:
            raise RuntimeError("the daemon did not start")

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except Exception:
                self.proc.kill()
                self.proc.wait(30)
