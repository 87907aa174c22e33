"""Crash-kill: a mixed workload against a daemon subprocess is killed with
SIGKILL at random moments (including mid-put of large objects and at crash
points inside puts, deletes, demotion and compaction; a quarter of the
restarts are killed once more while the daemon starts), restarted and checked:
every acknowledged DURABLE write present and byte-exact, nothing corrupted,
CACHE objects intact or reported missing, for plain objects, scratchpad
records, KV blocks, vectors and blobs (see tests/crash/workload.py and
tests/crash/kinds.py). Every restart must serve within RESTART_LIMIT_S."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from tests.crash.workload import MODES, OPS, RESTART_LIMIT_S, CrashHarness

CYCLES = int(os.environ.get("TIERMEM_CRASH_CYCLES", "21"))


def test_kill_9_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    harness = CrashHarness(tmp_path, seed=int(os.environ.get("TIERMEM_CRASH_SEED", "7")))
    failures: list[str] = []
    acked: Counter[str] = Counter()
    starts: list[float] = []
    try:
        for i in range(CYCLES):
            result = harness.run_cycle(MODES[i % len(MODES)], workload_s=1.0)
            acked.update(result.acked_by_op)
            starts.append(result.start_s)
            failures += [f"cycle {i} ({result.mode}): {v}" for v in result.violations]
        last, _present = harness.finish()
        failures += [f"final check: {v}" for v in last]
    finally:
        harness.stop()
    assert sum(acked.values()) > CYCLES * 10, "the workload barely ran"
    writes = [name for name, _, _ in OPS if "check" not in name]
    idle = [name for name in writes if acked[name] == 0]
    assert not idle, f"operations never acknowledged in {CYCLES} cycles: {idle}"
    assert not failures, "\n".join(failures[:30])
    assert max(starts) < RESTART_LIMIT_S, (
        f"a restart took {max(starts):.1f} s to serve (limit {RESTART_LIMIT_S} s): {starts}"
    )
