"""Crash-kill harness: a mixed workload against a daemon subprocess, ``kill -9``
at random moments, restart, and a check against what the test recorded.

The record (``Expected``) knows, per key, the last acknowledged version (value
hash and durability, or "absent") and the operation in flight when the daemon
died, if any. Each key belongs to one worker, so a key has at most one
operation in flight. After a restart every key must read back as:

* its acknowledged version, byte-exact (hash-exact), or
* the version of the operation in flight at the kill (it may or may not have
  landed), or
* absent, if the acknowledged version was CACHE (CACHE objects may be lost),
  the in-flight operation was a delete, or nothing was ever acknowledged.

DATA_LOSS, any other error, or bytes matching none of these is a failure.
``list`` must agree with the gets.

The operations are a table (``OPS``): add a row to put new kinds of work under
the same checks (KV, vector and scratch services plug in here once merged).
"""

from __future__ import annotations

import hashlib
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import DaemonProcess
from tiermem.client import (
    Client,
    Durability,
    Kind,
    NotFoundError,
    Profile,
    Tier,
    TiermemClientError,
)

KiB, MiB = 1 << 10, 1 << 20

CONFIG = """
[tiers.dram]
capacity_bytes = "6MiB"
arena_min_bytes = "16KiB"
prefault = false
[tiers.ssd]
capacity_bytes = "2GiB"
segment_bytes = "1MiB"
inline_max_bytes = "16KiB"
compaction_live_ratio = 0.7
[background]
migrate_interval_s = 0.05
compaction_interval_s = 0.2
[server]
shutdown_grace_s = 0
[faults]
kill_points = {points}
kill_probability = {probability}
seed = {seed}
arm_file = "{arm_file}"
"""

#: Crash points armed in "points" cycles: the dangerous windows of puts,
#: deletes, demotion and compaction (see server/faults.py).
ARMED = [
    "put.after_ssd_write", "put.after_commit", "delete.after_commit", "move.after_copy",
    "move.after_switch", "compaction.after_append", "compaction.after_switch",
    "compaction.before_retire", "segment.mid_write",
]  # fmt: skip


@dataclass(frozen=True)
class Version:
    digest: bytes  # blake2b-128 of the value
    size: int
    durable: bool


ABSENT = None
DELETE = "delete"


@dataclass
class KeyState:
    kind: Kind
    acked: Version | None = ABSENT
    pending: Version | str | None = None  # a Version (put), DELETE, or None

    def acceptable(self) -> tuple[set[bytes], bool]:
        """(acceptable digests, whether absent is acceptable)."""
        digests = set()
        # Absent is fine if nothing durable was acknowledged, a delete was in flight,
        # or a CACHE overwrite was in flight: it may have replaced the durable
        # version and then been lost itself (CACHE objects may be).
        absent_ok = (
            self.acked is None
            or not self.acked.durable
            or self.pending == DELETE
            or (isinstance(self.pending, Version) and not self.pending.durable)
        )
        if self.acked is not None:
            digests.add(self.acked.digest)
        if isinstance(self.pending, Version):
            digests.add(self.pending.digest)
        return digests, absent_ok


def digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass
class Worker:
    """Operations of one client thread on its own keys."""

    index: int
    client: Client
    expected: dict[str, KeyState]
    keys: list[str]
    rng: random.Random
    large_started: threading.Event
    acked: int = 0
    errors: list[str] = field(default_factory=list)


def _put(size: tuple[int, int], kind: Kind, durability: Durability, tier: Tier | None = None
         ) -> Callable[[Worker, str], None]:  # fmt: skip
    def op(w: Worker, key: str) -> None:
        state = w.expected[key]
        if state.kind != kind:
            return
        n = w.rng.randint(*size)
        data = w.rng.randbytes(n)
        version = Version(digest(data), n, durability == Durability.DURABLE)
        state.pending = version
        if n >= MiB:
            w.large_started.set()
        w.client.put(kind, key, data, profile=Profile(durability=durability, preferred_tier=tier))
        state.acked, state.pending = version, None
        w.acked += 1

    return op


