"""Drive the tiermem L2 adapter the way LMCache's multiprocess server does
(run in .venv-lmcache).

usage: python l2_harness.py ADDRESS adapter|server

``adapter``: build the adapter through LMCache's plugin factory, store objects,
look them up (with a hole), load them into fresh buffers; ``server``: start
``lmcache server`` with the adapter and wait for it to finish starting. Prints
one JSON line.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

import torch
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.l2_adapters import create_l2_adapter
from lmcache.v1.distributed.l2_adapters.plugin_l2_adapter import PluginL2AdapterConfig
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

SHAPE = (2, 2, 16, 64)


def plugin(address: str) -> dict[str, object]:
    return {
        "type": "plugin",
        "module_path": "tiermem.client.lmcache.l2_adapter",
        "class_name": "TiermemL2Adapter",
        "adapter_params": {"address": address, "salt": "l2-tenant"},
    }


def memory_obj(fill: torch.Tensor | None) -> TensorMemoryObj:
    data = torch.zeros(SHAPE, dtype=torch.bfloat16) if fill is None else fill.clone()
    meta = MemoryObjMetadata(
        shape=torch.Size(SHAPE), dtype=torch.bfloat16, address=0,
        phy_size=data.numel() * 2, ref_count=1, fmt=MemoryFormat.KV_2LTD,
    )  # fmt: skip
    return TensorMemoryObj(raw_data=data, metadata=meta, parent_allocator=None)


def wait(fd: int, poll: object, timeout_s: float = 30.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = poll()  # type: ignore[operator]
        if result:
            return result
        select.select([fd], [], [], 0.05)
    raise TimeoutError("L2 task did not complete")


def adapter_mode(address: str) -> dict[str, object]:
    cfg = PluginL2AdapterConfig.from_dict(plugin(address))
    adapter = create_l2_adapter(cfg)
    n = 6
    data = [torch.randn(SHAPE).bfloat16() for _ in range(n)]
    keys = [
        ObjectKey(chunk_hash=bytes([i]) * 16, model_name="l2/model", kv_rank=0) for i in range(n)
    ]
    task = adapter.submit_store_task(
        keys[:3] + keys[4:], [memory_obj(d) for d in data[:3] + data[4:]]
    )
    stored = wait(adapter.get_store_event_fd(), adapter.pop_completed_store_tasks)
    result = stored[task]  # type: ignore[index]
    out: dict[str, object] = {
        "store_ok": result.is_successful(),
        "bytes": result.bytes_transferred(),
    }
    task = adapter.submit_lookup_and_lock_task(keys, {})
    bitmap = wait(
        adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(task)
    )
    out["found"] = sorted(bitmap.get_indices_list())  # type: ignore[attr-defined]
    adapter.submit_unlock(keys)
    targets = [memory_obj(None) for _ in keys]
    task = adapter.submit_load_task(keys, targets)
    bitmap = wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task))
    loaded = sorted(bitmap.get_indices_list())  # type: ignore[attr-defined]
    out["loaded"] = loaded
    out["identical"] = sum(
        int(torch.equal(targets[i].raw_data.view(torch.int16), data[i].view(torch.int16)))
        for i in loaded
    )
    adapter.close()
    return out


def server_mode(address: str) -> dict[str, object]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "lmcache.cli.main", "server", "--host", "127.0.0.1",
        "--port", str(port), "--l1-size-gb", "0.05", "--eviction-policy", "LRU",
        "--l2-adapter", json.dumps(plugin(address)),
    ]  # fmt: skip
    env = {**os.environ, "LMCACHE_DISABLE_BANNER": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    started, failed = False, ""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "startup complete" in line.lower():
                started = True
                break
            if "startup failed" in line.lower() or "Traceback" in line:
                failed = line.strip()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"server_started": started, "failure": failed}


if __name__ == "__main__":
    addr, mode = sys.argv[1], sys.argv[2]
    print(json.dumps(adapter_mode(addr) if mode == "adapter" else server_mode(addr)), flush=True)
