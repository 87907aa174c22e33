"""Soak: many concurrent clients of every kind for a bounded time.

    python -m bench.soak [--seconds 300] [--saturate-seconds 30] [--settle-seconds 30]
                         [--settle-max-seconds 150]
                         [--load-fraction 0.6 | --rate OPS] [--clients 64] [--procs 4]

Starts ``tiermem serve`` in a subprocess, preloads a hot set, then starts
``--clients`` client threads (spread over ``--procs`` processes, each thread
with its own connection) that loop over the operations in ``WORKLOADS``. Every
client first writes all the keys it owns and reads them back (so the working
set is complete and the caches warm). Then two measured phases, same clients,
same mix:

1. **saturation** (``--saturate-seconds``): no think time; the ops/s served is
   the capacity of this daemon with these client processes on this machine;
   then, unmeasured (``--settle-seconds``, then in 10 s steps until the
   scratchpad's write-back flushes keep up again, ``--settle-max-seconds`` in
   all), the load rate runs while the compactions and the flush backlog the
   saturation left behind drain (a daemon provisioned for that rate would not
   carry them); its errors still count and its small-get p99 is reported
   under ``settle``;
2. **load** (``--seconds``): the clients together offer ``--load-fraction`` of
   that capacity (or ``--rate`` ops/s) as a Poisson stream.

Reports, per phase, errors, p50/p99 latency per operation, offered and served
rates and the mean time the daemon's handlers ran per RPC method (from its
metrics, so queueing can be told from work), and the daemon's resident memory
sampled every second of the load phase. Goals, in the load phase: 0 errors
(every phase); memory flat after warm-up (growth at most 5 % over the last
80 %); p99 of small gets at most 10 ms. Latency at saturation is queueing by
definition: it is reported beside, not judged.

Workloads are rows of a table (name, weight, function): ObjectService puts,
gets, stats, lists and deletes of all four kinds (small scratch values, blobs
of 64 KiB-1 MiB, KV blocks, vector batches, cold blobs on SSD), and each
service's own calls: KV chains (``put_blocks``, ``lookup_prefix`` +
``get_blocks``), searches and upserts in a vector collection of the client's
own, scratchpad appends (LOGGED) and replays in the client's agent session,
and isolated child sessions opened, written as and closed with a result.
Writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import multiprocessing as mp
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPO, goal, percentile, write_result
from tiermem.client import (
    Client,
    Durability,
    Kind,
    KvBlock,
    KvScope,
    NotFoundError,
    Profile,
    RecordDurability,
    RecordKind,
    Tier,
)

KiB, MiB = 1 << 10, 1 << 20
HOT_KEYS = 2000
SMALL = 1 * KiB
#: Seconds between scrapes of the daemon's metrics page in the load phase (RSS
#: is read from /proc every second): rendering the page holds the daemon's
#: interpreter lock for ~20 ms, load the soak itself should not add every second.
SCRAPE_INTERVAL_S = 5.0
#: Random bytes each client process draws its values from (the largest is 1 MiB).
POOL_BYTES = 4 * MiB
#: Thread switch interval of the client processes (Python's default is 5 ms):
#: 16 client threads share each process, as the daemon's handlers share its.
CLIENT_SWITCH_INTERVAL_S = 0.001

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
SPAN = {"small": 50, "blob": 10, "cold": 10, "kv": 20, "vector": 20, "chain": 8}
#: KV chains (KvService): blocks of 64 KiB of float16, CHAIN_BLOCKS to a chain,
#: one scope for all clients (chains are per client: their hashes differ).
KV_SCOPE = KvScope("soak-model", dtype="float16")
CHAIN_BLOCKS = 4
KV_BLOCK_BYTES = 64 * KiB
#: Each client's own vector collection (VectorService): dimension and size.
VEC_DIM, VEC_ROWS = 64, 256


class Ctx:
    """One client thread's state."""

    def __init__(self, client: Client, rng: random.Random, prefix: str, pool: bytes) -> None:
        self.client = client
        self.rng = rng
        self.prefix = prefix
        self.fixed: int | None = None  # set while populating: write this key
        self._pool = memoryview(pool)
        #: the client's agent session (ScratchService, SessionService), opened
        #: before the run; its vector collection is named after ``prefix``
        self.session = ""
        self.collection = f"{prefix}-vectors"
        self.vectors = np.random.default_rng(rng.randrange(1 << 30)).random(
            (VEC_ROWS, VEC_DIM), dtype=np.float32
        )

    def randbytes(self, n: int) -> memoryview:
        """``n`` random bytes: a view at a random offset of the process's pool of
        random bytes (making fresh ones per put would be harness CPU time on the
        cores the daemon needs, most of all for the 1 MiB blobs)."""
        at = self.rng.randrange(len(self._pool) - n + 1)
        return self._pool[at : at + n]

    def key(self, family: str) -> str:
        n = self.rng.randrange(SPAN[family]) if self.fixed is None else self.fixed
        return f"{self.prefix}-{family}-{n}"


