"""Put and get of 32 MiB and 256 KiB objects through tiermem's gRPC path, side by
side with a local Redis (persistence off) through redis-py + hiredis.

Both servers run as separate processes on 127.0.0.1. tiermem objects are KV
blocks (CACHE, admitted to DRAM) — the like-for-like comparison with a Redis
that does not persist; DURABLE blobs (SSD copy + fsync before the ack) are
reported beside them.

    python -m bench.object_throughput [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import redis

from bench.common import goal, redis_server, summarize, tiermem_daemon, timed, write_result
from tiermem.client import Client, Kind

SIZES = {"32MiB": 32 << 20, "256KiB": 256 << 10}


def measure(put: Any, get: Any, size: int, repeat: int) -> dict[str, Any]:
    data = os.urandom(size)
    keys = [f"obj-{i}" for i in range(repeat)]
    it = iter(keys)
    put_lat = timed(lambda: put(next(it), data), repeat)
    it = iter(keys)
    out: list[bytes] = []
    get_lat = timed(lambda: out.append(get(next(it))), repeat)
    if out[-1] != data:
        raise AssertionError("read back different bytes")
    return {"put": summarize(put_lat, size), "get": summarize(get_lat, size)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = {"32MiB": 6 if args.quick else 20, "256KiB": 100 if args.quick else 400}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, redis_server() as port:
        env = ("TIERMEM_TIERS__DRAM__CAPACITY_BYTES", "2GiB")
        with tiermem_daemon(Path(tmp) / "tm", env) as address:
            r = redis.Redis(host="127.0.0.1", port=port)
            with Client(address, timeout_s=120) as c:
                for label, size in SIZES.items():
                    n = reps[label]
                    results.setdefault(label, {})["redis"] = measure(
                        lambda k, d: r.set(k, d), lambda k: r.get(k), size, n
                    )
                    r.flushall()
                    results[label]["tiermem_grpc_kv_cache"] = measure(
                        lambda k, d: c.put(Kind.KV_BLOCK, k, d),
                        lambda k: c.get(Kind.KV_BLOCK, k),
                        size,
                        n,
                    )
                    results[label]["tiermem_grpc_blob_durable"] = measure(
                        lambda k, d: c.put(Kind.BLOB, k, d),
                        lambda k: c.get(Kind.BLOB, k),
                        size,
                        max(3, n // 4),
                    )
                    for k in range(n):
                        c.delete(Kind.KV_BLOCK, f"obj-{k}")
    big = results["32MiB"]
    goals = [
        goal(
            "put_32MiB_vs_redis",
            big["tiermem_grpc_kv_cache"]["put"]["mb_per_s"] / big["redis"]["put"]["mb_per_s"],
            1.0,
            "x",
        ),
        goal(
            "get_32MiB_vs_redis",
            big["tiermem_grpc_kv_cache"]["get"]["mb_per_s"] / big["redis"]["get"]["mb_per_s"],
            1.0,
            "x",
        ),
    ]
    write_result("object_throughput", goals, {"results": results, "repetitions": reps})


if __name__ == "__main__":
    main()
