"""``tiermem``: run the daemon and talk to it.

Only ``serve`` needs the server extra; every other command uses the light
client, so ``pip install tiermem`` gives a working CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tiermem import __version__

DEFAULT_ADDR = "127.0.0.1:50051"
DEFAULT_METRICS_ADDR = "127.0.0.1:9464"
KINDS = {"kv": 1, "kv_block": 1, "vector": 2, "blob": 3, "scratch": 4}


def _kind(value: str) -> int:
    try:
        return KINDS[value.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"unknown kind {value!r}: use kv, vector, blob or scratch"
        ) from None


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--addr", default=DEFAULT_ADDR, help="daemon address HOST:PORT")
    p.add_argument("--namespace", "-n", default="default")
    p.add_argument("--timeout", type=float, default=30.0, help="per-call deadline in seconds")
    p.add_argument("--token", default=None, help="bearer token (if the daemon requires one)")
    p.add_argument("--tls-ca", default=None, help="PEM CA of the daemon's certificate (TLS on)")
    p.add_argument("--tls-cert", default=None, help="PEM client certificate (mutual TLS)")
    p.add_argument("--tls-key", default=None, help="PEM client key (mutual TLS)")


def _object_args(p: argparse.ArgumentParser) -> None:
    _client_args(p)
    p.add_argument(
        "--kind", "-k", type=_kind, default=3, help="kv, vector, blob (default), scratch"
    )
    p.add_argument("key")


def _config_args(p: argparse.ArgumentParser) -> None:
    """Flags that override the config (shared by `serve` and `config show`)."""
    p.add_argument("--config", "-c", default=None, help="TOML config file")
    p.add_argument("--data-dir", default=None, help="directory for durable state")
    p.add_argument("--listen", default=None, help="gRPC address HOST:PORT (port 0: pick one)")
    p.add_argument("--metrics-listen", default=None, help="Prometheus address HOST:PORT ('' = off)")
    p.add_argument("--log-json", action="store_true", help="log JSON lines (logging.json_format)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiermem", description="Tiered memory daemon for LLM long-memory data."
    )
    parser.add_argument("--version", action="version", version=f"tiermem {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the daemon in the foreground")
    _config_args(p)

    p = sub.add_parser("put", help="store a file (or stdin with '-') as an object")
    _object_args(p)
    p.add_argument("file", help="path, or - for stdin")
    p.add_argument("--hint", choices=["hot", "warm", "cold"], default=None)
    p.add_argument("--durability", choices=["cache", "durable"], default=None)
    p.add_argument("--ttl", type=int, default=0, help="seconds until the object is deleted")
    p.add_argument("--session", default="")

    p = sub.add_parser("get", help="write an object's bytes to a file (or stdout)")
    _object_args(p)
    p.add_argument("--output", "-o", default="-", help="path, or - for stdout")

    p = sub.add_parser("stat", help="show an object's metadata")
    _object_args(p)

    p = sub.add_parser("rm", help="delete an object")
    _object_args(p)

    p = sub.add_parser("ls", help="list objects")
    _client_args(p)
    p.add_argument("--kind", "-k", type=_kind, default=None)
    p.add_argument("--prefix", default="")
    p.add_argument("--session", default="")
    p.add_argument("--limit", type=int, default=1000, help="stop after this many objects")

    p = sub.add_parser("stats", help="tier capacity and usage by kind")
    _client_args(p)

    p = sub.add_parser("top", help="live view of a daemon (reads its metrics endpoint)")
    p.add_argument("--metrics-addr", default=DEFAULT_METRICS_ADDR, help="metrics HOST:PORT")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.add_argument("--iterations", type=int, default=0, help="stop after N frames (0: never)")
    p.add_argument("--once", action="store_true", help="print one frame and exit")

    p = sub.add_parser("health", help="gRPC health check: exit 0 if SERVING, else 1")
    p.add_argument("--addr", default=DEFAULT_ADDR, help="daemon address HOST:PORT")
    p.add_argument("--service", default="", help="service name ('' = the whole daemon)")
    p.add_argument("--timeout", type=float, default=5.0, help="deadline in seconds")

    p = sub.add_parser("config", help="configuration")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    q = config_sub.add_parser("show", help="effective config and the source of each value")
    _config_args(q)
    q.add_argument("--json", action="store_true", help="JSON instead of a table")

    p = sub.add_parser("cost", help="what memory costs per hour: by tier, kind, namespace, session")
    _client_args(p)

    p = sub.add_parser("fsck", help="check stored objects; list the damaged ones")
    _client_args(p)
    p.add_argument("--data-dir", default=None, help="check this data dir offline (no daemon)")
    p.add_argument("--all", action="store_true", help="every namespace (default: --namespace)")
    p.add_argument("--quick", action="store_true", help="file presence and length only")
    p.add_argument("--max", type=int, default=1000, help="most damaged objects listed")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("ns", help="namespaces")
    ns_sub = p.add_subparsers(dest="ns_command", required=True)
    q = ns_sub.add_parser("create")
    _client_args(q)
    q.add_argument("name")
    q = ns_sub.add_parser("ls")
    _client_args(q)

    from tiermem.cli.agent import add_parsers

    add_parsers(sub, _client_args)

    from tiermem.cli import vectors

    vectors.add_parser(sub, _client_args)
    from tiermem.cli import blobs

    blobs.add_parsers(sub, _client_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from tiermem.cli.serve import serve

        return serve(args)
    if args.command == "fsck":
        from tiermem.cli.fsck import fsck

        return fsck(args)
    if args.command == "top":
        from tiermem.cli.top import run_top

        return run_top(args)
    if args.command == "health":
        from tiermem.cli.health import run_health

        return run_health(args)
    if args.command == "config":
        from tiermem.cli.config_show import run_config_show

        return run_config_show(args)
    from tiermem.cli import agent, blobs
    from tiermem.cli.commands import connect, run
    from tiermem.client.errors import TiermemClientError

    try:
        if args.command in agent.COMMANDS:
            return agent.run(args)
        if args.command in blobs.COMMANDS:
            with connect(args) as client:
                return blobs.run(args, client)
        return run(args)
    except TiermemClientError as exc:
        rid = f" (request id {exc.request_id})" if exc.request_id else ""
        print(f"tiermem: {exc}{rid}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except (OSError, ValueError) as exc:  # a file it cannot read, a value out of range
        print(f"tiermem: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
