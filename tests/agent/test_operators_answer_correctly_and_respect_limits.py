import itertools
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from tiermem.client import (
    Client,
    InvalidArgumentError,
    NotFoundError,
    RecordKind,
)
from tiermem.client.errors import DeadlineError
from tiermem.server.app import Daemon
from tiermem.server.operators.registry import (
    ArgSpec,
    Operator,
    OperatorContext,
    OperatorRegistry,
)


@pytest.mark.parametrize("directed", [False, True])
def test_graph_shortest_path_matches_networkx_on_random_graphs(
    aclient: Client, directed: bool
) -> None:
    rng = random.Random(7 + directed)
    for _ in range(8):
        n = rng.randint(5, 60)
        edges = [
            [rng.randrange(n), rng.randrange(n), round(rng.uniform(0, 10), 3)]
            for _ in range(rng.randint(n, 4 * n))
        ]
        graph: Any = nx.DiGraph() if directed else nx.Graph()
        graph.add_nodes_from({u for e in edges for u in e[:2]})
        for u, v, w in edges:  # keep the lightest of parallel edges, as Dijkstra does
            if not graph.has_edge(u, v) or graph[u][v]["weight"] > w:
                graph.add_edge(u, v, weight=w)
        nodes = sorted(graph.nodes)
        for _ in range(5):
            s, t = rng.choice(nodes), rng.choice(nodes)
            got = aclient.operators.invoke(
                "graph.shortest_path",
                {"edges": edges, "source": s, "target": t, "directed": directed},
            )
            try:
                want = nx.dijkstra_path_length(graph, s, t)
            except nx.NetworkXNoPath:
                assert got == {"distance": None, "path": []}
                continue
            assert got["distance"] == pytest.approx(want)
            path = got["path"]
            assert path[0] == s and path[-1] == t
            assert sum(graph[u][v]["weight"] for u, v in itertools.pairwise(path)) == (
                pytest.approx(want)
            )


def test_grid_shortest_path_matches_bfs_on_random_grids(aclient: Client) -> None:
    rng = random.Random(11)
    for _ in range(10):
        rows, cols = rng.randint(3, 25), rng.randint(3, 25)
        grid = [
            "".join("#" if rng.random() < 0.3 else "." for _ in range(cols)) for _ in range(rows)
        ]
        free = [(r, c) for r in range(rows) for c in range(cols) if grid[r][c] == "."]
        if len(free) < 2:
            continue
        g = nx.grid_2d_graph(rows, cols)
        g.remove_nodes_from([(r, c) for r in range(rows) for c in range(cols) if grid[r][c] == "#"])
        for _ in range(5):
            a, b = rng.choice(free), rng.choice(free)
            got = aclient.operators.invoke(
                "grid.shortest_path", {"grid": grid, "start": list(a), "goal": list(b)}
            )
            try:
                want = nx.shortest_path_length(g, a, b)
            except nx.NetworkXNoPath:
                assert got["length"] is None
                continue
            assert got["steps"] == want and got["length"] == want
            cells = [tuple(p) for p in got["path"]]
            assert all(grid[r][c] == "." for r, c in cells)
            assert all(
                abs(r1 - r2) + abs(c1 - c2) == 1 for (r1, c1), (r2, c2) in itertools.pairwise(cells)
            )


def test_graph_and_grid_can_come_from_a_scratch_record(aclient: Client) -> None:
    s = aclient.sessions.open(label="main")
    sc = aclient.as_session(s.id)
    sc.scratch.append(
        s.id,
        RecordKind.OBSERVATION,
        '{"edges": [["a","b",1],["b","c",2],["a","c",5]]}',
        key="graph",
    )
    sc.scratch.append(s.id, RecordKind.OBSERVATION, '{"grid": ["..", "#."]}', key="map")
    got = sc.operators.invoke(
        "graph.shortest_path", {"record_key": "graph", "source": "a", "target": "c"}
    )
    assert got == {"distance": 3.0, "path": ["a", "b", "c"]}
    got = sc.operators.invoke(
        "grid.shortest_path", {"record_key": "map", "start": [0, 0], "goal": [1, 1]}
    )
    assert got["steps"] == 2
    other = aclient.sessions.open(label="other")
    with pytest.raises(NotFoundError):  # another session's records are not visible
        aclient.as_session(other.id).operators.invoke(
            "graph.shortest_path",
            {"record_key": "graph", "record_session": s.id, "source": "a", "target": "c"},
        )


