"""Scratchpad write-back versus write-through, same engine and same embedder.

One run, fresh daemons side by side:

* engine: ``ScratchService.append`` called in-process, one LOGGED record per
  call, in mode ``write_back`` (DRAM buffer + group-commit log, batched flush:
  dedup, merge, compress, one RocksDB batch, one index update) and
  ``write_through`` (each record embedded, written in its own synced RocksDB
  batch and indexed on its own). Throughput counts until every record is
  flushed and indexed.
* gRPC: ``client.scratch.append_stream`` (256 records per message, LOGGED)
  against a write-back daemon in its own process (``tiermem serve``), until the
  stream is acknowledged and again until everything is flushed.

Both with the light hashed n-gram embedder and with all-MiniLM-L6-v2 (when the
``embed`` extra is installed). Goals (light embedder): write-back >= 10x the
records/s of write-through; <= 0.05 storage write batches and <= 0.05 index
updates per record; >= 10,000 records/s through gRPC, counted until the stream
is acknowledged (every record LOGGED: it survives kill -9); the rate until
everything is also flushed and indexed is in the details (with MiniLM it is
the model's embedding rate). The same figures are reported for
all-MiniLM-L6-v2.

    python -m bench.scratch_writeback [--records N] [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.common import goal, tiermem_daemon, write_result
from tiermem.client import Client
from tiermem.client import NewRecord as ClientRecord
from tiermem.client import RecordKind as ClientKind
from tiermem.server.app import Daemon
from tiermem.server.config import load_config
from tiermem.server.embedding.minilm import minilm_available
from tiermem.server.scratch.records import RecordDurability
from tiermem.server.scratch.service import NewRecord
from tiermem.server.sessions.model import OpenSpec

WORDS = " ".join(
    [
        "wall door key north south east west corridor dead end junction goal start",
        "left right turn step plan path blocked open room light dark map unknown",
        "frontier visited agent tool",
    ]
).split()


def workload(n: int, seed: int = 3) -> list[tuple[int, str, str, tuple[str, ...]]]:
    """(kind, key, text, tags): agent-like records; ~10% update one of 50 keys,
    ~5% repeat an earlier record exactly."""
    rng = random.Random(seed)
    out: list[tuple[int, str, str, tuple[str, ...]]] = []
    for i in range(n):
        if out and rng.random() < 0.05:
            out.append(rng.choice(out))
            continue
        kind = rng.choice([int(k) for k in (1, 2, 3, 4)])
        text = f"step {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24)))
        key = f"belief/{rng.randrange(50)}" if rng.random() < 0.10 else ""
        out.append((kind, key, text, (rng.choice(WORDS), f"kind{kind}")))
    return out


@contextmanager
def daemon(mode: str, embedder: str, root: Path) -> Iterator[Daemon]:
    config = load_config(
        data_dir=str(root / f"{mode}-{embedder}-{time.monotonic_ns()}"),
        server={"listen": "127.0.0.1:0", "shutdown_grace_s": 1.0},
        metrics={"listen": ""},
        tiers={"dram": {"capacity_bytes": 64 << 20}},
        agent={"scratch": {"mode": mode, "embedder": embedder, "flush_interval_s": 1.0}},
    )
    d = Daemon(config, registry=CollectorRegistry())
    d.start()
    d.embedder.embed(["warm up the embedder"])  # model load is not part of the figure
    try:
        yield d
    finally:
        d.stop(grace_s=0)


def run_engine(
    mode: str, embedder: str, records: list[Any], root: Path, budget_s: float
) -> dict[str, Any]:
    with daemon(mode, embedder, root) as d:
        session = d.sessions.open(OpenSpec(label="bench")).id
        scratch = d.scratch
        before = scratch.stats()
        started = time.perf_counter()
        done = 0
        for kind, key, text, tags in records:
            record = NewRecord(kind, text.encode(), key, tags, durability=RecordDurability.LOGGED)
            scratch.append(session, [record])
            done += 1
            if mode == "write_through" and time.perf_counter() - started > budget_s:
                break
        scratch.flush("client")
        seconds = time.perf_counter() - started
        after = scratch.stats()
        return {
            "mode": mode,
            "embedder": d.embedder.name,
            "records": done,
            "seconds": round(seconds, 3),
            "records_per_s": round(done / seconds, 1),
            "write_batches": after.write_batches - before.write_batches,
            "index_updates": after.index_updates - before.index_updates,
            "write_batches_per_record": round(
                (after.write_batches - before.write_batches) / done, 5
            ),
            "index_updates_per_record": round(
                (after.index_updates - before.index_updates) / done, 5
            ),
            "flushes_by_reason": after.flushes_by_reason,
            "deduplicated": after.deduplicated,
            "merged": after.merged,
            "stored_bytes": after.stored_bytes,
            "payload_bytes": sum(len(r[2]) for r in records[:done]),
        }


def run_grpc(embedder: str, records: list[Any], root: Path) -> dict[str, Any]:
    """Streamed appends to a daemon in its own process (as deployed)."""
    env = (
        ("TIERMEM_AGENT__SCRATCH__EMBEDDER", embedder),
        ("TIERMEM_TIERS__DRAM__CAPACITY_BYTES", "64MiB"),
    )
    data_dir = root / f"grpc-{embedder}-{time.monotonic_ns()}"
    with tiermem_daemon(data_dir, *env) as address, Client(address, timeout_s=900) as client:
        session = client.sessions.open(label="bench").id
        client.scratch.append(session, ClientKind.OBSERVATION, "warm up the embedder")
        client.scratch.flush()
        msgs = [ClientRecord(ClientKind(k), t, key, tags) for k, key, t, tags in records]
        before = client.scratch.stats()
        started = time.perf_counter()
        n = client.scratch.append_stream(session, msgs, per_message=256)
        acked = time.perf_counter() - started
        client.scratch.flush()
        flushed = time.perf_counter() - started
        after = client.scratch.stats()
        embedder_name = after.embedder
    return {
        "embedder": embedder_name,
        "records": n,
        "records_per_message": 256,
        "daemon": "separate process",
        "acked_seconds": round(acked, 3),
        "acked_records_per_s": round(n / acked, 1),
        "flushed_seconds": round(flushed, 3),
        "flushed_records_per_s": round(n / flushed, 1),
        "write_batches_per_record": round((after.write_batches - before.write_batches) / n, 5),
        "index_updates_per_record": round((after.index_updates - before.index_updates) / n, 5),
        "flushes_by_reason": after.flushes_by_reason,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--records", type=int, default=20_000, help="records per write-back run (light embedder)"
    )
    p.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    p.add_argument("--embedder", choices=["all", "hash", "minilm"], default="all")
    args = p.parse_args(argv)
    n = 2_000 if args.quick else args.records
    embedders = ["hash"] + (["minilm"] if minilm_available() else [])
    if args.embedder != "all":
        embedders = [args.embedder]
    details: dict[str, Any] = {"embedders": {}}
    goals: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tiermem-bench-") as tmp:
        root = Path(tmp)
        for emb in embedders:
            heavy = emb == "minilm"
            count = max(200, n // 40) if heavy else n  # the model embeds ~100-1000 records/s
            recs = workload(count)
            wb = run_engine("write_back", emb, recs, root, budget_s=0)
            wt = run_engine("write_through", emb, recs, root, budget_s=5.0 if args.quick else 15.0)
            grpc = run_grpc(
                emb, workload(count if heavy else max(n, 50_000 if not args.quick else n)), root
            )
            speedup = wb["records_per_s"] / wt["records_per_s"]
            label = "light embedder" if emb == "hash" else "all-MiniLM-L6-v2"
            details["embedders"][emb] = {
                "write_back": wb,
                "write_through": wt,
                "grpc_stream": grpc,
                "speedup": round(speedup, 1),
            }
            print(f"{label}: write-back {wb['records_per_s']}/s, "
                  f"write-through {wt['records_per_s']}/s "
                  f"(x{speedup:.1f}); gRPC stream {grpc['flushed_records_per_s']}/s flushed, "
                  f"{grpc['acked_records_per_s']}/s acked", flush=True)  # fmt: skip
            goals += [
                goal(f"write-back / write-through records/s ({label})", round(speedup, 1),
                     10, "x", True),
                goal(f"write batches per record, write-back ({label})",
                     wb["write_batches_per_record"], 0.05, "batches", False),
                goal(f"index updates per record, write-back ({label})",
                     wb["index_updates_per_record"], 0.05, "updates", False),
                goal(f"gRPC streamed appends acknowledged, LOGGED ({label})",
                     grpc["acked_records_per_s"], 10_000, "records/s", True),
            ]  # fmt: skip
    write_result("scratch_writeback", goals, details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