def _delete(w: Worker, key: str) -> None:
    state = w.expected[key]
    state.pending = DELETE
    w.client.delete(state.kind, key)
    state.acked, state.pending = ABSENT, None
    w.acked += 1


def _get(w: Worker, key: str) -> None:
    state = w.expected[key]
    try:
        data = w.client.get(state.kind, key)
    except NotFoundError:
        if state.acked is not None and state.acked.durable:
            w.errors.append(f"{key}: acknowledged DURABLE object missing while serving")
        return
    if state.acked is None or digest(data) != state.acked.digest:
        w.errors.append(f"{key}: read bytes that are not its acknowledged version")


#: (name, weight, operation). Keys are typed by kind: an op skips keys of other kinds.
OPS: list[tuple[str, int, Callable[[Worker, str], None]]] = [
    ("put scratch small durable", 6, _put((50, 4 * KiB), Kind.SCRATCH, Durability.DURABLE)),
    ("put blob medium durable", 5, _put((20 * KiB, 300 * KiB), Kind.BLOB, Durability.DURABLE)),
    ("put blob large durable", 2, _put((MiB, 5 * MiB), Kind.BLOB, Durability.DURABLE)),
    ("put kv cache (DRAM)", 5, _put((16 * KiB, 600 * KiB), Kind.KV_BLOCK, Durability.CACHE)),
    (
        "put kv cache on SSD",
        2,
        _put((8 * KiB, 200 * KiB), Kind.KV_BLOCK, Durability.CACHE, Tier.SSD),
    ),
    ("put kv durable", 2, _put((16 * KiB, 400 * KiB), Kind.KV_BLOCK, Durability.DURABLE)),
    ("delete", 4, _delete),
    ("get and check", 6, _get),
]
KINDS = [Kind.SCRATCH, Kind.BLOB, Kind.KV_BLOCK]


@dataclass
class CycleResult:
    mode: str
    start_s: float  # process start to serving
    recovery_s: float  # the daemon's own recovery time (log)
    recovered_objects: int
    acked_ops: int
    checked_keys: int
    present: int
    violations: list[str]
    killed_by: str


