"""Drive LMCache 0.5.x with the tiermem remote storage plugin (run in .venv-lmcache).

usage: python lmcache_harness.py ADDRESS store|load N SEED

``store``: an LMCache engine puts N chunks through the plugin, then reads them
back from the remote backend; ``load``: a fresh LMCache instance (another
process) looks the same chunks up and reads them. Prints one JSON line with
counts; chunk bytes are derived from SEED so both sides know what to expect.
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

CHUNK = 16
KV_SHAPE = (2, 2, CHUNK, 2, 32)  # layers, K/V, tokens, kv heads, head dim
MODEL = "harness/tiny-model"


def engine(address: str) -> tuple[dict[str, object], asyncio.AbstractEventLoop, LMCacheMetadata]:
    cfg = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=True,
        max_local_cpu_size=0.05,
        remote_storage_plugins=["tiermem"],
        extra_config={
            "remote_storage_plugin.tiermem.module_path": "tiermem.client.lmcache.connector",
            "remote_storage_plugin.tiermem.class_name": "TiermemConnector",
            "remote_storage_plugin.tiermem.address": address,
            "remote_storage_plugin.tiermem.salt": "harness-tenant",
        },
    )
    md = LMCacheMetadata(
        model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=KV_SHAPE, chunk_size=CHUNK, role="worker",
    )  # fmt: skip
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return CreateStorageBackends(cfg, md, loop), loop, md


def key(i: int, seed: int) -> CacheEngineKey:
    return CacheEngineKey(MODEL, 1, 0, (seed << 32) + i * 0x9E3779B1, torch.bfloat16)


def expected(obj_shape: torch.Size, i: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + i)
    return torch.randn(tuple(obj_shape), generator=g).to(torch.bfloat16)


def main() -> None:
    address, mode, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    backends, loop, md = engine(address)
    remote = next(b for name, b in backends.items() if name.startswith("RemoteBackend"))
    cpu = backends["LocalCPUBackend"]
    keys = [key(i, seed) for i in range(n)]
    shapes = md.get_shapes()
    result: dict[str, object] = {"backends": sorted(backends)}
    if mode == "store":
        objs = []
        for i in range(n):
            obj = cpu.allocate(shapes, md.get_dtypes())
            obj.tensor.copy_(expected(obj.tensor.shape, i, seed))
            objs.append(obj)
        remote.batched_submit_put_task(keys, objs)
        deadline = time.monotonic() + 60
        while remote.batched_contains(keys) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        for obj in objs:
            obj.ref_count_down()
    result["contains"] = remote.batched_contains(keys)
    result["contains_with_hole"] = remote.batched_contains(
        [*keys[: n // 2], key(10**6, seed), *keys[n // 2 :]]
    )
    result["exists_first"] = remote.contains(keys[0])
    identical = 0
    for i, k in enumerate(keys):
        obj = remote.get_blocking(k)
        if obj is None:
            continue
        same = torch.equal(
            obj.tensor.view(torch.uint16), expected(obj.tensor.shape, i, seed).view(torch.uint16)
        )
        identical += int(same and obj.tensor.dtype == torch.bfloat16)
        obj.ref_count_down()
    result["identical"] = identical
    print(json.dumps(result), flush=True)
    for b in backends.values():
        b.close()
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
