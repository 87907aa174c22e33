"""GPU host check: the HBM tier on real CUDA, and host-to-device bandwidth of
KV blocks fetched with GetBlocks into pinned memory vs torch's own pinned copy.

Run by ``bench/gpu_check.sh`` on a CUDA host (under five minutes). ``--allow-cpu``
runs the same steps on a CPU-only host (emulated HBM, no pinning) to check the
script itself; its figures mean nothing.

Measured, for blocks of ``--block-mib`` MiB:
* ``hbm_round_trip``: KV blocks admitted to the HBM tier (daemon on cuda:0 with
  the fixed-size KV block pool) come back bit-exact;
* ``torch_pinned_h2d``: ``pinned.to("cuda", non_blocking=True)`` (the ceiling);
* ``getblocks_pinned_h2d``: GetBlocks straight into pinned tensors, then the same
  device copy (what an inference worker does);
* ``getblocks_only``: the GetBlocks part alone (data path to host memory).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import goal, write_result
from tiermem.client import Client, KvBlock, KvScope, Profile, Tier

MiB = 1 << 20


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def best_of(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description="HBM tier and pinned H2D check")
    parser.add_argument("--block-mib", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        raise SystemExit("no CUDA device (use --allow-cpu to dry-run the script)")
    device = "cuda:0" if cuda else "cpu"
    block_bytes = args.block_mib * MiB
    total = block_bytes * args.blocks

    from prometheus_client import CollectorRegistry

    from tiermem.server.app import Daemon
    from tiermem.server.config import load_config

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        cfg = load_config(
            data_dir=str(Path(tmp) / "data"),
            server={"listen": "127.0.0.1:0", "max_message_bytes": 8 * MiB + 65536},
            metrics={"listen": ""},
            tiers={
                "hbm": {
                    "enabled": True,
                    "device": device,
                    "capacity_bytes": 2 * total + 64 * MiB,
                    "kv_block_bytes": block_bytes,
                },
                "dram": {"capacity_bytes": 2 * total + 64 * MiB},
            },
            kv={"max_batch_bytes": total + MiB},
        )
        daemon = Daemon(cfg, registry=CollectorRegistry())
        daemon.start()
        try:
            with Client(daemon.address, timeout_s=300) as client:
                result = run(client, daemon, device, args, block_bytes, total)
        finally:
            daemon.stop(grace_s=0)
    if cuda:
        write_result("gpu_check", result.pop("goals"), result)
    else:  # a dry run's figures mean nothing: print them, keep bench/results clean
        print(json.dumps(result, indent=2))


def run(client: Client, daemon: Any, device: str, args: Any, block_bytes: int, total: int) -> Any:
    scope = KvScope("gpu-check-model", dtype="bfloat16")
    elements = block_bytes // 2
    blocks = [torch.randn(elements).bfloat16() for _ in range(args.blocks)]
    hashes = list(range(args.blocks))
    stored = client.kv.put_blocks(
        scope, [KvBlock(h, b) for h, b in zip(hashes, blocks, strict=True)],
        profile=Profile(preferred_tier=Tier.HBM),
    )  # fmt: skip
    engine = daemon.store.memory[Tier.HBM]
    hbm_ok = all(s.tier == Tier.HBM for s in stored)
    pool_bytes = engine.pool.allocated_bytes
    pin = device.startswith("cuda")
    pinned = [torch.empty(elements, dtype=torch.bfloat16, pin_memory=pin) for _ in blocks]
    got = client.kv.get_blocks(scope, hashes, out=pinned)
    exact = all(
        g.found and torch.equal(p.view(torch.int16), b.view(torch.int16))
        for g, p, b in zip(got, pinned, blocks, strict=True)
    )

    def torch_copy() -> None:
        for p in pinned:
            p.to(device, non_blocking=True)
        sync(device)

    def fetch() -> None:
        client.kv.get_blocks(scope, hashes, out=pinned)

    def fetch_and_copy() -> None:
        fetch()
        torch_copy()

    t_torch = best_of(torch_copy, args.repeat)
    t_fetch = best_of(fetch, args.repeat)
    t_both = best_of(fetch_and_copy, args.repeat)
    ratio = t_torch / t_both
    return {
        "goals": [
            goal("hbm_round_trip_bit_exact", float(hbm_ok and exact), 1.0, "bool"),
            goal("getblocks_pinned_h2d_vs_torch_pinned", ratio, 1.0, "x"),
        ],
        "device": torch.cuda.get_device_name(0) if pin else "cpu (dry run)",
        "block_bytes": block_bytes,
        "blocks": args.blocks,
        "hbm_tier": {
            "stored_in_hbm": hbm_ok,
            "pool_bytes_in_use": pool_bytes,
            "bit_exact": exact,
            "engine": engine.device,
        },
        "torch_pinned_h2d_gbps": round(gbps(total, t_torch), 3),
        "getblocks_only_gbps": round(gbps(total, t_fetch), 3),
        "getblocks_pinned_h2d_gbps": round(gbps(total, t_both), 3),
        "notes": "GetBlocks uses the gRPC data path here; the shared-memory and bulk "
        "paths (client/dataplane*) are expected to close most of the gap.",
    }


if __name__ == "__main__":
    main()