def _get_small(c: Ctx) -> None:
    c.client.get(Kind.SCRATCH, f"hot-{c.rng.randrange(HOT_KEYS)}")


def _put_small(c: Ctx) -> None:
    c.client.put(Kind.SCRATCH, c.key("small"), c.randbytes(c.rng.randint(100, 4 * KiB)))


def _put_blob(c: Ctx) -> None:
    size = c.rng.choice([64 * KiB, 256 * KiB, 1 * MiB])
    c.client.put(Kind.BLOB, c.key("blob"), c.randbytes(size))


def _get_blob(c: Ctx) -> None:
    c.client.get(Kind.BLOB, c.key("blob"))


def _put_kv(c: Ctx) -> None:
    data = c.randbytes(256 * KiB)
    c.client.put(Kind.KV_BLOCK, c.key("kv"), data, profile=Profile(durability=Durability.CACHE))


def _get_kv(c: Ctx) -> None:
    with contextlib.suppress(NotFoundError):  # CACHE: may have been evicted
        c.client.get(Kind.KV_BLOCK, c.key("kv"))


def _put_vector(c: Ctx) -> None:
    data = c.randbytes(768 * 4 * 16)  # 16 float32 embeddings of 768 dims
    c.client.put(Kind.VECTOR, c.key("vector"), data, dtype="float32", shape=(16, 768))


def _put_cold(c: Ctx) -> None:
    data = c.randbytes(32 * KiB)
    c.client.put(Kind.BLOB, c.key("cold"), data, profile=Profile(preferred_tier=Tier.SSD))


def _chain(c: Ctx) -> list[int]:
    """The chunk hashes of one of the client's chains (a chain id per ``key``)."""
    n = c.rng.randrange(SPAN["chain"]) if c.fixed is None else c.fixed
    base = (int(c.prefix[1:]) + 1) * 1_000_000 + n * 100
    return [base + i for i in range(CHAIN_BLOCKS)]


