"""Soak: many concurrent clients of every kind for a bounded time.

    python -m bench.soak [--seconds 300] [--clients 64] [--procs 4] [--think-ms 20]

Starts ``tiermem serve`` in a subprocess, preloads a hot set, then runs
``--clients`` client threads (spread over ``--procs`` processes, each thread
with its own connection) that loop over the operations in ``WORKLOADS`` with a
think time between calls, until ``--seconds`` pass. Every client first writes
all the keys it owns and reads them back (so the working set is complete and
the caches warm), then the measured run starts. Reports errors, p50/p99
latency per operation, throughput, and the daemon's resident memory sampled
every second. Goals: 0 errors; memory flat
after warm-up (growth at most 5 % over the last 80 % of the run); p99 of small
gets at most 10 ms.

Workloads are rows of a table (name, weight, function): the object service of
every kind today; the KV, vector and scratch services add rows when they land.
Writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import REPO, goal, percentile, write_result
from tiermem.client import Client, Durability, Kind, NotFoundError, Profile, Tier

KiB, MiB = 1 << 10, 1 << 20
HOT_KEYS = 2000
SMALL = 1 * KiB

CONFIG = """
[tiers.dram]
capacity_bytes = "256MiB"
[tiers.ssd]
capacity_bytes = "8GiB"
segment_bytes = "64MiB"
[background]
migrate_interval_s = 0.5
compaction_interval_s = 5
"""


#: Keys each client thread owns, per family; every client writes all of them
#: before the measured run, so the working set is complete after warm-up.
SPAN = {"small": 50, "blob": 10, "cold": 10, "kv": 20, "vector": 20}


class Ctx:
    """One client thread's state."""

    def __init__(self, client: Client, rng: random.Random, prefix: str) -> None:
        self.client = client
        self.rng = rng
        self.prefix = prefix
        self.fixed: int | None = None  # set while populating: write this key

    def key(self, family: str) -> str:
        n = self.rng.randrange(SPAN[family]) if self.fixed is None else self.fixed
        return f"{self.prefix}-{family}-{n}"


def _get_small(c: Ctx) -> None:
    c.client.get(Kind.SCRATCH, f"hot-{c.rng.randrange(HOT_KEYS)}")


def _put_small(c: Ctx) -> None:
    c.client.put(Kind.SCRATCH, c.key("small"), c.rng.randbytes(c.rng.randint(100, 4 * KiB)))


def _put_blob(c: Ctx) -> None:
    size = c.rng.choice([64 * KiB, 256 * KiB, 1 * MiB])
    c.client.put(Kind.BLOB, c.key("blob"), c.rng.randbytes(size))


def _get_blob(c: Ctx) -> None:
    c.client.get(Kind.BLOB, c.key("blob"))


def _put_kv(c: Ctx) -> None:
    data = c.rng.randbytes(256 * KiB)
    c.client.put(Kind.KV_BLOCK, c.key("kv"), data, profile=Profile(durability=Durability.CACHE))


def _get_kv(c: Ctx) -> None:
    with contextlib.suppress(NotFoundError):  # CACHE: may have been evicted
        c.client.get(Kind.KV_BLOCK, c.key("kv"))


def _put_vector(c: Ctx) -> None:
    data = c.rng.randbytes(768 * 4 * 16)  # 16 float32 embeddings of 768 dims
    c.client.put(Kind.VECTOR, c.key("vector"), data, dtype="float32", shape=(16, 768))


def _put_cold(c: Ctx) -> None:
    data = c.rng.randbytes(32 * KiB)
    c.client.put(Kind.BLOB, c.key("cold"), data, profile=Profile(preferred_tier=Tier.SSD))


def _stat(c: Ctx) -> None:
    c.client.stat(Kind.SCRATCH, f"hot-{c.rng.randrange(HOT_KEYS)}")


def _list(c: Ctx) -> None:
    for _ in zip(range(50), c.client.list(kind=Kind.SCRATCH, prefix=c.prefix), strict=False):
        pass


def _delete_and_put(c: Ctx) -> None:
    key = c.key("small")
    c.client.delete(Kind.SCRATCH, key)
    c.client.put(Kind.SCRATCH, key, c.rng.randbytes(200))


