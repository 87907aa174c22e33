"""``tiermem vec ...``: vector collections from the command line.

Vectors come from a ``.npy`` file (n x d float32; ids from ``--ids FILE.npy``
or ``--first-id``) or JSON lines (``{"id": 7, "vector": [...], "payload": {...}}``,
``-`` for stdin).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built for every command: keep its imports light
    from tiermem.client import Client, Payload

METRICS = ["l2", "inner_product", "ip", "cosine"]
INDEXES = ["auto", "flat", "hnsw", "ivf_pq"]
_LS_COLUMNS = (("NAME", -24), ("DIM", 5), ("METRIC", -13), ("INDEX", -14), ("COUNT", 10))
LS_HEADER = " ".join(n.ljust(-w) if w < 0 else n.rjust(w) for n, w in _LS_COLUMNS)
LS_HEADER += " STATE    MEMORY"


def add_parser(sub: Any, client_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``vec`` and its subcommands on the main parser's subparsers."""
    p = sub.add_parser("vec", help="vector collections")
    vsub = p.add_subparsers(dest="vec_command", required=True)

    q = vsub.add_parser("create", help="create a collection")
    client_args(q)
    q.add_argument("name")
    q.add_argument("--dim", "-d", type=int, required=True, help="vector dimension")
    q.add_argument("--metric", choices=METRICS, default="l2")
    q.add_argument("--index", choices=INDEXES, default="auto")
    q.add_argument("--session", default="", help="owning session (dropped when it closes)")

    q = vsub.add_parser("upsert", help="insert or replace vectors from .npy or JSON lines")
    client_args(q)
    q.add_argument("name")
    q.add_argument("file", help=".npy (n x d), .jsonl, or - for JSON lines on stdin")
    q.add_argument("--ids", default=None, help=".npy of n int64 ids (with a .npy file)")
    q.add_argument("--first-id", type=int, default=0, help="ids first-id.. (with a .npy file)")

    q = vsub.add_parser("search", help="k nearest neighbours of one or more queries")
    client_args(q)
    q.add_argument("name")
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--query", help="one query: comma-separated floats")
    src.add_argument("--query-file", help=".npy of queries (nq x d)")
    q.add_argument("-k", type=int, default=10)
    q.add_argument(
        "--where", action="append", default=[], metavar="FIELD=VALUE",
        help="payload equality filter (repeatable; numbers are compared as numbers)",
    )  # fmt: skip
    q.add_argument("--session", default="", help="only vectors of this session")
    q.add_argument("--payloads", action="store_true", help="print payloads")

    q = vsub.add_parser("ls", help="list collections")
    client_args(q)

    q = vsub.add_parser("describe", help="show one collection")
    client_args(q)
    q.add_argument("name")

    q = vsub.add_parser("rm", help="delete vectors by id")
    client_args(q)
    q.add_argument("name")
    q.add_argument("ids", type=int, nargs="+")

    q = vsub.add_parser("drop", help="drop a collection")
    client_args(q)
    q.add_argument("name")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _scalar(text: str) -> str | int | float:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _read_vectors(args: argparse.Namespace) -> tuple[Any, Any, list[Payload | None] | None]:
    import numpy as np

    from tiermem.client import Payload

    if args.file.endswith(".npy"):
        vectors = np.load(args.file, allow_pickle=False).astype(np.float32)
        if args.ids:
            ids = np.load(args.ids, allow_pickle=False).astype(np.int64)
        else:
            ids = np.arange(args.first_id, args.first_id + len(vectors), dtype=np.int64)
        return ids, vectors, None
    stream = sys.stdin if args.file == "-" else open(args.file)  # noqa: SIM115
    ids_l, vecs, payloads = [], [], []
    with stream:
        for line in stream:
            if not line.strip():
                continue
            row = json.loads(line)
            ids_l.append(int(row["id"]))
            vecs.append(row["vector"])
            payloads.append(Payload(fields=row["payload"]) if row.get("payload") else None)
    has_payload = any(p is not None for p in payloads)
    return np.array(ids_l), np.array(vecs, dtype=np.float32), payloads if has_payload else None


def run(args: argparse.Namespace, client: Client) -> int:
    import numpy as np

    vec = client.vectors
    cmd = args.vec_command
    if cmd == "create":
        metric = "inner_product" if args.metric == "ip" else args.metric
        info = vec.create(
            args.name, args.dim, metric=metric, index=args.index, session=args.session
        )
        print(
            f"created {info.namespace}/{info.name}: dimension {info.dimension}, "
            f"{info.metric.name}, {info.index_type.name}"
        )
    elif cmd == "upsert":
        ids, vectors, payloads = _read_vectors(args)
        n = vec.upsert(args.name, ids, vectors, payloads)
        print(f"upserted {n} vectors into {args.name}")
    elif cmd == "search":
        if args.query:
            queries = np.array([[float(x) for x in args.query.split(",")]], dtype=np.float32)
        else:
            queries = np.load(args.query_file, allow_pickle=False).astype(np.float32)
        where = {}
        for item in args.where:
            field, sep, value = item.partition("=")
            if not sep:
                print(f"tiermem: --where {item!r}: use FIELD=VALUE", file=sys.stderr)
                return 2
            where[field] = _scalar(value)
        res = vec.search(
            args.name,
            queries,
            args.k,
            where=where or None,
            session=args.session,
            include_payloads=args.payloads,
        )
        print(
            f"{'QUERY':>5} {'RANK':>4} {'ID':>12} {'DISTANCE':>12}" + ("  PAYLOAD" * args.payloads)
        )
        for qi in range(res.ids.shape[0]):
            for rank in range(res.ids.shape[1]):
                vid = int(res.ids[qi, rank])
                if vid < 0:
                    break
                line = f"{qi:>5} {rank:>4} {vid:>12} {float(res.distances[qi, rank]):>12.6g}"
                if res.payloads is not None:
                    p = res.payloads[qi][rank]
                    line += "  " + (json.dumps(dict(p.fields)) if p is not None else "-")
                print(line)
    elif cmd == "ls":
        print(LS_HEADER)
        for info in vec.list():
            index = info.index_type.name
            if info.built_index != info.index_type:
                index += f"({info.built_index.name})"
            state = "loaded" if info.loaded else "on SSD"
            print(
                f"{info.name:<24} {info.dimension:>5} {info.metric.name:<13} {index:<14} "
                f"{info.count:>10} {state:<8} {_human(info.memory_bytes)}"
            )
    elif cmd == "describe":
        info = vec.describe(args.name)
        for key, value in (
            ("collection", f"{info.namespace}/{info.name}"),
            ("dimension", info.dimension),
            ("metric", info.metric.name),
            ("index", f"{info.index_type.name} (built: {info.built_index.name})"),
            ("count", info.count),
            ("state", f"{'loaded' if info.loaded else 'unloaded'} on {info.tier.name}"),
            ("memory", _human(info.memory_bytes)),
            ("snapshot", f"{_human(info.snapshot_bytes)} at seq {info.snapshot_seq}"),
            ("log seq", info.log_seq),
            ("session", info.session or "-"),
        ):
            print(f"{key + ':':<12} {value}")
    elif cmd == "rm":
        print(f"deleted {vec.delete(args.name, args.ids)} of {len(args.ids)} ids")
    elif cmd == "drop":
        if not vec.drop(args.name):
            print(f"tiermem: no collection {args.name!r}", file=sys.stderr)
            return 1
        print(f"dropped {args.name}")
    return 0