def test_math_eval_is_safe_arithmetic(aclient: Client) -> None:
    ev = aclient.operators.invoke
    assert ev("math.eval", {"expression": "2 + 3 * 4 - 2 ** 3"}) == {"value": 6}
    assert ev("math.eval", {"expression": "sqrt(x**2 + y**2)", "vars": {"x": 3, "y": 4}}) == {
        "value": 5.0
    }
    assert ev("math.eval", {"expression": "max(1, floor(pi), 2) // 1"}) == {"value": 3}
    for bad in (
        "9**9**9",
        "__import__('os').system('true')",
        "(1).__class__",
        "1/0",
        "a + 1",
        "[1, 2]",
        "x" * 20_000,
        "lambda: 1",
    ):
        with pytest.raises(InvalidArgumentError):
            ev("math.eval", {"expression": bad})


def test_vector_topk_and_summarize_counts(aclient: Client) -> None:
    s = aclient.sessions.open(label="main")
    sc = aclient.as_session(s.id)
    for text, tags in (
        ("wall to the north", ["wall"]),
        ("door to the east", ["door"]),
        ("wall to the south", ["wall"]),
    ):
        sc.scratch.append(s.id, RecordKind.OBSERVATION, text, tags=tags)
    sc.scratch.append(s.id, RecordKind.DECISION, "go east", key_node=False)
    aclient.scratch.flush()
    hits = sc.operators.invoke("vector.topk", {"text": "a door to the east", "k": 2})
    east = [r.id for r in sc.scratch.replay(s.id) if r.payload == b"door to the east"]
    assert hits[0]["id"] == east[0] and len(hits) == 2 and hits[0]["session"] == s.id
    counts = sc.operators.invoke("scratch.summarize_counts", {})
    assert counts["total"] == 4
    assert counts["by_kind"] == {"DECISION": 1, "OBSERVATION": 3}
    assert counts["by_tag"] == {"wall": 2, "door": 1}


def test_bad_arguments_are_rejected_with_a_clear_status(aclient: Client) -> None:
    inv = aclient.operators.invoke
    with pytest.raises(NotFoundError):
        inv("no.such.op", {})
    with pytest.raises(InvalidArgumentError, match="required"):
        inv("grid.shortest_path", {"grid": ["."], "start": [0, 0]})
    with pytest.raises(InvalidArgumentError, match="must be list"):
        inv("grid.shortest_path", {"grid": ["."], "start": "0,0", "goal": [0, 0]})
    with pytest.raises(InvalidArgumentError, match="unknown argument"):
        inv("math.eval", {"expression": "1", "extra": 2})
    with pytest.raises(InvalidArgumentError, match="weight"):
        inv("graph.shortest_path", {"edges": [[1, 2, -1]], "source": 1, "target": 2})
    with pytest.raises(InvalidArgumentError, match="outside"):
        inv("grid.shortest_path", {"grid": [".."], "start": [0, 0], "goal": [3, 3]})
    with pytest.raises(InvalidArgumentError, match="timeout_s"):
        inv("math.eval", {"expression": "1"}, limit_s=10_000)
    names = {o.name: o for o in aclient.operators.list()}
    assert set(names) >= {
        "graph.shortest_path",
        "grid.shortest_path",
        "math.eval",
        "vector.topk",
        "scratch.summarize_counts",
    }
    assert [a.name for a in names["math.eval"].args] == ["expression", "vars"]


def test_an_operator_past_its_time_limit_is_stopped(adaemon: Daemon, aclient: Client) -> None:
    stopped = threading.Event()

    def spin(args: dict[str, Any], ctx: OperatorContext) -> int:
        try:
            while True:
                ctx.check()
                time.sleep(0.001)
        finally:
            stopped.set()

    adaemon.operators.registry.register(Operator("test.spin", spin, "loops until stopped"))
    with pytest.raises(DeadlineError, match=r"time limit of 0\.2"):
        aclient.operators.invoke("test.spin", {}, limit_s=0.2)
    assert stopped.wait(10)
    assert aclient.operators.invoke("math.eval", {"expression": "1+1"}) == {"value": 2}


def test_third_party_operators_register_through_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tm_plugin_ops.py").write_text(
        "from tiermem.server.operators.registry import Operator, ArgSpec\n"
        "def double(args, ctx):\n    return {'value': 2 * args['x']}\n"
        "OPERATORS = [Operator('plugin.double', double, 'doubles x', (ArgSpec('x', 'float'),))]\n"
    )
    dist = tmp_path / "tm_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tm-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[tiermem.operators]\ndouble = tm_plugin_ops:OPERATORS\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = OperatorRegistry()
    assert registry.load_entry_points() == 1
    op = registry.get("plugin.double")
    assert op is not None and op.origin == "tm-plugin"
    ctx = OperatorContext(5.0, "", {}, {})
    assert op.fn(op.bind({"x": 2.5}), ctx) == {"value": 5.0}
    sys.modules.pop("tm_plugin_ops", None)
    _ = ArgSpec  # the schema type plugins use
