"""A scratchpad log write that fails part way (a full disk) is not
acknowledged, and it must not leave its partial frame in the file: the next
frames would follow it, and at replay the partial frame reads as damage whose
length leads into them, so acknowledged records after it would be reported
as lost. The log cuts the file back to its last whole frame."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tiermem.server.scratch.log import GroupCommitLog, frame
from tiermem.v1 import agent_records_pb2 as agent_pb2


def records(first: int) -> list[agent_pb2.StoredRecord]:
    return [
        agent_pb2.StoredRecord(id=first + i, session="s", payload=b"x" * 100) for i in range(10)
    ]


def test_a_failed_scratch_log_write_leaves_no_partial_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = GroupCommitLog(tmp_path)
    wal.write(frame(records(1)))
    real_write = os.write

    def half_then_full_disk(fd: int, data: memoryview) -> int:
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full_disk)
    with pytest.raises(OSError, match="No space"):
        wal.write(frame(records(100)))
    monkeypatch.setattr(os, "write", real_write)
    wal.write(frame(records(200)))  # space again
    wal.close()

    ((_seq, path),) = wal.existing()
    damage: list[str] = []
    ids = [r.id for r in GroupCommitLog.replay(path, damage)]
    assert ids == [*range(1, 11), *range(200, 210)]
    assert damage == []
