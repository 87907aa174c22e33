"""Run every benchmark module under bench/ (each has a ``main()``)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

SKIP = {"common", "run_all"}


def main() -> None:
    here = Path(__file__).resolve().parent
    for mod in sorted(m.name for m in pkgutil.iter_modules([str(here)])):
        if mod in SKIP:
            continue
        print(f"== bench.{mod}", flush=True)
        importlib.import_module(f"bench.{mod}").main()


if __name__ == "__main__":
    main()
