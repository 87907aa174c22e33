"""LookupPrefix latency over a 1,000-chunk chain (goal: p99 <= 2 ms).

One run: a daemon (`tiermem serve`, its own process) holds a stored 1,000-chunk
chain; a client asks for the whole chain (every chunk stored: the worst case,
no early stop) many times and reports p50/p90/p99. The client carries the
lookup on a bulk session (a framed request on a pooled TCP connection, no gRPC
call) when the daemon offers one, as it does by default. Beside it, in the same
run: a 1-chunk lookup (the transport's round-trip floor), the same two over
gRPC (a client limited to the gRPC path), and the in-process cost of the index
probe alone, so the figure can be split into transport and lookup.

    .venv/bin/python -m bench.kv_lookup [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.common import REPO, goal, write_result
from tiermem.client import Client, KvBlock, KvScope

CHAIN = 1000


def start_daemon(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable, "-m", "tiermem.cli.main", "serve", "--data-dir", str(data_dir),
        "--listen", "127.0.0.1:0", "--metrics-listen", "",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=REPO)  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("listening on "):
            return proc, line.split()[-1]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("the daemon did not start")


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return {
        "p50_ms": round(pick(0.50), 4),
        "p90_ms": round(pick(0.90), 4),
        "p99_ms": round(pick(0.99), 4),
        "mean_ms": round(statistics.fmean(ms), 4),
        "samples": len(ms),
    }


def timed(fn: Callable[[], Any], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def index_probe_cost(rounds: int) -> dict[str, float]:
    """The daemon's own work for one lookup, in process: the chain's keys (built
    lazily), the vectorised hash of the 64-bit chunk hashes and the index probe."""
    from tiermem.client.kv import hash_bytes
    from tiermem.server.catalog.index import ObjectIndex
    from tiermem.server.services.kv import KvScope as ServerScope
    from tiermem.server.services.kv import PackedHashes

    scope = ServerScope("default", "bench-model", dtype="bfloat16")
    hashes = [hash_bytes((h * 0x9E3779B97F4A7C15) % (1 << 64)) for h in range(CHAIN)]
    index = ObjectIndex()
    for k in scope.encoded_keys(hashes):
        index.insert(k)
    packed = b"".join(hashes)

    def probe() -> None:
        keys = scope.encoded_keys(PackedHashes(packed, 8))
        chunks = keys.chunks()
        if chunks is None or (index.find_kv_chain(keys.base, chunks, keys) < 0).any():
            raise RuntimeError("the probe missed a stored chunk")

    return percentiles(timed(probe, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kv-lookup-") as tmp:
        proc, address = start_daemon(Path(tmp) / "data")
        try:
            with Client(address) as client:
                client.wait_ready()
                scope = KvScope("bench-model", dtype="bfloat16", salt="bench")
                chain = [
                    (h * 0x9E3779B97F4A7C15) % (1 << 64) for h in range(CHAIN)
                ]  # uint64, as LMCache
                block = torch.zeros(2, 16, dtype=torch.bfloat16)
                client.kv.put_blocks(scope, [KvBlock(h, block) for h in chain])
                if client.kv.lookup_prefix(scope, chain).stored_chunks != CHAIN:
                    raise RuntimeError("the chain was not stored")
                timed(lambda: client.kv.lookup_prefix(scope, chain), 200)  # warm up
                full = percentiles(
                    timed(lambda: client.kv.lookup_prefix(scope, chain), args.rounds)
                )
                floor = percentiles(
                    timed(lambda: client.kv.lookup_prefix(scope, chain[:1]), args.rounds)
                )
                if client.path_stats()["bulk"]["gets"]:
                    raise RuntimeError("a lookup moved block bytes")
            with Client(address, fast_paths=("grpc",)) as over_grpc:
                grpc_full = percentiles(
                    timed(lambda: over_grpc.kv.lookup_prefix(scope, chain), args.rounds // 3)
                )
                grpc_floor = percentiles(
                    timed(lambda: over_grpc.kv.lookup_prefix(scope, chain[:1]), args.rounds // 3)
                )
        finally:
            proc.terminate()
            proc.wait(30)
    probe = index_probe_cost(args.rounds // 3)
    goals = [
        goal("lookup_prefix_1000_chunks_p99", full["p99_ms"], 2.0, "ms", higher_is_better=False)
    ]
    details = {
        "chain_chunks": CHAIN,
        "lookup_prefix_1000_chunks": full,
        "lookup_prefix_1_chunk_rpc_floor": floor,
        "over_grpc": {"lookup_prefix_1000_chunks": grpc_full, "lookup_prefix_1_chunk": grpc_floor},
        "in_process_vectorised_hash_and_index_probe_1000": probe,
        "notes": "client and daemon in separate processes on 127.0.0.1; every chunk of "
        "the chain is stored (no early stop). The lookups go on a bulk session (no gRPC "
        "call) as the client does by default; the 1-chunk lookup is that transport's "
        "round-trip floor; over_grpc: the same with a client limited to gRPC.",
    }
    write_result("kv_lookup", goals, details)


if __name__ == "__main__":
    main()
