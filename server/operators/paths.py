"""Shortest paths: Dijkstra on weighted graphs, A* on occupancy grids.

Both check the call's deadline every few thousand steps and refuse inputs
beyond the configured size limits (which bound their memory)."""

from __future__ import annotations

import heapq
import itertools
import json
import math
from typing import Any

from tiermem.server.errors import CapacityExceeded, InvalidArgument, NotFound
from tiermem.server.operators.registry import OperatorContext

_CHECK_EVERY = 4096
Node = str | int


def _node(value: Any, what: str) -> Node:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidArgument(f"{what} must be a string or an integer node id, got {value!r}")
    return value


def load_record_json(ctx: OperatorContext, key: str, session: str) -> Any:
    """The JSON payload of a keyed scratch record the calling session may read."""
    from tiermem.server.scratch.service import ReplayFilter

    owner = session or ctx.session
    if not owner:
        raise InvalidArgument("record_key needs a session: invoke in one or pass record_session")
    ctx.may_read_session(owner)
    records = ctx.service("scratch").replay(owner, ReplayFilter(key=key), caller=ctx.session)
    if not records:
        raise NotFound(f"no scratch record with key {key!r} in session {owner!r}")
    try:
        return json.loads(records[-1].payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"scratch record {key!r} does not hold JSON: {exc}") from None


def graph_shortest_path(args: dict[str, Any], ctx: OperatorContext) -> dict[str, Any]:
    edges, directed = args["edges"], args["directed"]
    if args["record_key"]:
        if edges is not None:
            raise InvalidArgument("pass either edges or record_key, not both")
        doc = load_record_json(ctx, args["record_key"], args["record_session"])
        if not isinstance(doc, dict) or not isinstance(doc.get("edges"), list):
            raise InvalidArgument('the graph record must hold {"edges": [[u, v, w], ...]}')
        edges = doc["edges"]
        directed = bool(doc.get("directed", directed))
    if edges is None:
        raise InvalidArgument("graph.shortest_path needs edges or record_key")
    limit = ctx.limits["max_graph_edges"]
    if len(edges) > limit:
        raise CapacityExceeded(f"{len(edges)} edges; the limit is {limit} (max_graph_edges)")
    adjacency: dict[Node, list[tuple[Node, float]]] = {}
    for i, edge in enumerate(edges):
        if not isinstance(edge, list) or len(edge) not in (2, 3):
            raise InvalidArgument(f"edge #{i} must be [u, v] or [u, v, weight]")
        u, v = _node(edge[0], f"edge #{i} source"), _node(edge[1], f"edge #{i} target")
        w = edge[2] if len(edge) == 3 else 1.0
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
            raise InvalidArgument(f"edge #{i} weight must be a finite number >= 0, got {w!r}")
        adjacency.setdefault(u, []).append((v, float(w)))
        adjacency.setdefault(v, [])
        if not directed:
            adjacency[v].append((u, float(w)))
    source, target = _node(args["source"], "source"), _node(args["target"], "target")
    for name, node in (("source", source), ("target", target)):
        if node not in adjacency:
            raise InvalidArgument(f"{name} {node!r} is not a node of the graph")
    dist: dict[Node, float] = {source: 0.0}
    prev: dict[Node, Node] = {}
    tie = itertools.count()
    heap: list[tuple[float, int, Node]] = [(0.0, next(tie), source)]
    done: set[Node] = set()
    pops = 0
    while heap:
        d, _, u = heapq.heappop(heap)
        pops += 1
        if pops % _CHECK_EVERY == 0:
            ctx.check()
        if u in done:
            continue
        done.add(u)
        if u == target:
            break
        for v, w in adjacency[u]:
            nd = d + w
            if nd < dist.get(v, math.inf):
                dist[v] = nd
                prev[v] = u
                heapq.heappush(heap, (nd, next(tie), v))
    if target not in done:
        return {"distance": None, "path": []}
    path = [target]
    while path[-1] != source:
        path.append(prev[path[-1]])
    path.reverse()
    return {"distance": dist[target], "path": path}


