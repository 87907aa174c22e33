"""The goals table of docs/benchmarks.md, from bench/results/*.json.

    python -m bench.goals_table            # print it
    python -m bench.goals_table --write    # replace the table in docs/benchmarks.md

One row per goal, benchmarks in file-name order, goals in the order each
result lists them. ``make bench`` rewrites the table after its runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.common import REPO

RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "benchmarks.md"
HEADER = "| benchmark | goal | value | target | met |"


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return f"{value:.3g}"


def table(results: Path = RESULTS) -> list[str]:
    rows = [HEADER, "| --- | --- | --- | --- | --- |"]
    for path in sorted(results.glob("*.json")):
        result = json.loads(path.read_text())
        for g in result.get("goals", []):
            met = "yes" if g["met"] else "**no**"
            rows.append(
                f"| {path.stem} | {g['name']} | {_number(g['value'])} | "
                f"{g['target']} {g['unit']} | {met} |"
            )
    return rows


def write(doc: Path = DOC) -> None:
    """Replace the table (from its header to the first line not in it)."""
    lines = doc.read_text().splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    doc.write_text("\n".join([*lines[:start], *table(), *lines[end:]]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC}")
    args = parser.parse_args()
    if args.write:
        write()
    else:
        print("\n".join(table()))


if __name__ == "__main__":
    main()