class CrashHarness:
    def __init__(self, root: Path, *, workers: int = 4, keys_per_worker: int = 30, seed: int = 1):
        self.root = root
        self.data = root / "data"
        self.rng = random.Random(seed)
        self.seed = seed
        self.workers = workers
        self.expected: dict[str, KeyState] = {}
        self.keys: list[list[str]] = []
        for w in range(workers):
            mine = []
            for i in range(keys_per_worker):
                key = f"w{w}-k{i}"
                self.expected[key] = KeyState(KINDS[i % len(KINDS)])
                mine.append(key)
            self.keys.append(mine)
        self.cycle = 0
        self.proc: DaemonProcess | None = None
        #: Crash points fire only while this file exists: not during the checks.
        self.arm_file = root / "armed"

    def _config(self, armed: bool) -> Path:
        path = self.root / "crash.toml"
        points = ARMED if armed else []
        path.write_text(
            CONFIG.format(
                points="[" + ", ".join(f'"{p}"' for p in points) + "]",
                probability=0.01 if armed else 0.0,
                seed=self.rng.randrange(1, 1 << 30),
                arm_file=self.arm_file,
            )
        )
        return path

    def _start(self, armed: bool) -> tuple[str, float]:
        self.proc = DaemonProcess(self.data, config=self._config(armed))
        started = time.monotonic()
        address = self.proc.start(timeout_s=120)
        return address, time.monotonic() - started

    def _recovery_line(self) -> tuple[float, int]:
        assert self.proc is not None
        found = re.findall(
            r"recovered (\d+) objects in ([\d.]+)s", self.proc.log_path.read_text(errors="replace")
        )
        if not found:
            return float("nan"), 0
        objects, seconds = found[-1]
        return float(seconds), int(objects)

    def verify(self, address: str) -> tuple[list[str], int]:
        """Check every key against the record; adopt what is there as the new truth."""
        violations: list[str] = []
        present: set[str] = set()
        with Client(address, retries=5, timeout_s=60) as c:
            for key, state in self.expected.items():
                digests, absent_ok = state.acceptable()
                try:
                    data = c.get(state.kind, key)
                except NotFoundError:
                    if not absent_ok:
                        violations.append(f"{key}: acknowledged DURABLE version lost")
                    state.acked, state.pending = ABSENT, None
                    continue
                except TiermemClientError as exc:
                    violations.append(f"{key}: {exc.code}: {exc.message[:200]}")
                    continue
                got = digest(data)
                if got not in digests:
                    violations.append(f"{key}: {len(data)} bytes that match no version")
                    continue
                present.add(key)
                durable = (state.acked and state.acked.digest == got and state.acked.durable) or (
                    isinstance(state.pending, Version)
                    and state.pending.digest == got
                    and state.pending.durable
                )
                state.acked, state.pending = Version(got, len(data), bool(durable)), None
            listed = {o.key for o in c.list()}
            if listed != present:
                violations.append(f"list disagrees with get: {sorted(listed ^ present)[:10]}")
        return violations, len(present)

    def run_cycle(self, mode: str, workload_s: float = 2.5) -> CycleResult:
        """Start (verify what the last cycle left), run the workload, kill -9."""
        self.cycle += 1
        armed = mode == "points"
        address, start_s = self._start(armed)
        recovery_s, recovered = self._recovery_line()
        violations, present = self.verify(address)
        if armed:
            self.arm_file.touch()
        large = threading.Event()
        stop = threading.Event()
        workers = [
            Worker(
                i,
                Client(address, retries=0, timeout_s=20),
                self.expected,
                self.keys[i],
                random.Random(self.rng.random()),
                large,
            )
            for i in range(self.workers)
        ]
        weights = [w for _, w, _ in OPS]

        def run(w: Worker) -> None:
            while not stop.is_set():
                key = w.rng.choice(w.keys)
                _name, _weight, op = w.rng.choices(OPS, weights)[0]
                try:
                    op(w, key)
                except TiermemClientError as exc:
                    if exc.code in ("UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED"):
                        return  # the daemon is gone: the op stays "in flight"
                    w.errors.append(f"{key}: {exc.code}: {exc.message[:200]}")
                    w.expected[key].pending = None  # refused: nothing changed

        threads = [threading.Thread(target=run, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        killed_by = self._kill(mode, large, workload_s)
        self.arm_file.unlink(missing_ok=True)
        stop.set()
        for t in threads:
            t.join(60)
        for w in workers:
            w.client.close()
            violations += [f"while serving: {e}" for e in w.errors]
        return CycleResult(
            mode, start_s, recovery_s, recovered, sum(w.acked for w in workers),
            len(self.expected), present, violations, killed_by,
        )  # fmt: skip

    def _kill(self, mode: str, large: threading.Event, workload_s: float) -> str:
        assert self.proc is not None and self.proc.proc is not None
        proc = self.proc.proc
        if mode == "mid-large-put":
            if large.wait(workload_s * 2):
                time.sleep(self.rng.uniform(0.0, 0.05))  # the large put is streaming
        elif mode == "points":
            try:
                proc.wait(workload_s * 2)  # a crash point fires (or the fallback kill)
                return "crash point"
            except Exception:
                pass
        else:
            time.sleep(self.rng.uniform(0.05, workload_s))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        return "kill -9"

    def finish(self) -> tuple[list[str], int]:
        """A last start and check (the final cycle's kill is verified too), and a
        full integrity check of everything stored: no damage at rest."""
        address, _ = self._start(False)
        try:
            violations, present = self.verify(address)
            with Client(address, timeout_s=300) as c:
                check = c.integrity.check()
            violations += [f"fsck: {d.key}: {d.reason}" for d in check.damaged]
            return violations, present
        finally:
            self.stop()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


MODES = ("random", "mid-large-put", "points")
