"""A scratchpad log frame that fails its CRC in the middle of the log (whole
frames follow it) is damage, not a crash's torn tail: recovery logs it, counts
it (``tiermem_damaged_objects``, ``tiermem_checksum_failures_total``), lists
it in fsck, and keeps the file aside (renamed ``*.damaged``) instead of
deleting it. Before, replay stopped there silently and the file was deleted,
losing every acknowledged record after the damaged frame without a trace.

Records after it are recovered when the damaged frame's length field still
leads to a frame that checks out (a flipped byte in the batch); when the
length itself is damaged there is no sound way to find the next frame (no
sync marker, and record payloads are client bytes that can look like
frames), so they stay in the kept file, reported."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.scratch_log import RESTART_CONFIG, crash_with_three_logged_appends
from tiermem.client import Client
from tiermem.server.app import Daemon
from tiermem.server.services.integrity import check_offline


def flip(data: bytearray, offset: int) -> None:
    data[offset] ^= 0x5A


@pytest.mark.parametrize("damaged", ["batch", "length"])
def test_a_damaged_middle_frame_in_the_scratch_log_is_reported_and_kept(
    tmp_path: Path,
    make_daemon: Callable[..., Daemon],
    caplog: pytest.LogCaptureFixture,
    damaged: str,
) -> None:
    crashed = crash_with_three_logged_appends(tmp_path / "d")
    middle = crashed.frames[1]
    data = bytearray(crashed.path.read_bytes())
    flip(data, middle.offset + 8 + middle.length // 2 if damaged == "batch" else middle.offset)
    crashed.path.write_bytes(data)

    caplog.set_level(logging.ERROR)
    daemon = make_daemon("d", **RESTART_CONFIG)
    first, _middle, last = crashed.batches
    recovered = first + last if damaged == "batch" else first
    with Client(daemon.address) as c:
        assert [r.payload.decode() for r in c.scratch.replay(crashed.session)] == recovered
        assert daemon.metrics.registry.get_sample_value("tiermem_damaged_objects") == 1
        kept = crashed.path.with_name(crashed.path.name + ".damaged")
        assert kept.read_bytes() == data
        assert "data damaged, not served" in caplog.text and crashed.path.name in caplog.text
        assert [(d.key, d.where) for d in c.integrity.check().damaged] == [
            (f"<scratch log {kept.name}>", "scratch_log")
        ]
    daemon.stop()
    assert [d.where for d in check_offline(crashed.data_dir).damaged] == ["scratch_log"]
