"""Shared set-up for the scratchpad log fixtures: a daemon killed (``kill -9``)
with three acknowledged LOGGED appends only in its group-commit log."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import DaemonProcess
from tiermem.client import Client, NewRecord, RecordDurability, RecordKind

ENV = {
    "TIERMEM_AGENT__SCRATCH__EMBEDDER": "hash",
    "TIERMEM_AGENT__SCRATCH__FLUSH_INTERVAL_S": "3600",
    "TIERMEM_AGENT__SCRATCH__FLUSH_RECORDS": "1000000",
    "TIERMEM_TIERS__DRAM__CAPACITY_BYTES": "64MiB",
}
#: What the in-process daemon that recovers the data dir is configured with.
RESTART_CONFIG = {"agent": {"scratch": {"embedder": "hash"}}}
FRAME = struct.Struct("<II")  # u32 length | u32 crc32, then the batch


@dataclass(frozen=True)
class Frame:
    offset: int  # of its header
    length: int  # of its batch

    @property
    def end(self) -> int:
        return self.offset + FRAME.size + self.length


@dataclass(frozen=True)
class CrashedLog:
    data_dir: Path
    session: str
    batches: list[list[str]]  # payloads of each append, in order
    path: Path  # the log file holding them, one frame per append
    frames: list[Frame]


def frames(path: Path) -> list[Frame]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos + FRAME.size <= len(data):
        length, _crc = FRAME.unpack_from(data, pos)
        out.append(Frame(pos, length))
        pos += FRAME.size + length
    return out


def crash_with_three_logged_appends(data_dir: Path) -> CrashedLog:
    proc = DaemonProcess(data_dir, env=ENV)
    batches = [[f"batch {b} record {i}" for i in range(40)] for b in range(3)]
    try:
        with Client(proc.start()) as c:
            session = c.sessions.open(label="main").id
            for batch in batches:
                records = [
                    NewRecord(RecordKind.OBSERVATION, p, durability=RecordDurability.LOGGED)
                    for p in batch
                ]
                c.scratch.append_many(session, records)
        proc.kill9()
    finally:
        proc.stop()
    logs = [p for p in (data_dir / "scratch-log").iterdir() if p.stat().st_size]
    assert len(logs) == 1, logs
    found = frames(logs[0])
    assert len(found) == 3 and found[-1].end == logs[0].stat().st_size, found
    return CrashedLog(data_dir, session, batches, logs[0], found)
