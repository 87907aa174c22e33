"""Drive LMCache's own KV server (``lmcache_server HOST PORT cpu``) with LMCache's
own connector, for ``bench.kv_throughput``. Runs in the lmcache environment
(``.venv-lmcache``), so it imports nothing from tiermem.

    python bench/lmcache_kv_driver.py PORT

Reads commands from stdin, one per line, and answers each with one JSON line:
``put SIZE N`` / ``get SIZE N`` (latencies in seconds of N operations on
SIZE-byte chunks; gets cycle over the chunks put so far), ``putb SIZE N B`` /
``getb SIZE N B`` (N batches of B chunks: the ``lm://`` connector has no batch
calls, so a batch is B puts back to back then one ``exists``, or B gets),
``quit``. A put is the connector's ``put`` followed by an ``exists`` round
trip: LMCache's put does not wait for the server, so the round trip is what
tells the bytes arrived and were stored. A get is the connector's ``get``,
which receives into a buffer of LMCache's CPU pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends

MODEL = "bench/kv-throughput"
CHUNK_TOKENS = 256
#: bfloat16 chunk shapes as LMCache holds them (K/V, layers, tokens, heads x head dim):
#: 32 layers of 8 x 128 → 32 MiB, 1 layer of 2 x 128 → 256 KiB per 256-token chunk.
SHAPES = {
    32 << 20: (2, 32, CHUNK_TOKENS, 8 * 128),
    256 << 10: (2, 1, CHUNK_TOKENS, 2 * 128),
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
        kv_dtype=torch.bfloat16, kv_shape=(32, 2, CHUNK_TOKENS, 8, 128), chunk_size=CHUNK_TOKENS,
        role="worker",
    )  # fmt: skip
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    backends = CreateStorageBackends(cfg, md, loop)
    remote = next(b for name, b in backends.items() if name.startswith("RemoteBackend"))
    cpu = backends["LocalCPUBackend"]
    conn = remote.connection  # the lm:// connector (as LMCache wraps it)
    keys: dict[int, list[CacheEngineKey]] = {}
    keys_total: list[CacheEngineKey] = []

    def call(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    sources: dict[int, Any] = {}
    print(json.dumps({"ready": True, "connector": type(conn).__name__}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        op, size, n = parts[0], int(parts[1]), int(parts[2])
        batch = int(parts[3]) if len(parts) > 3 else 1
        shape = torch.Size(SHAPES[size])
        if size not in sources:
            obj = cpu.allocate(shape, torch.bfloat16)
            obj.tensor.copy_(torch.randn(shape).to(torch.bfloat16))
            sources[size] = obj
        lat = []
        stored = keys.setdefault(size, [])
        src = sources[size]
        if op in ("put", "putb"):
            for _ in range(n):
                batch_keys = []
                for _j in range(batch):
                    batch_keys.append(CacheEngineKey(MODEL, 1, 0, len(keys_total), torch.bfloat16))
                    keys_total.append(batch_keys[-1])
                for _j in range(batch):
                    src.ref_count_up()  # the connector's put consumes one reference
                t0 = time.perf_counter()
                for key in batch_keys:
                    call(conn.put(key, src))
                call(conn.exists(batch_keys[-1]))  # the server has taken them all
                lat.append(time.perf_counter() - t0)
                stored.extend(batch_keys)
            print(json.dumps({"latencies_s": lat}), flush=True)
            continue
        missing = False
        for i in range(n):
            want = [stored[-1 - (i * batch + j) % len(stored)] for j in range(batch)]
            t0 = time.perf_counter()
            objs = [call(conn.get(key)) for key in want]
            lat.append(time.perf_counter() - t0)
            for obj in objs:
                if obj is None:
                    missing = True
                else:
                    obj.ref_count_down()
        if missing:
            print(json.dumps({"error": "a stored chunk is missing"}), flush=True)
        else:
            print(json.dumps({"latencies_s": lat}), flush=True)
    for b in backends.values():
        b.close()
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    run()
