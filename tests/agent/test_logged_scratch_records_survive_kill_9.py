import os
import time

from tests.helpers import DaemonProcess
from tiermem.client import Client, NewRecord, RecordDurability, RecordKind

ENV = {
    "TIERMEM_AGENT__SCRATCH__EMBEDDER": "hash",
    "TIERMEM_AGENT__SCRATCH__FLUSH_INTERVAL_S": "3600",
    "TIERMEM_AGENT__SCRATCH__FLUSH_RECORDS": "1000000",
    "TIERMEM_AGENT__SCRATCH__BUFFERED_WINDOW_MS": "300",
    "TIERMEM_TIERS__DRAM__CAPACITY_BYTES": "64MiB",
}


def test_logged_records_survive_kill_9_and_buffered_loss_stays_in_its_window(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = DaemonProcess(tmp_path / "data", env=ENV)
    try:
        with Client(proc.start()) as client:
            s = client.sessions.open(label="main")
            flushed = [NewRecord(RecordKind.OBSERVATION, f"flushed {i}") for i in range(50)]
            client.scratch.append_many(s.id, flushed)
            client.scratch.flush()
            logged = [NewRecord(RecordKind.THOUGHT, f"logged {i}", tags=["t"]) for i in range(500)]
            for i in range(0, 500, 50):
                client.scratch.append_many(s.id, logged[i : i + 50])
            client.scratch.append(s.id, RecordKind.DECISION, "pos", key="position")
            client.scratch.append(s.id, RecordKind.DECISION, "pos2", key="position")
            old = [
                NewRecord(
                    RecordKind.OBSERVATION,
                    f"old buffered {i}",
                    durability=RecordDurability.BUFFERED,
                )
                for i in range(100)
            ]
            client.scratch.append_many(s.id, old)
            deadline = time.monotonic() + 20
            while client.scratch.stats().unlogged_records and time.monotonic() < deadline:
                time.sleep(0.05)  # older than the window: in the log now
            young = [
                NewRecord(
                    RecordKind.OBSERVATION,
                    f"young buffered {i}",
                    durability=RecordDurability.BUFFERED,
                )
                for i in range(100)
            ]
            client.scratch.append_many(s.id, young)
        proc.kill9()
        with Client(proc.start()) as client:
            payloads = [r.payload.decode() for r in client.scratch.replay(s.id)]
            expected = [r.payload for r in (*flushed, *logged, *old)]
            young_payloads = {r.payload for r in young}
            assert [p for p in payloads if p not in young_payloads and p != "pos2"] == expected
            assert "pos2" in payloads and "pos" not in payloads
            lost = len(young) - sum(p in young_payloads for p in payloads)
            assert 0 <= lost <= len(young)  # only records younger than the window may be lost
            stats = client.scratch.stats()
            assert stats.flushes_by_reason.get("recovery") == 1
            assert stats.buffered_records == 0
            assert os.listdir(tmp_path / "data" / "scratch-log") == [
                f for f in os.listdir(tmp_path / "data" / "scratch-log") if f.endswith(".wal")
            ]
    finally:
        proc.stop()
