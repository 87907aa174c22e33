"""Run every benchmark under bench/ (each writes bench/results/<name>.json).

    python -m bench.run_all [--only NAME ...] [--skip NAME ...]

Benchmarks are the modules of this package with a ``main()``; each runs as its
own process so one failing does not stop the rest. Exit status is non-zero if
any failed.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"__init__", "common", "run_all", "goals_table"}


def benchmarks() -> list[str]:
    names = []
    for path in sorted(HERE.glob("*.py")):
        if path.stem in NOT_BENCHMARKS:
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            names.append(path.stem)
    return names


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--skip", nargs="*", default=[])
    args = parser.parse_args()
    failed = []
    for name in benchmarks():
        if (args.only and name not in args.only) or name in args.skip:
            continue
        print(f"=== bench.{name}", flush=True)
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=HERE.parent)
        print(f"=== bench.{name}: exit {done.returncode} in {time.monotonic() - started:.0f}s")
        if done.returncode != 0:
            failed.append(name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
