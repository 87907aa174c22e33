"""A crash can cut the last frame of the scratchpad log short (its write
never finished, so it was never acknowledged): that is not damage. Recovery
replays the whole frames before it and reports nothing, and the log is
removed once its records are committed, as after any crash."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.scratch_log import RESTART_CONFIG, crash_with_three_logged_appends
from tiermem.client import Client
from tiermem.server.app import Daemon


@pytest.mark.parametrize("cut_into", ["batch", "header"])
def test_a_torn_scratch_log_tail_after_a_crash_is_not_damage(
    tmp_path: Path,
    make_daemon: Callable[..., Daemon],
    caplog: pytest.LogCaptureFixture,
    cut_into: str,
) -> None:
    crashed = crash_with_three_logged_appends(tmp_path / "d")
    last = crashed.frames[-1]
    os.truncate(crashed.path, last.end - 10 if cut_into == "batch" else last.offset + 5)

    caplog.set_level(logging.WARNING)
    daemon = make_daemon("d", **RESTART_CONFIG)
    first, middle, _torn = crashed.batches
    with Client(daemon.address) as c:
        assert [r.payload.decode() for r in c.scratch.replay(crashed.session)] == first + middle
        assert (daemon.metrics.registry.get_sample_value("tiermem_damaged_objects") or 0) == 0
        assert "damaged" not in caplog.text
        assert c.integrity.check().clean
    assert not [p for p in crashed.path.parent.iterdir() if p.name.endswith(".damaged")]
