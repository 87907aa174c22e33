"""Crash-kill: a mixed workload against a daemon subprocess is killed with
SIGKILL at random moments (including mid-put of large objects and at crash
points inside puts, deletes, demotion and compaction), restarted and checked:
every acknowledged DURABLE write present and byte-exact, nothing corrupted,
CACHE objects intact or reported missing (see tests/crash/workload.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.crash.workload import MODES, CrashHarness

CYCLES = int(os.environ.get("TIERMEM_CRASH_CYCLES", "21"))


def test_kill_9_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    harness = CrashHarness(tmp_path, seed=int(os.environ.get("TIERMEM_CRASH_SEED", "7")))
    failures: list[str] = []
    acked = 0
    try:
        for i in range(CYCLES):
            result = harness.run_cycle(MODES[i % len(MODES)], workload_s=1.0)
            acked += result.acked_ops
            failures += [f"cycle {i} ({result.mode}): {v}" for v in result.violations]
        last, _present = harness.finish()
        failures += [f"final check: {v}" for v in last]
    finally:
        harness.stop()
    assert acked > CYCLES * 10, "the workload barely ran"
    assert not failures, "\n".join(failures[:30])