def _cell(value: Any, what: str, rows: int, cols: int) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    ):
        raise InvalidArgument(f"{what} must be [row, col]")
    r, c = value
    if not (0 <= r < rows and 0 <= c < cols):
        raise InvalidArgument(f"{what} {value} is outside the {rows}x{cols} grid")
    return r, c


def _blocked_grid(grid: Any, limit: int) -> list[list[bool]]:
    if not isinstance(grid, list) or not grid:
        raise InvalidArgument("grid must be a non-empty list of rows")
    cols = len(grid[0])
    if len(grid) * cols > limit:
        raise CapacityExceeded(f"grid has {len(grid) * cols} cells; the limit is {limit}")
    out: list[list[bool]] = []
    for i, row in enumerate(grid):
        if len(row) != cols or not isinstance(row, str | list):
            raise InvalidArgument(f"grid row {i} must be a string or list of length {cols}")
        if isinstance(row, str):
            out.append([ch in "#1X" for ch in row])
        else:
            if not all(isinstance(x, int) for x in row):
                raise InvalidArgument(f"grid row {i} must hold 0 (free) / 1 (blocked) integers")
            out.append([bool(x) for x in row])
    return out


def grid_shortest_path(args: dict[str, Any], ctx: OperatorContext) -> dict[str, Any]:
    grid = args["grid"]
    if args["record_key"]:
        if grid is not None:
            raise InvalidArgument("pass either grid or record_key, not both")
        doc = load_record_json(ctx, args["record_key"], args["record_session"])
        grid = doc.get("grid") if isinstance(doc, dict) else None
    if grid is None:
        raise InvalidArgument("grid.shortest_path needs grid or record_key")
    blocked = _blocked_grid(grid, ctx.limits["max_grid_cells"])
    rows, cols = len(blocked), len(blocked[0])
    start = _cell(args["start"], "start", rows, cols)
    goal = _cell(args["goal"], "goal", rows, cols)
    diagonal = args["diagonal"]
    if blocked[start[0]][start[1]] or blocked[goal[0]][goal[1]]:
        return {"length": None, "steps": None, "path": []}
    steps = [(-1, 0, 1.0), (1, 0, 1.0), (0, -1, 1.0), (0, 1, 1.0)]
    if diagonal:
        s2 = math.sqrt(2)
        steps += [(-1, -1, s2), (-1, 1, s2), (1, -1, s2), (1, 1, s2)]
    gr, gc = goal

    def h(r: int, c: int) -> float:
        dr, dc = abs(r - gr), abs(c - gc)
        if diagonal:
            return (dr + dc) + (math.sqrt(2) - 2) * min(dr, dc)
        return float(dr + dc)

    g: dict[tuple[int, int], float] = {start: 0.0}
    prev: dict[tuple[int, int], tuple[int, int]] = {}
    tie = itertools.count()
    heap = [(h(*start), next(tie), start)]
    closed: set[tuple[int, int]] = set()
    pops = 0
    while heap:
        _, _, cur = heapq.heappop(heap)
        pops += 1
        if pops % _CHECK_EVERY == 0:
            ctx.check()
        if cur in closed:
            continue
        if cur == goal:
            break
        closed.add(cur)
        r, c = cur
        base = g[cur]
        for dr, dc, cost in steps:
            nr, nc = r + dr, c + dc
            if not (0 <= nr < rows and 0 <= nc < cols) or blocked[nr][nc]:
                continue
            if dr and dc and (blocked[r][nc] or blocked[nr][c]):
                continue  # no corner cutting
            nxt = (nr, nc)
            ng = base + cost
            if ng < g.get(nxt, math.inf):
                g[nxt] = ng
                prev[nxt] = cur
                heapq.heappush(heap, (ng + h(nr, nc), next(tie), nxt))
    if goal not in g:
        return {"length": None, "steps": None, "path": []}
    path = [goal]
    while path[-1] != start:
        path.append(prev[path[-1]])
    path.reverse()
    return {"length": g[goal], "steps": len(path) - 1, "path": [list(p) for p in path]}
