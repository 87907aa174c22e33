import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_maze_agent_reaches_the_goal_isolated_and_naive(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("maze_agent", REPO / "examples" / "maze_agent.py")
    assert spec is not None and spec.loader is not None
    maze_agent = importlib.util.module_from_spec(spec)
    sys.modules["maze_agent"] = maze_agent  # dataclasses look their module up
    spec.loader.exec_module(maze_agent)
    out = tmp_path / "maze.json"
    argv = ["--size", "9", "--seed", "1", "--steps", "24", "--quiet", "--out", str(out)]
    assert maze_agent.main(argv) == 0
    doc = json.loads(out.read_text())
    summary = doc["summary"]
    for mode in ("naive", "isolated"):
        assert summary[mode]["goals_reached"] >= 1, mode
        assert len(doc["per_step"][mode]) == 24
    assert summary["isolated"]["reclaimed_bytes"] > 0
    assert summary["naive"]["reclaimed_bytes"] == 0
    assert (
        summary["isolated"]["context_growth_bytes"] < summary["naive"]["context_growth_bytes"] / 10
    )
    assert all(g["met"] for g in doc["goals"] if "reaches" in g["name"])