#: (operation name, weight, function)
WORKLOADS: list[tuple[str, int, Callable[[Ctx], None]]] = [
    ("get small", 30, _get_small),
    ("put small", 15, _put_small),
    ("stat", 8, _stat),
    ("put blob 64K-1M", 4, _put_blob),
    ("get blob", 6, _get_blob),
    ("put kv 256K cache", 6, _put_kv),
    ("get kv", 8, _get_kv),
    ("put vector 48K", 4, _put_vector),
    ("put blob cold (SSD)", 3, _put_cold),
    ("list 50", 3, _list),
    ("delete and put again", 4, _delete_and_put),
]
#: What each client reads back before the run (CACHE KV blocks may be gone).
READ_BACK = [("small", Kind.SCRATCH), ("blob", Kind.BLOB), ("cold", Kind.BLOB),
             ("kv", Kind.KV_BLOCK), ("vector", Kind.VECTOR)]  # fmt: skip
#: What each client writes before the run: (family, put function).
POPULATE = [("small", _put_small), ("blob", _put_blob), ("cold", _put_cold),
            ("kv", _put_kv), ("vector", _put_vector)]  # fmt: skip


def _client_proc(
    address: str, first: int, threads: int, seconds: float, think_s: float,
    out: Any, ready: Any, go: Any,
) -> None:  # fmt: skip
    """``threads`` clients: populate their keys, report ready, wait for ``go``,
    run for ``seconds``, put their latencies and errors on ``out``."""
    populated = threading.Event()
    all_populated = threading.Barrier(threads + 1)
    deadline = float("inf")
    lat: dict[str, list[float]] = {name: [] for name, _, _ in WORKLOADS}
    errors: dict[str, int] = {}
    samples: list[str] = []
    lock = threading.Lock()
    weights = [w for _, w, _ in WORKLOADS]

    def run(i: int) -> None:
        rng = random.Random(first + i)
        with Client(address, timeout_s=60) as client:
            ctx = Ctx(client, rng, f"c{first + i}")
            for family, put in POPULATE:
                for n in range(SPAN[family]):
                    ctx.fixed = n
                    put(ctx)
            for n in range(max(SPAN.values())):  # read back: warms the daemon's caches
                ctx.fixed = n
                for family, kind in READ_BACK:
                    if n < SPAN[family]:
                        with contextlib.suppress(NotFoundError):
                            client.get(kind, ctx.key(family))
            ctx.fixed = None
            all_populated.wait()
            populated.wait()
            mine: dict[str, list[float]] = {name: [] for name, _, _ in WORKLOADS}
            while time.monotonic() < deadline:
                name, _w, fn = rng.choices(WORKLOADS, weights)[0]
                t0 = time.perf_counter()
                try:
                    fn(ctx)
                    mine[name].append(time.perf_counter() - t0)
                except Exception as exc:
                    with lock:
                        errors[name] = errors.get(name, 0) + 1
                        if len(samples) < 20:
                            samples.append(f"{name}: {exc}")
                time.sleep(think_s * rng.uniform(0.5, 1.5))
        with lock:
            for name, values in mine.items():
                lat[name].extend(values)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    all_populated.wait()
    ready.put(first)
    go.wait()
    deadline = time.monotonic() + seconds
    populated.set()
    for t in pool:
        t.join()
    out.put({"lat": lat, "errors": errors, "samples": samples})


