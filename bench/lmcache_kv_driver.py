"""Drive LMCache's own KV server (``lmcache_server HOST PORT cpu``) with LMCache's
own connector, for ``bench.kv_throughput``. Runs in the lmcache environment
(``.venv-lmcache``), so it imports nothing from tiermem.

    python bench/lmcache_kv_driver.py PORT

Reads commands from stdin, one per line, and answers each with one JSON line:
``put SIZE N`` / ``get SIZE N`` (latencies in seconds of N operations on
SIZE-byte chunks; gets cycle over the chunks put so far), ``quit``. A put is
the connector's ``put`` followed by an ``exists`` round trip: LMCache's put does not wait for the server, so the
round trip is what tells the bytes arrived and were stored. A get is the
connector's ``get``, which receives into a buffer of LMCache's CPU pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends

MODEL = "bench/kv-throughput"
CHUNK_TOKENS = 256
#: bfloat16 KV chunk shapes (layers, K/V, tokens, kv heads, head dim) by size
SHAPES = {
    32 << 20: (32, 2, CHUNK_TOKENS, 8, 128),
    256 << 10: (1, 2, CHUNK_TOKENS, 2, 128),
}


def run() -> None:
    port = int(sys.argv[1])
    cfg = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK_TOKENS,
        local_cpu=True,
        max_local_cpu_size=1.5,
        remote_url=f"lm://127.0.0.1:{port}",
        remote_serde="naive",
    )
    md = LMCacheMetadata(
        model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=SHAPES[32 << 20], chunk_size=CHUNK_TOKENS,
        role="worker",
    )  # fmt: skip
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    backends = CreateStorageBackends(cfg, md, loop)
    remote = next(b for name, b in backends.items() if name.startswith("RemoteBackend"))
    cpu = backends["LocalCPUBackend"]
    conn = remote.connection
    while hasattr(conn, "connector") and not hasattr(conn, "client_socket"):
        conn = conn.connector  # unwrap instrumentation wrappers
    keys: dict[int, list[CacheEngineKey]] = {}
    keys_total: list[CacheEngineKey] = []

    def call(coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

    sources: dict[int, object] = {}
    print(json.dumps({"ready": True, "connector": type(conn).__name__}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        op, size, n = parts[0], int(parts[1]), int(parts[2])
        shape = torch.Size(SHAPES[size])
        if size not in sources:
            obj = cpu.allocate(shape, torch.bfloat16)
            obj.tensor.copy_(torch.randn(shape).to(torch.bfloat16))
            sources[size] = obj
        lat = []
        stored = keys.setdefault(size, [])
        if op == "put":
            src = sources[size]
            for _ in range(n):
                key = CacheEngineKey(MODEL, 1, 0, len(keys_total), torch.bfloat16)
                keys_total.append(key)
                t0 = time.perf_counter()
                call(conn.put(key, src))
                call(conn.exists(key))
                lat.append(time.perf_counter() - t0)
                stored.append(key)
            print(json.dumps({"latencies_s": lat}), flush=True)
            continue
        for i in range(n):
            t0 = time.perf_counter()
            obj = call(conn.get(stored[i % len(stored)]))
            lat.append(time.perf_counter() - t0)
            if obj is None:
                print(json.dumps({"error": "a stored chunk is missing"}), flush=True)
                break
            obj.ref_count_down()  # type: ignore[attr-defined]
        else:
            print(json.dumps({"latencies_s": lat}), flush=True)
    for b in backends.values():
        b.close()
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    run()
