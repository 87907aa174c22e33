"""The built-in operators and their argument schemas."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from tiermem.server.errors import InvalidArgument, NotFound, PermissionDenied
from tiermem.server.operators.mathexpr import math_eval
from tiermem.server.operators.paths import graph_shortest_path, grid_shortest_path
from tiermem.server.operators.registry import ArgSpec, Operator, OperatorContext, OperatorRegistry


def _scope(args: dict[str, Any], ctx: OperatorContext) -> str:
    """The session whose data an operator reads: the argument, else the caller's."""
    session: str = args.get("session") or ctx.session
    if not session:
        raise InvalidArgument("name a session (argument 'session') or invoke in one")
    ctx.may_read_session(session)
    return session


def vector_topk(args: dict[str, Any], ctx: OperatorContext) -> list[dict[str, Any]]:
    indexes = ctx.service("indexes")
    name = args["collection"]
    if name != "scratch":  # "NAMESPACE/NAME" or a name in "default"
        namespace, _, _ = name.rpartition("/")
        ctx.may_read(namespace or "default")
    index = indexes.get(name)
    if index is None:
        raise NotFound(
            f"no collection {name!r} ('scratch', or a vector collection 'NAMESPACE/NAME'; "
            "ListCollections shows a namespace's)"
        )
    if (args["vector"] is None) == (args["text"] is None):
        raise InvalidArgument("pass exactly one of vector and text")
    if args["vector"] is not None:
        vec = np.asarray(args["vector"], dtype=np.float32)
        if vec.ndim != 1 or len(vec) != index.dim or not np.isfinite(vec).all():
            raise InvalidArgument(f"vector must be {index.dim} finite numbers")
    else:
        vec = ctx.service("embedder").embed([args["text"]])[0]
    k = args["k"]
    if not 1 <= k <= 1000:
        raise InvalidArgument("k must be in 1..1000")
    session = args["session"] or ctx.session
    if ctx.session and session != ctx.session:
        raise PermissionDenied(f"session {ctx.session!r} may search only its own entries")
    if name == "scratch":  # every namespace's records: one session's, or a reader of all
        if session:
            ctx.may_read_session(session)
        else:
            ctx.may_read("*")
    flt: dict[str, Any] = {"kinds": set(args["kinds"] or ()), "tags": set(args["tags"] or ())}
    if session:
        flt["session"] = session
    hits = index.search(vec, k, flt)
    return [
        {
            "id": h.id,
            "score": round(h.score, 6),
            "session": h.payload.get("session"),
            "kind": h.payload.get("kind"),
            "tags": sorted(h.payload.get("tags", ())),
        }
        for h in hits
    ]


def scratch_summarize_counts(args: dict[str, Any], ctx: OperatorContext) -> dict[str, Any]:
    from tiermem.server.scratch.records import RecordKind
    from tiermem.server.scratch.service import ReplayFilter

    session = _scope(args, ctx)
    flt = ReplayFilter(since_ms=args["since_ms"], until_ms=args["until_ms"])
    records = ctx.service("scratch").replay(session, flt, caller=ctx.session)
    by_kind: Counter[str] = Counter()
    by_tag: Counter[str] = Counter()
    key_nodes = 0
    for i, r in enumerate(records):
        if i % 4096 == 0:
            ctx.check()
        by_kind[RecordKind(r.kind).name] += 1
        by_tag.update(r.tags)
        key_nodes += r.key_node
    return {
        "session": session,
        "total": len(records),
        "by_kind": dict(sorted(by_kind.items())),
        "by_tag": dict(by_tag.most_common(args["top_tags"])),
        "key_nodes": key_nodes,
        "first_ts_ms": records[0].ts_ms if records else None,
        "last_ts_ms": records[-1].ts_ms if records else None,
    }


_RECORD_ARGS = (
    ArgSpec("record_key", "str", "key of a scratch record holding the input as JSON", False, ""),
    ArgSpec("record_session", "str", "session of that record (default: the caller's)", False, ""),
)

BUILTINS = (
    Operator(
        "graph.shortest_path",
        graph_shortest_path,
        "Dijkstra shortest path on a weighted graph given inline or as a scratch record "
        '{"edges": [[u, v, w], ...], "directed": bool}',
        (
            ArgSpec("source", "any", "start node (string or integer)"),
            ArgSpec("target", "any", "end node"),
            ArgSpec("edges", "list", "[[u, v], or [u, v, weight >= 0], ...]", False, None),
            ArgSpec("directed", "bool", "edges go one way only", False, False),
            *_RECORD_ARGS,
        ),
        '{"distance": number | null, "path": [node, ...]}',
    ),
    Operator(
        "grid.shortest_path",
        grid_shortest_path,
        "A* shortest path on an occupancy grid (rows of '.'/'#' or of 0/1), "
        "4-connected or 8-connected without corner cutting",
        (
            ArgSpec("start", "list", "[row, col]"),
            ArgSpec("goal", "list", "[row, col]"),
            ArgSpec("grid", "list", "rows: strings ('#', '1' or 'X' blocked) or 0/1 lists", False),
            ArgSpec("diagonal", "bool", "allow diagonal moves (cost sqrt 2)", False, False),
            *_RECORD_ARGS,
        ),
        '{"length": number | null, "steps": int | null, "path": [[row, col], ...]}',
    ),
    Operator(
        "math.eval",
        math_eval,
        "Safe arithmetic: numbers, + - * / // % **, pi/e/tau, sqrt, log, exp, trig, "
        "min/max/abs/round/floor/ceil/hypot and the given variables",
        (
            ArgSpec("expression", "str", "e.g. 'sqrt(x**2 + y**2)'"),
            ArgSpec("vars", "dict", "variable name -> number", False, {}),
        ),
        '{"value": number}',
    ),
    Operator(
        "vector.topk",
        vector_topk,
        "The k nearest entries of a collection (cosine) to a vector or a text",
        (
            ArgSpec("collection", "str", "collection name", False, "scratch"),
            ArgSpec("vector", "list", "query vector", False, None),
            ArgSpec("text", "str", "query text (embedded by the daemon)", False, None),
            ArgSpec("k", "int", "how many", False, 5),
            ArgSpec("session", "str", "only this session's entries", False, ""),
            ArgSpec("kinds", "list", "record kinds (ints) to keep", False, None),
            ArgSpec("tags", "list", "keep entries with any of these tags", False, None),
        ),
        '[{"id", "score", "session", "kind", "tags"}, ...]',
    ),
    Operator(
        "scratch.summarize_counts",
        scratch_summarize_counts,
        "Counts of a session's scratch records by kind and tag (buffered ones included)",
        (
            ArgSpec("session", "str", "the session (default: the caller's)", False, ""),
            ArgSpec("since_ms", "int", "from this unix ms (inclusive)", False, 0),
            ArgSpec("until_ms", "int", "until this unix ms (exclusive), 0 = no end", False, 0),
            ArgSpec("top_tags", "int", "most frequent tags to list", False, 50),
        ),
        '{"total", "by_kind": {...}, "by_tag": {...}, "key_nodes", "first_ts_ms", "last_ts_ms"}',
    ),
)


def register_builtins(registry: OperatorRegistry) -> None:
    for op in BUILTINS:
        registry.register(op)
