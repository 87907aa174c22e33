"""Durability: every acknowledged upsert and delete is in the operation log
before the reply; recovery = snapshot + log replay, after a clean stop and
after ``kill -9`` at an arbitrary moment (while writes and background snapshots
are in flight)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.helpers import DaemonProcess
from tests.vectors.conftest import clustered
from tiermem.client import Client, TiermemClientError
from tiermem.server.app import Daemon

D = 8


def _vector(i: int, version: int = 0) -> np.ndarray:
    rng = np.random.default_rng(i * 1000 + version)
    return rng.standard_normal(D).astype(np.float32)


def test_clean_restart_keeps_vectors_payloads_and_deletes(
    make_vdaemon: Callable[..., Daemon],
) -> None:
    daemon = make_vdaemon(vectors={"snapshot_ops": 400})
    x = clustered(1000, D, seed=5)
    with Client(daemon.address) as c:
        c.vectors.create("h", D, index="hnsw", metric="cosine")
        c.vectors.upsert("h", np.arange(1000), x, payloads=[{"n": i} for i in range(1000)])
        daemon.vectors.maintain()  # snapshot (1000 ops >= 400): the log is trimmed
        c.vectors.delete("h", np.arange(0, 1000, 10))
        c.vectors.upsert("h", [5], x[900:901] * 2, payloads=[{"n": -5}])  # log tail only
        before = c.vectors.search("h", x[:50], 10, include_payloads=True)
        seq = c.vectors.describe("h").log_seq
    daemon.stop()
    again = make_vdaemon()
    with Client(again.address) as c:
        info = c.vectors.describe("h")
        assert not info.loaded  # loaded on first use
        assert c.vectors.count("h") == 900
        after = c.vectors.search("h", x[:50], 10, include_payloads=True)
        assert c.vectors.describe("h").log_seq == seq
    assert np.array_equal(before.ids, after.ids)
    assert np.allclose(before.distances, after.distances)
    assert before.payloads == after.payloads


def test_kill_9_during_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    config = tmp_path / "tiermem.toml"
    config.write_text(
        "[vectors]\nsnapshot_ops = 300\nmaintain_interval_s = 0.05\n"
        "[tiers.dram]\ncapacity_bytes = '64MiB'\n"
    )
    proc = DaemonProcess(tmp_path / "data", config)
    acked_upserts: dict[int, int] = {}  # id -> version acknowledged
    acked_deletes: set[int] = set()
    in_flight: set[int] = set()  # ids of the one request that may not have been acknowledged
    stop = threading.Event()
    try:
        address = proc.start()

        def writer() -> None:
            with Client(address, timeout_s=10, retries=0) as c:
                for step in range(100_000):
                    if stop.is_set():
                        return
                    ids = list(range(step * 20 % 3000, step * 20 % 3000 + 20))
                    version = step
                    in_flight.clear()
                    in_flight.update(ids)
                    try:
                        if step % 7 == 6:
                            c.vectors.delete("v", ids[:5])
                            acked_deletes.update(ids[:5])
                            for i in ids[:5]:
                                acked_upserts.pop(i, None)
                        else:
                            vecs = np.stack([_vector(i, version) for i in ids])
                            c.vectors.upsert("v", ids, vecs, payloads=[{"ver": version}] * 20)
                            for i in ids:
                                acked_upserts[i] = version
                                acked_deletes.discard(i)
                    except TiermemClientError:
                        return  # the daemon died mid-call
                    in_flight.clear()

        with Client(address) as c:
            c.vectors.create("v", D, index="flat")
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(2.5)  # several snapshots and log trims happen meanwhile
        proc.kill9()
        stop.set()
        thread.join(30)
        assert len(acked_upserts) > 100
        address = proc.start()
        with Client(address) as c:
            # Recovery used a snapshot written by the background pass plus the log tail.
            assert c.vectors.describe("v").snapshot_seq > 0
            ids = np.array(sorted(set(acked_upserts) - in_flight))
            queries = np.stack([_vector(i, acked_upserts[i]) for i in ids])
            res = c.vectors.search("v", queries, 1, include_payloads=True)
            assert np.array_equal(res.ids[:, 0], ids)  # exact: each is its own neighbour
            assert res.payloads is not None
            assert [p[0].fields["ver"] for p in res.payloads if p[0]] == [
                acked_upserts[i] for i in ids
            ]
            gone = np.array(sorted(acked_deletes - in_flight), dtype=np.int64)
            if len(gone):
                hits = c.vectors.search("v", np.stack([_vector(i, 0) for i in gone]), 50)
                assert not np.isin(hits.ids, gone).any()
            assert abs(c.vectors.count("v") - len(acked_upserts)) <= len(in_flight)
    finally:
        stop.set()
        proc.stop()
