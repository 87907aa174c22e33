"""One million objects in the catalog: daemon memory per object and restart time.

1. Seed a data directory with N small objects through the daemon's own write
   path (ObjectService.put in-process, no gRPC, so seeding takes a minute rather
   than an hour); values are 64 bytes, persisted inline on SSD.
2. Start an empty daemon and the seeded one as subprocesses (`tiermem serve`,
   the same config); restart time = process start until it prints
   "listening on" (recovery done, serving).
3. Memory per object = (RSS of the seeded daemon - RSS of the empty one) / N,
   the median of /proc samples over 12 s after a get of a random key and a
   Stats call (the peak, during a rebalancing plan, is reported beside it).

    python -m bench.catalog_scale [--objects N]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, goal, write_result
from tiermem.client import Client, Kind

ENV = {
    "TIERMEM_TIERS__DRAM__CAPACITY_BYTES": "64MiB",
    "TIERMEM_LOGGING__LEVEL": "WARNING",
}


def seed(data_dir: Path, n: int) -> float:
    from prometheus_client import CollectorRegistry

    from tiermem.server.app import Daemon
    from tiermem.server.config import load_config
    from tiermem.server.model import Durability, ObjectKey, Profile, Tier
    from tiermem.server.model import Kind as SKind
    from tiermem.server.services.objects import PutSpec

    cfg = load_config(
        data_dir=str(data_dir),
        server={"listen": "127.0.0.1:0"},
        metrics={"listen": ""},
        tiers={"dram": {"capacity_bytes": 64 << 20}},
    )
    daemon = Daemon(cfg, registry=CollectorRegistry())
    daemon.start()
    started = time.perf_counter()
    profile = Profile(durability=Durability.CACHE, preferred_tier=Tier.SSD)
    payload = os.urandom(64)
    for i in range(n):
        key = ObjectKey("default", SKind.SCRATCH, f"agent-{i % 1000:04d}/record-{i:09d}")
        daemon.objects.put(PutSpec(key, 64, profile), [payload])
    elapsed = time.perf_counter() - started
    daemon.stop()
    return elapsed


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def start(data_dir: Path) -> tuple[subprocess.Popen[str], str, float]:
    cmd = [sys.executable, "-m", "tiermem.cli.main", "serve", "--data-dir", str(data_dir),
           "--listen", "127.0.0.1:0", "--metrics-listen", ""]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, **ENV}
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split()[-1], time.perf_counter() - t0
    raise RuntimeError("daemon did not start")


#: RSS is sampled this long after a get and a Stats call: long enough for the
#: migrator to plan over the whole catalog at least twice (a plan allocates
#: catalog-sized temporaries and hands them back afterwards).
SAMPLE_SECONDS = 12.0


def settle_rss(proc: subprocess.Popen[str], address: str, n: int) -> tuple[int, int]:
    """(median, peak) resident bytes over ``SAMPLE_SECONDS`` of an idle daemon."""
    with Client(address) as c:
        i = random.randrange(n) if n else 0
        if n:
            c.get(Kind.SCRATCH, f"agent-{i % 1000:04d}/record-{i:09d}")
        c.stats()
    samples = []
    end = time.monotonic() + SAMPLE_SECONDS
    while time.monotonic() < end:
        samples.append(rss_bytes(proc.pid))
        time.sleep(0.2)
    return int(statistics.median(samples)), max(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument(
        "--seeded-dir", type=Path, default=None, help="reuse (or create) a seeded data dir"
    )
    args = parser.parse_args()
    n = args.objects
    with tempfile.TemporaryDirectory() as tmp:
        seeded, empty = args.seeded_dir or Path(tmp) / "seeded", Path(tmp) / "empty"
        marker = seeded / f"seeded-{n}"
        if marker.exists():
            seed_s = float(marker.read_text())
        else:
            seed_s = seed(seeded, n)
            marker.write_text(str(seed_s))
        print(f"seeded {n} objects in {seed_s:.1f}s")
        proc, addr, empty_start_s = start(empty)
        try:
            rss_empty, _ = settle_rss(proc, addr, 0)
        finally:
            proc.terminate()
            proc.wait(60)
        restarts = []
        rss_loaded = rss_peak = 0
        for _ in range(2):  # first start warms the page cache like a real restart
            proc, addr, restart_s = start(seeded)
            try:
                rss_loaded, rss_peak = settle_rss(proc, addr, n)
                with Client(addr) as c:
                    assert c.stats().objects == n
            finally:
                proc.terminate()
                proc.wait(60)
            restarts.append(restart_s)
        disk = sum(f.stat().st_size for f in seeded.rglob("*") if f.is_file())
    per_object = (rss_loaded - rss_empty) / n
    goals = [
        goal("memory_per_object", per_object, 300, "bytes", higher_is_better=False),
        goal("restart_until_serving", max(restarts), 10.0, "s", higher_is_better=False),
    ]
    write_result(
        "catalog_scale",
        goals,
        {
            "objects": n,
            "value_bytes": 64,
            "seed_seconds": seed_s,
            "seed_puts_per_s": n / seed_s,
            "rss_empty_daemon_bytes": rss_empty,
            "rss_loaded_daemon_bytes": rss_loaded,
            "rss_loaded_daemon_peak_bytes": rss_peak,
            "peak_memory_per_object_bytes": (rss_peak - rss_empty) / n,
            "memory_note": (
                f"median resident size over {SAMPLE_SECONDS:.0f} s of an idle daemon (steady "
                "state); the peak includes a rebalancing plan's catalog-sized temporaries"
            ),
            "empty_start_seconds": empty_start_s,
            "restart_seconds": restarts,
            "data_dir_bytes": disk,
        },
    )


if __name__ == "__main__":
    main()
