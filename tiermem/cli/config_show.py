"""``tiermem config show``: the effective config and where each value came
from (default / file / env / flag). Runs locally: no daemon needed."""

from __future__ import annotations

import argparse
import json
import sys

from tiermem.cli.commands import human_bytes
from tiermem.cli.serve import config_overrides, config_path


def _shown(key: str, value: object) -> str:
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{value} ({human_bytes(value)})"
    return json.dumps(value) if not isinstance(value, str) else value


def run_config_show(args: argparse.Namespace) -> int:
    try:
        from pydantic import ValidationError

        from tiermem.server.config_sources import explain_config
    except ImportError as exc:
        print(f"tiermem config needs the server extra: {exc}", file=sys.stderr)
        return 2
    try:
        _config, values = explain_config(config_path(args), config_overrides(args))
    except (ValidationError, FileNotFoundError) as exc:
        print(f"tiermem: bad configuration: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {v.key: {"value": v.value, "source": v.source, "origin": v.origin} for v in values},
                indent=2,
            )
        )
        return 0
    width = max(len(v.key) for v in values)
    vwidth = min(max(len(_shown(v.key, v.value)) for v in values), 40)
    print(f"{'KEY':<{width}}  {'VALUE':<{vwidth}}  SOURCE")
    for v in values:
        origin = f" ({v.origin})" if v.origin else ""
        print(f"{v.key:<{width}}  {_shown(v.key, v.value):<{vwidth}}  {v.source}{origin}")
    return 0
