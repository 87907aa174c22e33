"""Shared helpers of the benchmarks: machine description and result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
    try:
        with open("/proc/meminfo") as f:
            info["memory_kib"] = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    with contextlib.suppress(OSError):
        info["loadavg"] = os.getloadavg()
    return info


def goal(
    name: str, value: float, target: float, unit: str, lower_is_better: bool = True
) -> dict[str, Any]:
    met = value <= target if lower_is_better else value >= target
    return {"name": name, "value": value, "target": target, "unit": unit, "met": bool(met)}


def write_result(name: str, goals: list[dict[str, Any]], details: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json with goals, details and the machine."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {
        "name": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "goals": goals,
        "details": details,
        "machine": machine_info(),
    }
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path
