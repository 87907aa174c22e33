"""Do synced catalog writes stall the daemon's other threads?

rocksdict holds the interpreter lock for the whole of ``Rdict.write``; a write
with ``sync=True`` therefore keeps every other Python thread waiting while the
disk syncs. ``RocksStore.write(sync=True)`` writes the batch unsynced and then
syncs the WAL with ``flush_wal``, which releases the interpreter lock.

One run, side by side, rounds interleaved: 4 writer threads each commit
``--writes`` synced one-record batches (the DURABLE metadata path: sessions,
blobs, scratch) while a fifth thread runs Python code and counts its loops, as
a request thread would, at the daemon's thread switch interval. Reported per
way of syncing: synced writes per second and the fifth thread's progress as a
fraction of its rate with no writers. The price is in the details: a writer
must get the interpreter back after each sync, so synced writes per second
drop while other threads run.

Goal: the fifth thread keeps at least half its idle rate through
``RocksStore.write(sync=True)``. The GIL-holding ``Rdict.write`` with a synced
``WriteOptions`` is measured beside it (not judged).

Group commit, reported beside (not judged): ``RocksStore.write(sync=True)``
syncs through ``GroupSync`` (writers syncing at once share one
``flush_wal``). The same writes with one ``flush_wal`` each (what it did
before) run in the same rounds, with 4 writers and again with
``--many-writers`` (16) and no fifth thread: synced writes per second and the
p99 of one synced write.

    python -m bench.catalog_sync [--rounds N] [--writes N] [--many-writers N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rocksdict import WriteOptions

from bench.common import goal, percentile, write_result
from tiermem.server.config import ServerConfig
from tiermem.server.storage.rocks import RocksStore

WRITERS = 4
RECORD = b"r" * 200


class Spinner:
    """A thread that runs Python code and counts how far it got."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = False
        self.pause = False  # while other measurements run
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            if self.pause:
                time.sleep(0.01)
                continue
            self.count += 1

    def rate(self, seconds: float) -> float:
        start, t0 = self.count, time.perf_counter()
        time.sleep(seconds)
        return (self.count - start) / (time.perf_counter() - t0)

    def stop(self) -> None:
        self._stop = True
        self._thread.join()


def _round(
    commit: Callable[[str, int], None],
    spinner: Spinner | None,
    writes: int,
    writers: int = WRITERS,
) -> dict[str, float]:
    idle = spinner.rate(0.3) if spinner is not None else 0.0
    latencies: list[float] = []

    def writer(w: int) -> None:
        for i in range(writes):
            t = time.perf_counter()
            commit(f"{w}", i)
            latencies.append(time.perf_counter() - t)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    start, t0 = spinner.count if spinner is not None else 0, time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    out = {
        "synced_writes_per_s": writers * writes / elapsed,
        "write_p99_ms": percentile(latencies, 99) * 1e3,
    }
    if spinner is not None:
        out["other_thread_progress"] = (spinner.count - start) / elapsed / idle
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--writes", type=int, default=150, help="synced writes per writer")
    parser.add_argument("--many-writers", type=int, default=16)
    args = parser.parse_args()
    # the thread switch interval `tiermem serve` sets (server.switch_interval_s)
    sys.setswitchinterval(ServerConfig().switch_interval_s)
    synced = WriteOptions()
    synced.sync = True
    with tempfile.TemporaryDirectory(prefix="tiermem-catalog-sync-") as tmp:
        store = RocksStore(Path(tmp) / "catalog")

        def via_store(writer: str, i: int) -> None:
            batch = store.batch()
            batch.put("meta", f"store/{writer}/{i}".encode(), RECORD)
            batch.commit(sync=True)

        def via_rdict(writer: str, i: int) -> None:
            batch = store.batch()
            batch.put("meta", f"rdict/{writer}/{i}".encode(), RECORD)
            store._db.write(batch.raw, synced)  # the GIL-holding synced write

        def one_flush_each(writer: str, i: int) -> None:
            batch = store.batch()
            batch.put("meta", f"each/{writer}/{i}".encode(), RECORD)
            batch.commit(sync=False)
            store._sync_wal()  # a flush_wal of its own, not shared (before GroupSync)

        ways = {
            "rocksstore_write_sync": via_store,
            "rdict_write_synced_options": via_rdict,
            "one_flush_wal_per_write": one_flush_each,
        }
        many = {f"{name}_{args.many_writers}_writers": ways[name] for name in
                ("rocksstore_write_sync", "one_flush_wal_per_write")}  # fmt: skip
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in [*ways, *many]}
        spinner = Spinner()
        try:
            for r in range(args.rounds):
                order = list(ways) if r % 2 == 0 else list(reversed(ways))
                for name in order:
                    rounds[name].append(_round(ways[name], spinner, args.writes))
                order = list(many) if r % 2 == 0 else list(reversed(many))
                spinner.pause = True
                for name in order:
                    rounds[name].append(_round(many[name], None, args.writes, args.many_writers))
                spinner.pause = False
        finally:
            spinner.stop()
            store.close()
    summary = {
        name: {
            metric: round(statistics.median(x[metric] for x in rs), 4)
            for metric in ("synced_writes_per_s", "write_p99_ms", "other_thread_progress")
            if metric in rs[0]
        }
        for name, rs in rounds.items()
    }
    goals = [
        goal(
            "other thread's progress during synced catalog writes (vs idle)",
            summary["rocksstore_write_sync"]["other_thread_progress"],
            0.5,
            "x",
        )
    ]
    write_result(
        "catalog_sync",
        goals,
        {
            "method": (
                f"medians over {args.rounds} interleaved rounds; {WRITERS} writer threads x "
                f"{args.writes} synced one-record batches of {len(RECORD)} bytes, and one "
                "thread counting Python loops; progress = its loop rate during the writes / "
                "its rate with no writers, measured just before each round. The "
                f"'_{args.many_writers}_writers' ways: {args.many_writers} writer threads, the "
                "counting thread paused"
            ),
            "results": summary,
            "rounds": rounds,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
