"""A maze explorer on tiermem's agent memory: isolated child sessions versus one
session that keeps everything.

The agent sees only the cells next to it. Its main session holds the map it
has learned (an object), its position and goal (keyed scratch records); path
planning goes to the daemon's ``grid.shortest_path`` operator. Every step it
"thinks about" where to go: it weighs each open move by planning from there to
the goal on its optimistic map (unknown cells count as free). That sub-task's
working state (the map it read, one tool-call and one thought record per
candidate, a score object and, with ``--model tiny``, the real KV cache of a
small random-weight transformer that read the local view) lives:

* ``isolated`` — in a child session that reads the parent's map through a
  read-only grant and returns one line ("E (3,4) 37"); closing it frees all of
  its state at once;
* ``naive`` — in the main session itself, where it stays.

Experience records ("step 12 at (3,4): walls N,E; moved S") go to a memory
session through the write-back scratchpad in both modes. After reaching the
goal the agent walks back to the start and so on, until ``--steps`` steps.

Per step it prints and records: the main session's context bytes (payload
bytes of its scratch records plus the objects it owns), bytes held per tier
(DRAM/HBM engine bytes, scratch buffer, memory index, SSD), bytes reclaimed by
child closes, and scratchpad write batches.

    python examples/maze_agent.py --size 21 --seed 1 --steps 300            # both modes
    python examples/maze_agent.py --mode isolated --addr 127.0.0.1:50051    # a running daemon
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiermem.client import Client, Grant, Kind, NewRecord, RecordDurability, RecordKind

MOVES = {"N": (-1, 0), "S": (1, 0), "W": (0, -1), "E": (0, 1)}


def generate_maze(size: int, seed: int) -> list[str]:
    """A perfect maze (recursive backtracker) on a ``size`` x ``size`` grid (odd size)."""
    if size < 5 or size % 2 == 0:
        raise ValueError("size must be odd and at least 5")
    rng = random.Random(seed)
    cells = [["#"] * size for _ in range(size)]
    stack = [(1, 1)]
    cells[1][1] = "."
    while stack:
        r, c = stack[-1]
        options = [
            (r + 2 * dr, c + 2 * dc, dr, dc)
            for dr, dc in MOVES.values()
            if 0 < r + 2 * dr < size - 1 and 0 < c + 2 * dc < size - 1
            if cells[r + 2 * dr][c + 2 * dc] == "#"
        ]
        if not options:
            stack.pop()
            continue
        nr, nc, dr, dc = rng.choice(options)
        cells[r + dr][c + dc] = "."
        cells[nr][nc] = "."
        stack.append((nr, nc))
    return ["".join(row) for row in cells]


class TinyModel:
    """A small random-weight GPT-2 that reads text byte by byte; its KV cache is
    real model state (2 layers x keys/values) to store in a session."""

    def __init__(self, seed: int) -> None:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(seed)
        config = GPT2Config(
            vocab_size=256, n_positions=512, n_embd=64, n_layer=2, n_head=4,
            bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        self._torch = torch
        self._model = GPT2LMHeadModel(config).eval()

    def kv(self, text: str) -> list[Any]:
        torch = self._torch
        ids = torch.tensor([list(text.encode()[:500])])
        with torch.inference_mode():
            cache = self._model(ids, use_cache=True).past_key_values
        out = []
        for layer in getattr(cache, "layers", []):
            out += [layer.keys.contiguous(), layer.values.contiguous()]
        if not out:  # older transformers: tuples of (key, value)
            for k, v in cache:
                out += [k.contiguous(), v.contiguous()]
        return out


@dataclass
class RunStats:
    mode: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    goals_reached: int = 0
    first_goal_step: int | None = None
    reclaimed_bytes: int = 0
    thinks: int = 0
    seconds: float = 0.0


class MazeAgent:
    def __init__(
        self, client: Client, maze: list[str], mode: str, model: TinyModel | None, quiet: bool
    ) -> None:
        self.client = client
        self.maze = maze
        self.size = len(maze)
        self.mode = mode
        self.model = model
        self.quiet = quiet
        self.start = (1, 1)
        self.goal = (self.size - 2, self.size - 2)
        self.pos = self.start
        self.known = [["?"] * self.size for _ in range(self.size)]
        self.main = client.sessions.open(label=f"maze-main-{mode}")
        self.memory = client.sessions.open(label=f"maze-experience-{mode}")
        self.mc = client.as_session(self.main.id)
        self.stats = RunStats(mode)
        self.step_no = 0

    # -- the main session's state ---------------------------------------------------------
    def observe(self) -> list[str]:
        r, c = self.pos
        self.known[r][c] = "."
        walls = []
        for name, (dr, dc) in MOVES.items():
            cell = self.maze[r + dr][c + dc]
            self.known[r + dr][c + dc] = cell
            if cell == "#":
                walls.append(name)
        return walls

    def believed(self) -> list[str]:
        """The map as the agent plans on it: unknown cells count as free."""
        return ["".join("#" if ch == "#" else "." for ch in row) for row in self.known]

    def save_state(self) -> None:
        known = "\n".join("".join(row) for row in self.known).encode()
        self.mc.put(Kind.BLOB, f"maze/{self.main.id}/map", known)
        self.mc.scratch.append_many(
            self.main.id,
            [
                NewRecord(RecordKind.DECISION, json.dumps(self.pos), key="position"),
                NewRecord(RecordKind.DECISION, json.dumps(self.goal), key="goal"),
            ],
        )

    # -- the "think about this" sub-task --------------------------------------------------
    def think(self, walls: list[str]) -> str:
        """Weigh each open move; returns the one-line answer (e.g. "E (3,4) 37")."""
        self.stats.thinks += 1
        if self.mode == "isolated":
            child = self.client.sessions.open(
                parent=self.main.id,
                label=f"think-{self.step_no}",
                grants=[Grant(Kind.BLOB, f"maze/{self.main.id}/")],
            )
            worker, session, prefix = self.client.as_session(child.id), child.id, "think"
            # Read the parent's map through the grant: no copy is made.
            worker.get(Kind.BLOB, f"maze/{self.main.id}/map")
        else:
            worker, session, prefix = self.mc, self.main.id, f"think/{self.step_no}"
        answer = self._weigh(worker, session, prefix, walls)
        if self.mode == "isolated":
            report = self.client.sessions.close(session, answer)
            self.stats.reclaimed_bytes += report.freed_bytes
        else:
            self.mc.scratch.append(session, RecordKind.RESULT, answer)
        return answer

    def _weigh(self, worker: Client, session: str, prefix: str, walls: list[str]) -> str:
        grid = self.believed()
        records = [NewRecord(RecordKind.OBSERVATION, "\n".join(grid), tags=["map"])]
        best: tuple[float, str, tuple[int, int]] | None = None
        for name, (dr, dc) in MOVES.items():
            if name in walls:
                continue
            nxt = (self.pos[0] + dr, self.pos[1] + dc)
            args = {"grid": grid, "start": list(nxt), "goal": list(self.goal)}
            plan = worker.operators.invoke("grid.shortest_path", args, session=session)
            length = plan["length"]
            records.append(
                NewRecord(
                    RecordKind.TOOL_CALL,
                    json.dumps({"op": "grid.shortest_path", "from": nxt, "result": plan}),
                    tags=["plan"],
                )
            )
            score = float("inf") if length is None else 1 + length
            records.append(
                NewRecord(RecordKind.THOUGHT, f"move {name} to {nxt}: {score} steps to the goal")
            )
            if best is None or score < best[0]:
                best = (score, name, nxt)
        worker.scratch.append_many(session, records)
        scores = json.dumps({"position": self.pos, "walls": walls, "best": best}).encode()
        worker.put(Kind.SCRATCH, f"{prefix}/scores", scores)
        if self.model is not None:
            view = "\n".join(grid[max(0, self.pos[0] - 3) : self.pos[0] + 4])
            for i, tensor in enumerate(self.model.kv(view + "\n" + scores.decode())):
                worker.put_tensor(Kind.KV_BLOCK, f"{prefix}/kv/{i}", tensor)
        if best is None:
            raise RuntimeError(f"no open move at {self.pos}")
        return f"{best[1]} {best[2][0]},{best[2][1]} {best[0]:g}"

    # -- one step ---------------------------------------------------------------------------
    def step(self) -> None:
        self.step_no += 1
        walls = self.observe()
        self.save_state()
        answer = self.think(walls)
        move = answer.split()[0]
        dr, dc = MOVES[move]
        before = self.pos
        self.pos = (self.pos[0] + dr, self.pos[1] + dc)
        self.client.scratch.append(
            self.memory.id,
            RecordKind.OBSERVATION,
            f"step {self.step_no} at {before}: walls {','.join(walls) or 'none'}; moved {move}",
            tags=["experience"],
            durability=RecordDurability.LOGGED,
        )
        if self.pos == self.goal:
            self.stats.goals_reached += 1
            if self.stats.first_goal_step is None:
                self.stats.first_goal_step = self.step_no
            self.client.scratch.append(
                self.memory.id,
                RecordKind.DECISION,
                f"reached {self.goal} at step {self.step_no}",
                tags=["goal"],
                key_node=True,
            )
            self.goal = self.start if self.goal != self.start else (self.size - 2, self.size - 2)
        self.stats.steps.append(self.measure())
        if not self.quiet:
            s = self.stats.steps[-1]
            print(
                f"{self.mode:8} step {self.step_no:4} pos {self.pos}"
                f"  context {s['context_bytes']:>9} B"
                f"  DRAM+HBM {s['dram_hbm_bytes']:>9} B  index {s['index_bytes']:>8} B"
                f"  reclaimed {s['reclaimed_bytes']:>10} B  batches {s['scratch_write_batches']}",
                flush=True,
            )

    def context_bytes(self) -> int:
        records = self.mc.scratch.replay(self.main.id)
        objects = self.mc.list(session=self.main.id)
        return sum(len(r.payload) for r in records) + sum(o.size_bytes for o in objects)

    def measure(self) -> dict[str, Any]:
        stats = self.client.stats()
        scratch = self.client.scratch.stats()
        tiers = {t.tier.name: t.used_bytes for t in stats.tiers if t.enabled}
        memory = tiers.get("DRAM", 0) + tiers.get("HBM", 0) + scratch.buffered_bytes
        return {
            "step": self.step_no,
            "position": list(self.pos),
            "context_bytes": self.context_bytes(),
            "tier_bytes": tiers,
            "scratch_buffer_bytes": scratch.buffered_bytes,
            "scratch_stored_bytes": scratch.stored_bytes,
            "index_bytes": scratch.index_bytes,
            "dram_hbm_bytes": memory,
            "reclaimed_bytes": self.stats.reclaimed_bytes,
            "scratch_write_batches": scratch.write_batches,
            "scratch_flushes": scratch.flushes,
        }


@contextmanager
def daemon_address(addr: str | None, data_dir: Path) -> Iterator[str]:
    """``addr``, or a daemon started in this process for the duration."""
    if addr:
        yield addr
        return
    from prometheus_client import CollectorRegistry

    from tiermem.server.app import Daemon
    from tiermem.server.config import load_config

    config = load_config(
        data_dir=str(data_dir),
        server={"listen": "127.0.0.1:0", "shutdown_grace_s": 1.0},
        metrics={"listen": ""},
        tiers={
            "dram": {"capacity_bytes": 256 << 20},
            "hbm": {"enabled": True, "capacity_bytes": 64 << 20},
        },
        agent={"scratch": {"embedder": "hash", "flush_records": 256}},
    )
    daemon = Daemon(config, registry=CollectorRegistry())
    daemon.start()
    try:
        yield daemon.address
    finally:
        daemon.stop(grace_s=0)


def run_mode(args: argparse.Namespace, mode: str, maze: list[str]) -> RunStats:
    model = TinyModel(args.seed) if args.model == "tiny" else None
    with (
        tempfile.TemporaryDirectory(prefix="tiermem-maze-") as tmp,
        daemon_address(args.addr, Path(tmp)) as address,
        Client(address) as client,
    ):
        agent = MazeAgent(client, maze, mode, model, args.quiet)
        started = time.perf_counter()
        for _ in range(args.steps):
            agent.step()
        agent.stats.seconds = time.perf_counter() - started
        client.sessions.close(agent.main.id)
        client.sessions.close(agent.memory.id)
        return agent.stats


def growth(values: list[int]) -> int:
    """How much a per-step series grew: the peak of its last quarter minus the
    peak of its first quarter (after the first 10% of steps, the warm-up)."""
    n = len(values)
    start = n // 10
    first = values[start : start + max(1, n // 4)]
    last = values[n - max(1, n // 4) :]
    return max(last) - max(first)


def summarize(runs: dict[str, RunStats]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, run in runs.items():
        ctx = [s["context_bytes"] for s in run.steps]
        mem = [s["dram_hbm_bytes"] for s in run.steps]
        out[mode] = {
            "steps": len(run.steps),
            "goals_reached": run.goals_reached,
            "first_goal_step": run.first_goal_step,
            "thinks": run.thinks,
            "context_growth_bytes": ctx[-1] - ctx[0],
            "context_bytes_final": ctx[-1],
            "dram_hbm_growth_bytes": growth(mem),
            "dram_hbm_peak_bytes": max(mem),
            "index_growth_bytes": run.steps[-1]["index_bytes"] - run.steps[0]["index_bytes"],
            "reclaimed_bytes": run.reclaimed_bytes,
            "scratch_write_batches": run.steps[-1]["scratch_write_batches"],
            "seconds": round(run.seconds, 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--size", type=int, default=21, help="maze side (odd)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--mode", choices=["isolated", "naive", "both"], default="both")
    p.add_argument("--model", choices=["none", "tiny"], default="none")
    p.add_argument("--addr", default=None, help="a running daemon (default: start one here)")
    p.add_argument(
        "--out", default=None, help="JSON output (default: bench/results/maze_agent.json)"
    )
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    args = p.parse_args(argv)
    maze = generate_maze(args.size, args.seed)
    modes = ["naive", "isolated"] if args.mode == "both" else [args.mode]
    runs = {mode: run_mode(args, mode, maze) for mode in modes}
    summary = summarize(runs)
    print(json.dumps(summary, indent=2))
    goals = []
    if set(runs) == {"naive", "isolated"}:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from bench.common import goal

        naive, iso = summary["naive"], summary["isolated"]
        ratio = iso["context_growth_bytes"] / max(1, naive["context_growth_bytes"])
        goals = [
            goal("isolated context growth / naive", round(ratio, 4), 0.02, "ratio", False),
            goal(
                "isolated DRAM+HBM growth over the run",
                iso["dram_hbm_growth_bytes"],
                65536,
                "bytes",
                False,
            ),
            goal("isolated reaches the goal", float(iso["goals_reached"] > 0), 1.0, "bool", True),
            goal("naive reaches the goal", float(naive["goals_reached"] > 0), 1.0, "bool", True),
        ]
    details = {
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "quiet")},
        "maze": maze,
        "summary": summary,
        "per_step": {mode: run.steps for mode, run in runs.items()},
    }
    out = Path(args.out) if args.out else None
    if out is None and set(runs) == {"naive", "isolated"}:
        from bench.common import write_result

        write_result("maze_agent", goals, details)
    elif out is not None:
        from bench.common import machine_info

        doc = {"benchmark": "maze_agent", "machine": machine_info(), "goals": goals, **details}
        out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
