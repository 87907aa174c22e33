"""``tiermem session|scratch|op``: agent sessions, the scratchpad and operators."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from tiermem.client import Client, Grant, Kind, RecordDurability, RecordKind, Tier

COMMANDS = ("session", "scratch", "op")
_KINDS = {k.name.lower().replace("_", "-"): k for k in RecordKind}


def _quota(value: str) -> tuple[Tier, int]:
    tier, _, size = value.partition("=")
    try:
        return Tier[tier.upper()], int(size)
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"quota {value!r}: use TIER=BYTES, e.g. dram=1048576"
        ) from None


def _grant(value: str) -> Grant:
    kind, _, prefix = value.partition(":")
    names = {"kv": Kind.KV_BLOCK, "vector": Kind.VECTOR, "blob": Kind.BLOB, "scratch": Kind.SCRATCH}
    if kind not in names:
        raise argparse.ArgumentTypeError(f"grant {value!r}: use KIND:PREFIX, e.g. kv:prefix/")
    return Grant(names[kind], prefix)


def add_parsers(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    client_args: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = sub.add_parser("session", help="agent sessions: ls, open, show, close, heartbeat")
    s = p.add_subparsers(dest="agent_command", required=True)
    q = s.add_parser("ls", help="the session tree")
    client_args(q)
    q.add_argument("--root", default="")
    q = s.add_parser("open", help="open a session; prints its id")
    client_args(q)
    q.add_argument("--parent", default="")
    q.add_argument("--label", default="")
    q.add_argument("--quota", type=_quota, action="append", default=[], help="TIER=BYTES")
    q.add_argument("--ttl", type=int, default=0, help="seconds until it is closed")
    q.add_argument("--lease", type=int, default=0, help="closed after this long without heartbeat")
    q.add_argument("--grant", type=_grant, action="append", default=[], help="KIND:PREFIX")
    q = s.add_parser("show", help="a session, its usage and its ledger")
    client_args(q)
    q.add_argument("id")
    q = s.add_parser("close", help="close a session, freeing all it owns")
    client_args(q)
    q.add_argument("id")
    q.add_argument("--result", default="", help="one line for the parent's scratchpad")
    q.add_argument("--tokens", type=int, default=0)
    q = s.add_parser("heartbeat")
    client_args(q)
    q.add_argument("id")

    p = sub.add_parser("scratch", help="the scratchpad: append, replay, flush, query, stats")
    s = p.add_subparsers(dest="agent_command", required=True)
    q = s.add_parser("append", help="append one record")
    client_args(q)
    q.add_argument("session")
    q.add_argument("payload")
    q.add_argument("--kind", choices=sorted(_KINDS), default="observation")
    q.add_argument("--key", default="")
    q.add_argument("--tag", action="append", default=[])
    q.add_argument("--key-node", action="store_true")
    q.add_argument("--durability", choices=["buffered", "logged", "sync"], default="logged")
    q = s.add_parser("replay", help="a session's records in order")
    client_args(q)
    q.add_argument("session")
    q.add_argument("--kind", choices=sorted(_KINDS), action="append", default=[])
    q.add_argument("--tag", action="append", default=[])
    q.add_argument("--since-ms", type=int, default=0)
    q.add_argument("--until-ms", type=int, default=0)
    q.add_argument("--limit", type=int, default=0)
    q.add_argument("--json", action="store_true", help="one JSON object per line")
    q = s.add_parser("flush", help="write the buffer back now")
    client_args(q)
    q = s.add_parser("query", help="flushed records closest in meaning to a text")
    client_args(q)
    q.add_argument("session")
    q.add_argument("text")
    q.add_argument("-k", type=int, default=5)
    q = s.add_parser("stats")
    client_args(q)

    p = sub.add_parser("op", help="operators: ls, invoke")
    s = p.add_subparsers(dest="agent_command", required=True)
    q = s.add_parser("ls", help="registered operators and their arguments")
    client_args(q)
    q = s.add_parser("invoke", help="run an operator; prints its JSON result")
    client_args(q)
    q.add_argument("name")
    q.add_argument("args", nargs="?", default="{}", help="JSON object of arguments")
    q.add_argument("--session", default="")
    q.add_argument("--limit", type=float, default=0.0, help="time limit in seconds")


def run(args: argparse.Namespace) -> int:
    with Client(args.addr, namespace=args.namespace, timeout_s=args.timeout, token=args.token) as c:
        return {"session": _session, "scratch": _scratch, "op": _op}[args.command](c, args)


def _session(c: Client, args: argparse.Namespace) -> int:
    cmd = args.agent_command
    if cmd == "ls":
        print(f"{'ID':<40} {'LABEL':<20} {'DRAM':>10} {'SSD':>10} {'LEDGER':>8}")
        for s in c.sessions.list(args.root):
            name = "  " * s.depth + s.id
            print(
                f"{name:<40} {s.label[:20]:<20} {s.used_bytes(Tier.DRAM):>10} "
                f"{s.used_bytes(Tier.SSD):>10} {s.ledger_bytes:>8}"
            )
    elif cmd == "open":
        info = c.sessions.open(
            parent=args.parent,
            label=args.label,
            quotas=dict(args.quota),
            ttl_s=args.ttl,
            lease_s=args.lease,
            grants=args.grant,
            namespace=args.namespace,
        )
        print(info.id)
    elif cmd == "show":
        info = c.sessions.describe(args.id)
        print(f"id:        {info.id}\nparent:    {info.parent or '-'}\nlabel:     {info.label}")
        print(f"state:     {info.state}\nchildren:  {', '.join(info.children) or '-'}")
        for tier, (nbytes, items) in sorted(info.usage.items()):
            quota = info.quotas.get(tier)
            print(
                f"{tier.name:<5}      {nbytes} bytes, {items} items"
                + (f" (quota {quota})" if quota else "")
            )
        print(f"ledger:    {info.ledger_bytes} bytes, {info.ledger_tokens} tokens from "
              f"{info.children_closed} closed children")  # fmt: skip
        for e in c.sessions.ledger(args.id)[:20]:
            print(f"  {e.child} ({e.label}) {e.bytes} B {e.tokens} tok {e.reason.name}")
    elif cmd == "close":
        r = c.sessions.close(args.id, args.result, result_tokens=args.tokens)
        freed = ", ".join(f"{t.name} {b}" for t, b in sorted(r.freed.items())) or "nothing"
        print(f"closed {r.sessions_closed} session(s): freed {freed} bytes, "
              f"{r.objects_freed} objects, {r.records_freed} records")  # fmt: skip
    elif cmd == "heartbeat":
        print(c.sessions.heartbeat(args.id))
    return 0


def _scratch(c: Client, args: argparse.Namespace) -> int:
    cmd = args.agent_command
    if cmd == "append":
        rid = c.scratch.append(
            args.session,
            _KINDS[args.kind],
            args.payload,
            key=args.key,
            tags=args.tag,
            key_node=args.key_node,
            durability=RecordDurability[args.durability.upper()],
        )
        print(rid)
    elif cmd == "replay":
        records = c.scratch.replay(
            args.session,
            kinds=[_KINDS[k] for k in args.kind],
            tags=args.tag,
            since_unix_ms=args.since_ms,
            until_unix_ms=args.until_ms,
            limit=args.limit,
        )
        for r in records:
            text = r.payload.decode("utf-8", "replace")
            if args.json:
                print(json.dumps({"id": r.id, "ts_unix_ms": r.ts_unix_ms, "kind": r.kind.name,
                                  "key": r.key, "tags": list(r.tags), "payload": text,
                                  "flushed": r.flushed}))  # fmt: skip
            else:
                when = time.strftime("%H:%M:%S", time.localtime(r.ts_unix_ms / 1000))
                tags = f" [{', '.join(r.tags)}]" if r.tags else ""
                key = f" {r.key}=" if r.key else " "
                print(f"{r.id:>8} {when} {r.kind.name:<11}{key}{text}{tags}")
    elif cmd == "flush":
        f = c.scratch.flush()
        print(f"flushed {f.records} records ({f.deduplicated} duplicates, {f.merged} merged), "
              f"{f.stored_bytes} bytes")  # fmt: skip
    elif cmd == "query":
        for r, score in c.scratch.query(args.session, args.text, k=args.k):
            print(
                f"{score:6.3f} {r.id:>8} {r.kind.name:<11} {r.payload.decode('utf-8', 'replace')}"
            )
    elif cmd == "stats":
        s = c.scratch.stats()
        for name in s.__slots__:
            print(f"{name:<20} {getattr(s, name)}")
    return 0


def _op(c: Client, args: argparse.Namespace) -> int:
    if args.agent_command == "ls":
        for op in c.operators.list():
            print(f"{op.name}  ({op.origin}, {op.timeout_s:g} s)\n  {op.description}")
            for a in op.args:
                default = "" if a.required else f" = {json.dumps(a.default)}"
                print(f"    {a.name}: {a.type}{default}  {a.description}")
            print(f"  returns {op.returns}")
        return 0
    try:
        payload = json.loads(args.args)
    except json.JSONDecodeError as exc:
        print(f"tiermem: args is not JSON: {exc}", file=sys.stderr)
        return 2
    result = c.operators.invoke(args.name, payload, session=args.session, limit_s=args.limit)
    print(json.dumps(result))
    return 0
