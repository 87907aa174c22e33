"""``tiermem serve``: run the daemon until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Config overrides from the flags ``serve`` and ``config show`` share."""
    overrides: dict[str, Any] = {}
    if args.data_dir:
        overrides["data_dir"] = args.data_dir
    if args.listen:
        overrides["server"] = {"listen": args.listen}
    if args.metrics_listen is not None:
        overrides["metrics"] = {"listen": args.metrics_listen}
    if args.log_json:
        overrides["logging"] = {"json_format": True}
    return overrides


def config_path(args: argparse.Namespace) -> Path | None:
    return Path(args.config) if args.config else None


def serve(args: argparse.Namespace) -> int:
    try:
        from pydantic import ValidationError

        from tiermem.server.app import Daemon
        from tiermem.server.config import load_config
        from tiermem.server.logs import configure
        from tiermem.server.runtime import configure_interpreter, settle_heap
    except ImportError as exc:
        print(
            f"tiermem serve needs the server extra (pip install 'tiermem[server]'): {exc}",
            file=sys.stderr,
        )
        return 2
    try:
        config = load_config(config_path(args), **config_overrides(args))
    except (ValidationError, FileNotFoundError) as exc:
        print(f"tiermem: bad configuration: {exc}", file=sys.stderr)
        return 2
    configure(config.logging.level, config.logging.json_format)
    daemon = Daemon(config)

    def on_signal(signum: int, _frame: object) -> None:
        daemon.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    configure_interpreter(config.server)
    try:
        daemon.start()  # (a failed start has closed what it opened)
    except Exception as exc:  # a config the schema takes but the host refuses
        message = getattr(exc, "message", "") or str(exc)
        print(f"tiermem: cannot start: {type(exc).__name__}: {message}", file=sys.stderr)
        return 2
    settle_heap(config.server)
    print(f"listening on {daemon.address}", flush=True)
    if daemon.metrics_address:
        print(f"metrics on http://{daemon.metrics_address}/metrics", flush=True)
    while not daemon.wait(1.0):
        pass
    return 0
