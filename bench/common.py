"""Helpers shared by the benchmarks: machine description and result files."""

from __future__ import annotations

import json
import os
import platform
import time
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
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_avg_1m": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def goal(
    name: str, value: float, target: float, unit: str, higher_is_better: bool = True
) -> dict[str, Any]:
    met = value >= target if higher_is_better else value <= target
    return {"name": name, "value": round(value, 4), "target": target, "unit": unit, "met": met}


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