def _kv_put_chain(c: Ctx) -> None:
    blocks = [
        KvBlock(h, c.randbytes(KV_BLOCK_BYTES), dtype="float16", shape=(KV_BLOCK_BYTES // 2,))
        for h in _chain(c)
    ]
    c.client.kv.put_blocks(KV_SCOPE, blocks)


def _kv_lookup_and_get(c: Ctx) -> None:
    chain = _chain(c)
    hit = c.client.kv.lookup_prefix(KV_SCOPE, chain)
    if hit.stored_chunks:  # CACHE: a chain may have been evicted in part
        c.client.kv.get_blocks(KV_SCOPE, chain[: hit.stored_chunks])


def _vector_search(c: Ctx) -> None:
    c.client.vectors.search(c.collection, c.vectors[c.rng.randrange(VEC_ROWS)], k=10)


def _vector_upsert(c: Ctx) -> None:
    at = c.rng.randrange(VEC_ROWS - 8)
    c.client.vectors.upsert(c.collection, range(at, at + 8), c.vectors[at : at + 8])


def _scratch_append(c: Ctx) -> None:
    c.client.scratch.append(
        c.session,
        RecordKind.OBSERVATION,
        bytes(c.randbytes(c.rng.randint(100, 2 * KiB))),
        durability=RecordDurability.LOGGED,
    )


def _scratch_replay(c: Ctx) -> None:
    c.client.scratch.replay(c.session, limit=20)


def _child_session(c: Ctx) -> None:
    """An isolated child: open it, write a scratch object as it, close it with
    a one-line result for the parent (everything it owned freed in one step)."""
    child = c.client.sessions.open(parent=c.session, label="soak-child").id
    c.client.put(Kind.SCRATCH, f"{c.prefix}-child", c.randbytes(512), session=child)
    c.client.sessions.close(child, "done")


def _stat(c: Ctx) -> None:
    c.client.stat(Kind.SCRATCH, f"hot-{c.rng.randrange(HOT_KEYS)}")


def _list(c: Ctx) -> None:
    for _ in zip(range(50), c.client.list(kind=Kind.SCRATCH, prefix=c.prefix), strict=False):
        pass


def _delete_and_put(c: Ctx) -> None:
    key = c.key("small")
    c.client.delete(Kind.SCRATCH, key)
    c.client.put(Kind.SCRATCH, key, c.randbytes(200))


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
    ("kv put_blocks 4x64K", 3, _kv_put_chain),
    ("kv lookup_prefix + get_blocks", 4, _kv_lookup_and_get),
    ("vector search k=10", 3, _vector_search),
    ("vector upsert 8", 2, _vector_upsert),
    ("scratch append", 4, _scratch_append),
    ("scratch replay 20", 1, _scratch_replay),
    ("child session open/put/close", 1, _child_session),
]
#: What each client reads back before the run (CACHE KV blocks may be gone).
READ_BACK = [("small", Kind.SCRATCH), ("blob", Kind.BLOB), ("cold", Kind.BLOB),
             ("kv", Kind.KV_BLOCK), ("vector", Kind.VECTOR)]  # fmt: skip
#: What each client writes before the run: (family, put function).
POPULATE = [("small", _put_small), ("blob", _put_blob), ("cold", _put_cold),
            ("kv", _put_kv), ("vector", _put_vector), ("chain", _kv_put_chain)]  # fmt: skip


@dataclass(frozen=True)
class Phase:
    """One measured phase every client thread runs at the same time: from
    ``start`` to ``end`` (``time.monotonic()``, the same clock in every process
    on Linux). ``rate_per_client``: operations per second each client starts,
    at Poisson-distributed times (an open loop: a client that falls behind its
    schedule starts the next operation at once); None = no think time at all
    (a closed loop: each client starts its next operation when the last ends)."""

    name: str
    start: float
    end: float
    rate_per_client: float | None


def _run_phase(ctx: Ctx, phase: Phase, weights: list[int]) -> dict[str, Any]:
    """One client thread's part of a phase: latencies by operation, errors,
    and how late operations started against their schedule."""
    lat: dict[str, list[float]] = {name: [] for name, _, _ in WORKLOADS}
    errors: dict[str, int] = {}
    samples: list[str] = []
    late: list[float] = []
    small_at: list[float] = []  # when each small get started, seconds into the phase
    rng = ctx.rng
    rate = phase.rate_per_client
    due = phase.start + (rng.expovariate(rate) if rate else 0.0)
    while True:
        now = time.monotonic()
        if due >= phase.end or now >= phase.end:
            break
        if due > now:
            time.sleep(due - now)
        if rate:
            late.append(max(0.0, time.monotonic() - due))
        name, _w, fn = rng.choices(WORKLOADS, weights)[0]
        t0 = time.perf_counter()
        try:
            fn(ctx)
            lat[name].append(time.perf_counter() - t0)
            if fn is _get_small:
                small_at.append(time.monotonic() - phase.start)
        except Exception as exc:
            errors[name] = errors.get(name, 0) + 1
            if len(samples) < 20:
                samples.append(f"{name}: {exc}")
        due = due + rng.expovariate(rate) if rate else time.monotonic()
    return {"lat": lat, "errors": errors, "samples": samples, "late": late, "small_at": small_at}


def _client_proc(address: str, first: int, threads: int, control: Any, out: Any) -> None:
    """``threads`` clients, each with its own connection: populate their keys,
    report ready, then run each ``Phase`` read from ``control`` (None ends) and
    put the merged results of every phase on ``out``."""
    # The daemon sets its switch interval the same way (server.switch_interval_s): a
    # client thread whose reply has arrived waits at most this long for the others.
    sys.setswitchinterval(CLIENT_SWITCH_INTERVAL_S)
    values = random.Random(first).randbytes(POOL_BYTES)
    barrier = threading.Barrier(threads + 1)
    current: list[Phase | None] = [None]
    merged: list[dict[str, Any]] = []
    lock = threading.Lock()
    weights = [w for _, w, _ in WORKLOADS]

    def run(i: int) -> None:
        rng = random.Random(first + i)
        with Client(address, timeout_s=60) as client:
            ctx = Ctx(client, rng, f"c{first + i}", values)
            ctx.session = client.sessions.open(label=ctx.prefix).id
            client.vectors.create(ctx.collection, VEC_DIM)
            client.vectors.upsert(ctx.collection, range(VEC_ROWS), ctx.vectors)
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
            barrier.wait()  # populated
            while True:
                barrier.wait()  # a phase (or the end) was read
                phase = current[0]
                if phase is None:
                    return
                result = _run_phase(ctx, phase, weights)
                with lock:
                    merged.append(result)
                barrier.wait()  # every thread finished the phase

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    out.put(("ready", first))
    while True:
        phase = control.get()
        current[0] = phase
        merged.clear()
        barrier.wait()
        if phase is None:
            break
        barrier.wait()
        out.put(("done", _merge(merged)))
    for t in pool:
        t.join()


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    lat: dict[str, list[float]] = {name: [] for name, _, _ in WORKLOADS}
    errors: dict[str, int] = {}
    samples: list[str] = []
    late: list[float] = []
    small_at: list[float] = []
    for r in parts:
        for name, values in r["lat"].items():
            lat[name].extend(values)
        for name, n in r["errors"].items():
            errors[name] = errors.get(name, 0) + n
        samples += r["samples"]
        late += r["late"]
        small_at += r["small_at"]
    return {
        "lat": lat,
        "errors": errors,
        "samples": samples[:20],
        "late": late,
        "small_at": small_at,
    }


#: One scrape of the load phase: (t, memtables bytes, block cache bytes, segments
#: compacted, seconds spent in write-back flushes, records they flushed), the
#: last four counted since the daemon started.
Scrape = tuple[float, int, int, int, float, int]


def _metric_lines(url: str) -> list[str]:
    """The daemon's metrics page, a line per sample."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        page: bytes = reply.read()
    return page.decode().splitlines()


def _scrape(
    url: str,
) -> tuple[tuple[int, int, int, float, int], dict[str, tuple[float, float, float]]]:
    """From the daemon's metrics: (memtables, block cache) bytes of
    tiermem_catalog_memory_bytes, the SSD segments compacted so far and the
    seconds and records of the scratchpad's write-back flushes so far, and per
    RPC method the (count, seconds) of tiermem_request_duration_seconds summed
    over status codes: the time the handlers ran, without the time requests
    waited for a thread, and how many of them ran at most 10 ms."""
    parts = {"memtables": 0, "block_cache": 0, "compactions": 0, "flushed": 0}
    flush_s = 0.0
    rpcs: dict[str, tuple[float, float, float]] = {}
    for line in _metric_lines(url):
        if line.startswith("tiermem_segment_compactions_total "):
            parts["compactions"] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("tiermem_writeback_flush_duration_seconds_sum "):
            flush_s = float(line.rsplit(" ", 1)[1])
        elif line.startswith("tiermem_writeback_flushed_records_total "):
            parts["flushed"] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("tiermem_catalog_memory_bytes{"):
            part = line.split('part="', 1)[1].split('"', 1)[0]
            parts[part] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith(("tiermem_request_duration_seconds_count{",
                              "tiermem_request_duration_seconds_sum{",
                              "tiermem_request_duration_seconds_bucket{")):  # fmt: skip
            method = line.split('method="', 1)[1].split('"', 1)[0]
            count, total, fast = rpcs.get(method, (0.0, 0.0, 0.0))
            value = float(line.rsplit(" ", 1)[1])
            if "_count{" in line:
                count += value
            elif "_sum{" in line:
                total += value
            elif 'le="0.01"' in line:
                fast += value
            rpcs[method] = (count, total, fast)
    scraped = (parts["memtables"], parts["block_cache"], parts["compactions"], flush_s)
    return (*scraped, parts["flushed"]), rpcs


def _steal_s() -> float:
    """CPU time the hypervisor gave other guests, summed over this machine's
    cores (``/proc/stat``'s steal column), in seconds: on a shared VM the
    tail follows it, so each window reports it beside its p99."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", "--duration", type=float, default=300, help="the load phase (s)"
    )
    parser.add_argument("--saturate-seconds", type=float, default=30, help="the capacity phase (s)")
    parser.add_argument(
        "--load-fraction",
        type=float,
        default=0.6,
        help="the load phase offers this fraction of the capacity measured",
    )
    parser.add_argument(
        "--rate", type=float, default=0.0, help="offer this many ops/s instead (all clients)"
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=30,
        help="run the load rate this long, unmeasured, before the load phase (s)",
    )
    parser.add_argument(
        "--settle-max-seconds",
        type=float,
        default=150,
        help="go on settling, in 10 s steps, until the write-back flushes have caught up, "
        "at most this long in all (s)",
    )
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--procs", type=int, default=4)
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


class _Clients:
    """The client processes, driven phase by phase."""

    def __init__(self, address: str, clients: int, procs: int) -> None:
        ctx = mp.get_context("spawn")
        self.clients = clients
        self.out = ctx.Queue()
        per = [clients // procs + (i < clients % procs) for i in range(procs)]
        firsts = [sum(per[:i]) for i in range(procs)]
        self.controls = [ctx.Queue() for _ in range(procs)]
        self.procs = [
            ctx.Process(
                target=_client_proc, args=(address, firsts[i], per[i], self.controls[i], self.out)
            )
            for i in range(procs)
        ]
        for p in self.procs:
            p.start()
        for _ in self.procs:  # every client has written its keys: the working set is complete
            self.out.get(timeout=1800)

    def run(
        self, name: str, seconds: float, rate: float | None, sample: Callable[[float], None]
    ) -> tuple[dict[str, Any], float]:
        """Run a phase (``rate``: ops/s offered by all clients together, None: no
        think time); ``sample(t)`` is called about every second meanwhile.
        Returns the merged results and the phase's length."""
        start = time.monotonic() + 0.5
        phase = Phase(name, start, start + seconds, rate / self.clients if rate else None)
        for control in self.controls:
            control.put(phase)
        results: list[dict[str, Any]] = []
        while len(results) < len(self.procs):
            if time.monotonic() >= start:
                sample(time.monotonic() - start)
            try:
                results.append(self.out.get(timeout=1.0)[1])
            except queue.Empty:
                continue
        return _merge(results), max(seconds, time.monotonic() - start)

    def close(self) -> None:
        for control in self.controls:
            control.put(None)
        for p in self.procs:
            p.join(30)


def _soak(proc: subprocess.Popen[str], args: argparse.Namespace) -> int:
    if proc.stdout is None:
        raise RuntimeError("no stdout from tiermem serve")
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
    clients = _Clients(address, args.clients, args.procs)
    try:
        say = functools.partial(print, file=sys.stderr, flush=True)
        say(f"daemon pid {proc.pid}: saturation phase, {args.saturate_seconds:.0f} s")
        before = _scrape(metrics_url)[1]
        saturated, sat_s = clients.run("saturation", args.saturate_seconds, None, lambda t: None)
        capacity = _ops(saturated) / sat_s
        sat_server = _server_ms(before, _scrape(metrics_url)[1])
        rate = args.rate or args.load_fraction * capacity
        settled = None
        if args.settle_seconds > 0:
            # The capacity phase leaves debt a daemon provisioned for this rate would
            # not carry (compactions of the LSM levels it filled, queued flushes): let
            # it drain at the load rate before measuring. Reported, not hidden.
            say(f"daemon pid {proc.pid}: settling at {rate:.0f} ops/s, {args.settle_seconds:.0f} s")
            settled = _settle(clients, args, rate, metrics_url)
        say(f"daemon pid {proc.pid}: load phase at {rate:.0f} ops/s, {args.seconds:.0f} s")
        memory: list[tuple[float, int]] = []
        catalog: list[Scrape] = []
        steal: list[tuple[float, float]] = []

        def sample(t: float) -> None:
            memory.append((round(t, 1), _rss_bytes(proc.pid)))
            steal.append((round(t, 1), _steal_s()))
            if not catalog or t - catalog[-1][0] >= SCRAPE_INTERVAL_S:
                scraped, _ = _scrape(metrics_url)
                catalog.append((round(t, 1), *scraped))

        scraped, before = _scrape(metrics_url)
        # the first window's baseline (without it, its counts ran from the daemon's start)
        catalog.append((0.0, *scraped))
        loaded, load_s = clients.run("load", args.seconds, rate, sample)
        load_server = _server_ms(before, _scrape(metrics_url)[1])
    finally:
        clients.close()
    return _report(
        args,
        {"capacity": capacity, "rate": rate},
        (saturated, sat_s, sat_server),
        settled,
        (loaded, load_s, load_server),
        memory,
        catalog,
        steal,
    )


def _ops(result: dict[str, Any]) -> int:
    return sum(len(v) for v in result["lat"].values())


def _server_ms(
    before: dict[str, tuple[float, float, float]], after: dict[str, tuple[float, float, float]]
) -> dict[str, dict[str, float]]:
    """Per RPC method between two scrapes: calls, the mean time its handler ran
    and the share of calls whose handler ran longer than 10 ms."""
    out = {}
    for method, (count, total, fast) in sorted(after.items()):
        c0, t0, f0 = before.get(method, (0.0, 0.0, 0.0))
        if count - c0 > 0:
            out[method] = {
                "calls": int(count - c0),
                "mean_handler_ms": round((total - t0) / (count - c0) * 1000, 3),
                "over_10ms_pct": round((1 - (fast - f0) / (count - c0)) * 100, 3),
            }
    return out


def growth_pct(samples: list[tuple[float, int]], seconds: float) -> tuple[float, float, float]:
    """(start, end, growth %) of memory over the last 80 % of a run: medians of the
    first and the last quarter of those samples (RSS breathes with memtables and
    gRPC buffers, so single samples would be noise)."""
    after = [m for t, m in samples if 0.2 * seconds <= t <= seconds]
    quarter = max(1, len(after) // 4)
    head = statistics.median(after[:quarter]) if after else 0.0
    tail = statistics.median(after[-quarter:]) if after else 0.0
    return head, tail, (tail - head) / head * 100 if head else float("nan")


def _scraped_at(catalog: list[Scrape], t: float) -> Scrape:
    """The last scrape at or before ``t`` (zeros before the first)."""
    at = bisect.bisect_right(catalog, t, key=lambda row: row[0]) - 1
    return catalog[at] if at >= 0 else (0.0, 0, 0, 0, 0.0, 0)


def _caches_at(catalog: list[Scrape], t: float) -> int:
    """Memtables + block cache at ``t``: the last scrape at or before it."""
    row = _scraped_at(catalog, t)
    return row[1] + row[2]


def _per_op(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "ops": len(v),
            "p50_ms": round(percentile(v, 50) * 1000, 3) if v else None,
            "p99_ms": round(percentile(v, 99) * 1000, 3) if v else None,
            "errors": result["errors"].get(name, 0),
        }
        for name, v in result["lat"].items()
    }


#: Length of the windows the load phase's small-get p99 is reported in.
WINDOW_S = 30.0


def _steal_at(steal: list[tuple[float, float]], t: float) -> float:
    """Steal seconds at the last sample at or before ``t`` (the first before it)."""
    at = bisect.bisect_right(steal, t, key=lambda row: row[0]) - 1
    return steal[max(at, 0)][1] if steal else 0.0


def _windows(
    result: dict[str, Any],
    catalog: list[Scrape],
    steal: list[tuple[float, float]],
    seconds: float,
) -> list[dict[str, Any]]:
    """The small gets' p99 per ``WINDOW_S`` of the load phase, beside the SSD
    segments the daemon compacted in it and the seconds and records of its
    write-back flushes (from the scrapes) and the CPU time the
    hypervisor gave other guests in it: a tail that grows over the run, or
    follows background work or a noisy neighbour, shows here and not in one p99."""
    lat, at = result["lat"]["get small"], result["small_at"]
    rows = []
    for w in range(int(seconds // WINDOW_S)):  # whole windows only
        lo, hi = w * WINDOW_S, (w + 1) * WINDOW_S
        window = [x for x, t in zip(lat, at, strict=True) if lo <= t < hi]
        if not window:
            continue
        start, end = _scraped_at(catalog, lo), _scraped_at(catalog, hi)
        rows.append({
            "from_s": lo,
            "ops": len(window),
            "p99_ms": round(percentile(window, 99) * 1000, 3),
            "compactions": end[3] - start[3],
            "writeback_flush_s": round(end[4] - start[4], 2),
            "writeback_flushed_records": end[5] - start[5],
            "cpu_steal_s": round(_steal_at(steal, hi) - _steal_at(steal, lo), 2),
        })  # fmt: skip
    return rows


def _phase_details(result: dict[str, Any], seconds: float, server: Any) -> dict[str, Any]:
    details: dict[str, Any] = {
        "seconds": round(seconds, 1),
        "ops": _ops(result),
        "served_ops_per_s": round(_ops(result) / seconds, 1),
        "operations": _per_op(result),
        "errors": sum(result["errors"].values()),
        "error_samples": result["samples"],
        "server_handler_time": server,
    }
    if result["late"]:
        late = result["late"]
        details["start_delay_ms"] = {
            "note": "how late operations started against their Poisson schedule "
            "(a client waits for its previous operation)",
            "p50": round(percentile(late, 50) * 1000, 3),
            "p99": round(percentile(late, 99) * 1000, 3),
        }
    return details


#: Settling goes on in steps of this length until, in one step, the write-back
#: flushes kept up: at least FLUSHES_CAUGHT_UP of them ended (one that embeds the
#: saturation's backlog takes tens of seconds; a caught-up one, 1-2 s at the load
#: rate) and at most SETTLE_DRAINED_RECORDS records were left waiting.
SETTLE_STEP_S = 10.0
FLUSHES_CAUGHT_UP = 2
SETTLE_DRAINED_RECORDS = 100


def _writeback(url: str) -> tuple[float, float]:
    """(records waiting in the write-back buffer, flushes done so far)."""
    buffered = flushes = 0.0
    for line in _metric_lines(url):
        if line.startswith("tiermem_writeback_buffer_records "):
            buffered = float(line.rsplit(" ", 1)[1])
        elif line.startswith("tiermem_writeback_flush_duration_seconds_count "):
            flushes = float(line.rsplit(" ", 1)[1])
    return buffered, flushes


def _settle(
    clients: _Clients, args: argparse.Namespace, rate: float, url: str
) -> tuple[dict[str, Any], float, dict[str, Any]]:
    """The load rate for --settle-seconds, then in SETTLE_STEP_S steps until a step
    in which the write-back flushes kept up (or --settle-max-seconds in all). The
    capacity phase appends records faster than the embedder (which runs at a lower
    priority than the handlers) flushes them; without this the load phase's first
    minutes would embed that backlog, work a daemon provisioned for the load rate
    never has."""
    parts: list[dict[str, Any]] = []
    first, seconds = clients.run("settle", args.settle_seconds, rate, lambda t: None)
    parts.append(first)
    caught_up = False
    steps = 0
    while not caught_up and seconds + SETTLE_STEP_S <= args.settle_max_seconds:
        _, flushes_before = _writeback(url)
        result, step_s = clients.run("settle", SETTLE_STEP_S, rate, lambda t: None)
        parts.append(result)
        seconds += step_s
        steps += 1
        buffered, flushes = _writeback(url)
        caught_up = (
            flushes - flushes_before >= FLUSHES_CAUGHT_UP and buffered <= SETTLE_DRAINED_RECORDS
        )
    return _merge(parts), seconds, {"extra_steps": steps, "flushes_caught_up": caught_up}


def _settle_details(
    settled: tuple[dict[str, Any], float, dict[str, Any]] | None,
) -> dict[str, Any] | None:
    """The unmeasured phase between capacity and load, in brief (its errors count)."""
    if settled is None:
        return None
    result, seconds, drain = settled
    return {
        "note": "the load rate, run before the load phase so the capacity phase's debt "
        "(compactions, the write-back flushes' backlog) drains; not part of the goals "
        "except its errors",
        **drain,
        "seconds": round(seconds, 1),
        "ops": _ops(result),
        "errors": sum(result["errors"].values()),
        "small_get_p99_ms": _per_op(result)["get small"]["p99_ms"],
    }


def _report(
    args: argparse.Namespace,
    load: dict[str, float],
    saturated: tuple[dict[str, Any], float, Any],
    settled: tuple[dict[str, Any], float, dict[str, Any]] | None,
    loaded: tuple[dict[str, Any], float, Any],
    memory: list[tuple[float, int]],
    catalog: list[Scrape],
    steal: list[tuple[float, float]],
) -> int:
    result, seconds, server = loaded
    per_op = _per_op(result)
    head, tail, growth = growth_pct(memory, args.seconds)
    # The same without RocksDB's memtables and block cache (bounded, filled by use).
    _h, _t, growth_wo_caches = growth_pct(
        [(t, m - _caches_at(catalog, t)) for t, m in memory], args.seconds
    )
    step = max(1, len(memory) // 120)
    phases = [result, saturated[0]] + ([settled[0]] if settled else [])
    n_errors = sum(sum(phase["errors"].values()) for phase in phases)
    goals = [
        goal("errors", n_errors, 0, "errors", False),
        goal("daemon memory growth over the last 80%", growth, 5.0, "%", False),
        goal("p99 small get under load", per_op["get small"]["p99_ms"] or 0.0, 10.0, "ms", False),
    ]
    capacity, rate = load["capacity"], load["rate"]
    details = {
        "clients": args.clients,
        "client_processes": args.procs,
        "capacity_ops_per_s": round(capacity, 1),
        "load_fraction": round(rate / capacity, 3) if capacity else None,
        "offered_ops_per_s": round(rate, 1),
        "served_ops_per_s": round(_ops(result) / seconds, 1),
        "seconds": round(seconds, 1),
        "ops": _ops(result),
        "operations": per_op,
        "error_samples": result["samples"],
        "load": _phase_details(result, seconds, server),
        "saturation": _phase_details(*saturated),
        "settle": _settle_details(settled),
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
                (t, round(mt / MiB, 1), round(bc / MiB, 1)) for t, mt, bc, *_ in catalog[::step]
            ],
        },
        "small_get_p99_by_window": _windows(result, catalog, steal, seconds),
        "cpu_steal_s_during_load": round(steal[-1][1] - steal[0][1], 1) if steal else 0.0,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "note": LOAD_NOTE,
        "harness_note": HARNESS_NOTE,
    }
    write_result("soak", goals, details)
    return 0


#: How the load level is chosen (also in the result file).
LOAD_NOTE = (
    "Three phases with the same 64 clients and the same operation mix. Saturation: "
    "every client starts its next operation as soon as the last one returns; the "
    "ops/s served is the capacity of this daemon and these client processes on this "
    "machine (they share its cores), and its latencies are mostly queueing by "
    "definition (reported under 'saturation'). Load: the clients together offer "
    "load_fraction of that capacity as a Poisson stream (each client an open loop at "
    "1/64 of the rate), after the same rate has run unmeasured for settle_seconds "
    "and then until the write-back flushes keep up (settle.seconds in all), so the "
    "saturation's compactions and flush backlog drain; the goals (errors, "
    "memory growth, p99 of small gets) are measured in this phase, a load the "
    "machine can serve with headroom, as a production daemon would be provisioned."
)

#: What the harness does to stay out of the daemon's way (also in the result file).
HARNESS_NOTE = (
    "The client processes share the machine's cores with the daemon: values are views "
    "of a pre-made pool of random bytes (not generated per put), the client processes "
    "use a 1 ms thread switch interval like the daemon (16 client threads share each), "
    "and the daemon's metrics page is scraped every 5 s (RSS every second, from /proc)."
)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