def _catalog_memory(url: str) -> tuple[int, int]:
    """(memtables, block cache) bytes from the daemon's tiermem_catalog_memory_bytes."""
    parts = {"memtables": 0, "block_cache": 0}
    with urllib.request.urlopen(url, timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("tiermem_catalog_memory_bytes{"):
                part = line.split('part="', 1)[1].split('"', 1)[0]
                parts[part] = int(float(line.rsplit(" ", 1)[1]))
    return parts["memtables"], parts["block_cache"]


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--think-ms", type=float, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tiermem-soak-") as tmp:
        config = Path(tmp) / "soak.toml"
        config.write_text(CONFIG)
        cmd = [
            sys.executable, "-m", "tiermem.cli.main", "serve", "--data-dir", f"{tmp}/data",
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--config", str(config),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            return _soak(proc, args)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _soak(proc: subprocess.Popen[str], args: argparse.Namespace) -> int:
    assert proc.stdout is not None
    address = metrics_url = ""
    for line in proc.stdout:
        if line.startswith("listening on "):
            address = line.split()[-1]
        elif line.startswith("metrics on "):
            metrics_url = line.split()[-1]
            break
    if not address or not metrics_url:
        raise RuntimeError("tiermem did not start")
    with Client(address) as c:
        rng = random.Random(0)
        for i in range(HOT_KEYS):
            c.put(Kind.SCRATCH, f"hot-{i}", rng.randbytes(SMALL))
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    per = [args.clients // args.procs + (i < args.clients % args.procs) for i in range(args.procs)]
    firsts = [sum(per[:i]) for i in range(args.procs)]
    procs = [
        ctx.Process(
            target=_client_proc,
            args=(address, firsts[i], per[i], args.seconds, args.think_ms / 1000, out, ready, go),
        )
        for i in range(args.procs)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every client has written its keys: the working set is complete
        ready.get(timeout=1800)
    go.set()
    started = time.monotonic()
    memory: list[tuple[float, int]] = []
    catalog: list[tuple[float, int, int]] = []
    results: list[dict[str, Any]] = []
    while len(results) < len(procs):
        t = round(time.monotonic() - started, 1)
        memory.append((t, _rss_bytes(proc.pid)))
        catalog.append((t, *_catalog_memory(metrics_url)))
        try:
            results.append(out.get(timeout=1.0))
        except Exception:
            continue
    for p in procs:
        p.join(30)
    elapsed = time.monotonic() - started
    return _report(args, results, memory, catalog, elapsed)


def growth_pct(samples: list[tuple[float, int]], seconds: float) -> tuple[float, float, float]:
    """(start, end, growth %) of memory over the last 80 % of a run: medians of the
    first and the last quarter of those samples (RSS breathes with memtables and
    gRPC buffers, so single samples would be noise)."""
    after = [m for t, m in samples if 0.2 * seconds <= t <= seconds]
    quarter = max(1, len(after) // 4)
    head = statistics.median(after[:quarter]) if after else 0.0
    tail = statistics.median(after[-quarter:]) if after else 0.0
    return head, tail, (tail - head) / head * 100 if head else float("nan")


def _report(
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    memory: list[tuple[float, int]],
    catalog: list[tuple[float, int, int]],
    elapsed: float,
) -> int:
    lat: dict[str, list[float]] = {name: [] for name, _, _ in WORKLOADS}
    errors: dict[str, int] = {}
    samples: list[str] = []
    for r in results:
        for name, values in r["lat"].items():
            lat[name].extend(values)
        for name, n in r["errors"].items():
            errors[name] = errors.get(name, 0) + n
        samples += r["samples"]
    total_ops = sum(len(v) for v in lat.values())
    per_op = {
        name: {
            "ops": len(v),
            "p50_ms": round(percentile(v, 50) * 1000, 3),
            "p99_ms": round(percentile(v, 99) * 1000, 3),
            "errors": errors.get(name, 0),
        }
        for name, v in lat.items()
    }
    head, tail, growth = growth_pct(memory, args.seconds)
    # The same without RocksDB's memtables and block cache (bounded, filled by use).
    by_t = {t: mt + bc for t, mt, bc in catalog}
    _h, _t, growth_wo_caches = growth_pct(
        [(t, m - by_t.get(t, 0)) for t, m in memory], args.seconds
    )
    step = max(1, len(memory) // 120)
    n_errors = sum(errors.values())
    goals = [
        goal("errors", n_errors, 0, "errors", False),
        goal("daemon memory growth over the last 80%", growth, 5.0, "%", False),
        goal("p99 small get under load", per_op["get small"]["p99_ms"], 10.0, "ms", False),
    ]
    details = {
        "seconds": round(elapsed, 1),
        "clients": args.clients,
        "client_processes": args.procs,
        "think_ms": args.think_ms,
        "ops": total_ops,
        "ops_per_s": round(total_ops / elapsed, 1),
        "operations": per_op,
        "error_samples": samples[:20],
        "daemon_rss_mib": {
            "after_warmup": round(head / MiB, 1),
            "end": round(tail / MiB, 1),
            "max": round(max((m for _, m in memory), default=0) / MiB, 1),
            "timeline": [(t, round(m / MiB, 1)) for t, m in memory[::step]],
        },
        "memory_growth_without_catalog_caches_pct": round(growth_wo_caches, 2),
        "catalog_memory_mib": {
            "note": "RocksDB memtables (bounded to 64 MiB) and block cache (64 MiB), part of RSS",
            "timeline": [
                (t, round(mt / MiB, 1), round(bc / MiB, 1)) for t, mt, bc in catalog[::step]
            ],
        },
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "note": "the client processes and the daemon share this machine's cores: at the "
        "default load (64 clients, 20 ms think time) a 2-core machine is saturated, so "
        "latencies are mostly queueing (compare ops_per_s with the offered load).",
        "offered_ops_per_s_upper_bound": round(args.clients / (args.think_ms / 1000.0), 1),
    }
    write_result("soak", goals, details)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
