"""Client-side commands of the CLI (everything but ``serve``)."""

from __future__ import annotations

import argparse
import sys
import time

from tiermem.client import (
    AccessHint,
    Client,
    Durability,
    Kind,
    ObjectInfo,
    Profile,
    TlsOptions,
)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _when(unix_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_ms / 1000))


def _describe(info: ObjectInfo) -> str:
    copy = " (+SSD copy)" if info.persisted and info.tier.name != "SSD" else ""
    lines = [
        f"key:        {info.namespace}/{info.kind.name}/{info.key}",
        f"size:       {info.size_bytes} bytes ({human_bytes(info.size_bytes)})",
        f"tier:       {info.tier.name}{copy}",
        f"checksum:   xxh3-64 {info.checksum:016x}",
        f"version:    {info.version}",
        f"durability: {info.profile.durability.name}   hint: {info.profile.hint.name}"
        f"   pinned: {info.profile.pin}",
        f"created:    {_when(info.created_unix_ms)}",
    ]
    if info.dtype:
        lines.append(f"tensor:     {info.dtype}{list(info.shape)} {info.memory_format}".rstrip())
    if info.session:
        lines.append(f"session:    {info.session}")
    if info.expires_unix_ms:
        lines.append(f"expires:    {_when(info.expires_unix_ms)}")
    return "\n".join(lines)


def tls_options(args: argparse.Namespace) -> TlsOptions | None:
    if not (args.tls_ca or args.tls_cert or args.tls_key):
        return None
    return TlsOptions(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)


def connect(args: argparse.Namespace) -> Client:
    return Client(
        args.addr,
        namespace=args.namespace,
        timeout_s=args.timeout,
        token=args.token,
        tls=tls_options(args),
    )


def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        cmd = args.command
        if cmd == "put":
            if args.file == "-":
                data = sys.stdin.buffer.read()
            else:
                with open(args.file, "rb") as f:
                    data = f.read()
            profile = Profile(
                hint=AccessHint[args.hint.upper()] if args.hint else AccessHint.UNSPECIFIED,
                durability=Durability[args.durability.upper()]
                if args.durability
                else Durability.UNSPECIFIED,
                ttl_s=args.ttl,
            )
            info = client.put(
                Kind(args.kind), args.key, data, profile=profile, session=args.session
            )
            print(
                f"stored {info.namespace}/{info.kind.name}/{info.key}: {info.size_bytes} bytes "
                f"on {info.tier.name}, version {info.version}"
            )
        elif cmd == "get":
            data = client.get(Kind(args.kind), args.key)
            if args.output == "-":
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            else:
                with open(args.output, "wb") as f:
                    f.write(data)
        elif cmd == "stat":
            print(_describe(client.stat(Kind(args.kind), args.key)))
        elif cmd == "rm":
            if not client.delete(Kind(args.kind), args.key):
                print(f"tiermem: no object {args.key!r}", file=sys.stderr)
                return 1
        elif cmd == "ls":
            kind = Kind(args.kind) if args.kind else None
            print(f"{'KIND':<9} {'TIER':<5} {'SIZE':>10}  KEY")
            for n, info in enumerate(
                client.list(kind=kind, prefix=args.prefix, session=args.session), start=1
            ):
                size = human_bytes(info.size_bytes)
                print(f"{info.kind.name:<9} {info.tier.name:<5} {size:>10}  {info.key}")
                if n >= args.limit:
                    break
        elif cmd == "stats":
            print(format_stats(client))
        elif cmd == "cost":
            from tiermem.cli.cost import format_cost

            print(format_cost(client.stats()))
        elif cmd == "vec":
            from tiermem.cli import vectors

            return vectors.run(args, client)
        elif cmd == "ns":
            if args.ns_command == "create":
                created = client.create_namespace(args.name)
                print(f"namespace {args.name} {'created' if created else 'already exists'}")
            else:
                print("\n".join(client.list_namespaces()))
    return 0


def format_stats(client: Client) -> str:
    stats = client.stats()
    out = [f"tiermem {stats.version}, {stats.objects} objects, up {stats.uptime_s} s", ""]
    out.append(f"{'TIER':<6} {'USED':>11} {'CAPACITY':>11} {'USE%':>6} {'HIGH/LOW':>9}  DEVICE")
    for t in stats.tiers:
        pct = 100 * t.used_bytes / t.capacity_bytes if t.capacity_bytes else 0
        state = "" if t.enabled else " (disabled)"
        out.append(
            f"{t.tier.name:<6} {human_bytes(t.used_bytes):>11} {human_bytes(t.capacity_bytes):>11} "
            f"{pct:>5.1f}% {t.high_watermark:>4.2f}/{t.low_watermark:<4.2f}  {t.device}{state}"
        )
    out += ["", f"{'TIER':<6} {'KIND':<9} {'OBJECTS':>9} {'BYTES':>11}"]
    for t in stats.tiers:
        for kind, (count, nbytes) in sorted(t.by_kind.items()):
            out.append(f"{t.tier.name:<6} {kind.name:<9} {count:>9} {human_bytes(nbytes):>11}")
    return "\n".join(out)
