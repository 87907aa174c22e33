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

Besides plain objects, each worker appends scratchpad records (BUFFERED,
LOGGED, SYNC), puts KV blocks through ``put_blocks``, upserts and deletes
vectors and puts, copies and deletes blobs, each through the real client; what
each of those must read back after a restart is in ``tests/crash/kinds.py``.
Every kind is also read back while the daemon serves.

Kills land at a random moment, while a large put streams, or at an armed crash
point (``MODES``); a share of the restarts (``restart_kills``) is killed too,
part-way through the daemon's start, before the start that is checked.

The operations are a table (``OPS``): add a row to put new kinds of work under
the same checks. Restart-to-serving (process start until ``tiermem serve``
prints its address, which it does once recovery is done) must stay under
``RESTART_LIMIT_S``.
"""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.crash.expected import ABSENT, DELETE, KeyState, Version, classify, digest
from tests.crash.kinds import (
    BUFFERED_WINDOW_MS,
    NS,
    BlobModel,
    KvModel,
    ScratchModel,
    VectorModel,
    verify_blob_listing,
)
from tests.helpers import DaemonProcess
from tiermem.client import (
    Client,
    Durability,
    Kind,
    NotFoundError,
    Profile,
    RecordDurability,
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
[agent.scratch]
embedder = "hash"
flush_records = 64
flush_interval_s = 0.3
buffered_window_ms = {buffered_window_ms}
[vectors]
use_gpu = false
snapshot_ops = 16
idle_unload_s = 0.5
maintain_interval_s = 0.2
[blobs]
text_embedder = "off"
inline_upload_max_bytes = "256KiB"
block_bytes = "256KiB"
checkpoint_bytes = "512KiB"
cache_min_reads = 1
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


#: Process start to serving (``tiermem serve`` prints its address once recovery
#: is done and every service is up) must stay under this after every kill.
#: Typically 1.5-4 s on a loaded 2-core runner (Python imports dominate); the
#: bound is generous so that only a recovery that grows or hangs fails it.
RESTART_LIMIT_S = 30.0

#: Error codes that mean "the daemon is gone": the call stays in flight.
DEAD_CODES = ("UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED")


@dataclass
class Worker:
    """Operations of one client thread on its own keys, session, KV chains,
    vector collection and blobs."""

    index: int
    client: Client
    expected: dict[str, KeyState]
    keys: list[str]
    rng: random.Random
    large_started: threading.Event
    scratch: ScratchModel
    kv: KvModel
    vectors: VectorModel
    blobs: BlobModel
    acked: Counter[str] = field(default_factory=Counter)  # by operation
    errors: list[str] = field(default_factory=list)
    key: str | None = None  # the object key of the call in flight

    def clear_pending(self) -> None:
        """A call was refused: it changed nothing."""
        if self.key is not None:
            self.expected[self.key].pending = None
        for model in (self.scratch, self.kv, self.vectors, self.blobs):
            model.clear_pending()


Op = Callable[[Worker], int]  # returns how many writes it had acknowledged (0 or 1)


def _object_key(w: Worker, kind: Kind | None = None) -> str | None:
    """A random key of this worker; None when it is not of ``kind`` (the op is skipped)."""
    key = w.rng.choice(w.keys)
    if kind is not None and w.expected[key].kind != kind:
        return None
    w.key = key
    return key


def _put(size: tuple[int, int], kind: Kind, durability: Durability, tier: Tier | None = None
         ) -> Op:  # fmt: skip
    def op(w: Worker) -> int:
        key = _object_key(w, kind)
        if key is None:
            return 0
        state = w.expected[key]
        n = w.rng.randint(*size)
        data = w.rng.randbytes(n)
        version = Version(digest(data), n, durability == Durability.DURABLE)
        state.pending = version
        if n >= MiB:
            w.large_started.set()
        w.client.put(kind, key, data, profile=Profile(durability=durability, preferred_tier=tier))
        state.acked, state.pending = version, None
        return 1

    return op


def _delete(w: Worker) -> int:
    key = _object_key(w)
    assert key is not None
    state = w.expected[key]
    state.pending = DELETE
    w.client.delete(state.kind, key)  # type: ignore[arg-type]
    state.acked, state.pending = ABSENT, None
    return 1


def _get(w: Worker) -> int:
    key = _object_key(w)
    assert key is not None
    state = w.expected[key]
    try:
        data = w.client.get(state.kind, key)  # type: ignore[arg-type]
    except NotFoundError:
        if state.acked is not None and state.acked.durable:
            w.errors.append(f"{key}: acknowledged DURABLE object missing while serving")
        return 0
    if state.acked is None or digest(data) != state.acked.digest:
        w.errors.append(f"{key}: read bytes that are not its acknowledged version")
    return 0


def _read_back(model: str) -> Op:
    """Read back some of a kind's acknowledged writes while the daemon serves
    (no call of this worker is in flight then: all must be there, exact)."""

    def op(w: Worker) -> int:
        w.errors += getattr(w, model).check_serving(w.client, w.rng)
        return 0

    return op


def _scratch(durability: RecordDurability) -> Op:
    return lambda w: w.scratch.append(w.client, w.rng, durability)


def _blob_put(size: tuple[int, int]) -> Op:
    return lambda w: w.blobs.put(w.client, w.rng, size, w.large_started)


#: (name, weight, operation).
OPS: list[tuple[str, int, Op]] = [
    # plain objects (ObjectService); keys are typed by kind: a put skips keys of other kinds
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
    # the scratchpad (ScratchService): one session per worker
    ("scratch append LOGGED", 3, _scratch(RecordDurability.LOGGED)),
    ("scratch append SYNC", 2, _scratch(RecordDurability.SYNC)),
    ("scratch append BUFFERED", 2, _scratch(RecordDurability.BUFFERED)),
    ("scratch replay and check", 1, _read_back("scratch")),
    # KV blocks (KvService and the data plane): chains per worker
    ("kv put_blocks", 4, lambda w: w.kv.put(w.client, w.rng, w.large_started)),
    ("kv lookup_prefix, get_blocks and check", 2, _read_back("kv")),
    # vectors (VectorService): one collection per worker
    ("vector upsert", 3, lambda w: w.vectors.upsert(w.client, w.rng)),
    ("vector delete", 1, lambda w: w.vectors.delete(w.client, w.rng)),
    ("vector search and check", 1, _read_back("vectors")),
    # blobs (BlobService): inline in RocksDB, a payload file, a streamed upload
    ("blob put small", 2, _blob_put((100, 60 * KiB))),
    ("blob put medium", 2, _blob_put((80 * KiB, 240 * KiB))),
    ("blob put streamed upload", 1, _blob_put((300 * KiB, 3 * MiB))),
    ("blob put copy", 1, lambda w: w.blobs.copy(w.client, w.rng)),
    ("blob delete", 1, lambda w: w.blobs.delete(w.client, w.rng)),
    ("blob read and check", 1, _read_back("blobs")),
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
    verify_s: float = 0.0  # the check after the restart (loads vector collections too)
    acked_by_op: dict[str, int] = field(default_factory=dict)
    buffered_lost_max_age_s: float = 0.0  # oldest BUFFERED record lost, before the kill
    killed_starting: bool = False  # a start before this cycle's was killed before it served


class CrashHarness:
    def __init__(
        self,
        root: Path,
        *,
        workers: int = 4,
        keys_per_worker: int = 30,
        seed: int = 1,
        restart_kills: float = 0.25,
    ):
        """``restart_kills``: the share of cycles whose restart is killed first,
        while the daemon starts (recovery, flushes of recovered records, orphan
        clean-up, services opening), before the start that is checked."""
        self.root = root
        self.restart_kills = restart_kills
        self.last_start_s = 2.0
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
        self.scratch = [ScratchModel(w) for w in range(workers)]
        self.kv = [KvModel(w) for w in range(workers)]
        self.vectors = [VectorModel(w) for w in range(workers)]
        self.blobs = [BlobModel(w) for w in range(workers)]
        self.namespace_created = False
        self.cycle = 0
        self.proc: DaemonProcess | None = None
        self.killed_at = 0.0  # monotonic time of the last kill
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
                buffered_window_ms=BUFFERED_WINDOW_MS,
            )
        )
        return path

    def _start(self, armed: bool) -> tuple[str, float]:
        self.proc = DaemonProcess(self.data, config=self._config(armed))
        started = time.monotonic()
        address = self.proc.start(timeout_s=120)
        self.last_start_s = time.monotonic() - started
        return address, self.last_start_s

    def _kill_starting(self) -> bool:
        """Start the daemon and kill -9 it part-way through its start (most of
        a start is imports; the kill lands in its last 60 %, where recovery and
        the services' opening run). Whether it was killed before it served."""
        proc = DaemonProcess(self.data, config=self._config(False))
        serving = threading.Event()

        def start() -> None:
            try:
                proc.start(timeout_s=120)
                serving.set()
            except RuntimeError:
                pass  # killed before it printed its address

        starter = threading.Thread(target=start)
        starter.start()
        time.sleep(self.rng.uniform(0.4, 1.0) * self.last_start_s)
        while proc.proc is None:  # pragma: no cover - Popen is immediate
            time.sleep(0.01)
        proc.kill9()
        starter.join(60)
        return not serving.is_set()

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
        """Check every key, record, block, vector and blob against the record; adopt
        what is there as the new truth."""
        violations: list[str] = []
        present: set[str] = set()
        with Client(address, retries=5, timeout_s=60) as c:
            for key, state in self.expected.items():
                digests, absent_ok = state.acceptable()
                try:
                    data = c.get(state.kind, key)  # type: ignore[arg-type]
                except NotFoundError:
                    if not absent_ok:
                        violations.append(f"{key}: acknowledged DURABLE version lost")
                    state.adopt(None)
                    continue
                except TiermemClientError as exc:
                    violations.append(f"{key}: {exc.code}: {exc.message[:200]}")
                    continue
                got = digest(data)
                if got not in digests:
                    violations.append(f"{key}: {len(data)} bytes that match no version")
                    continue
                present.add(key)
                state.adopt(got, len(data))
            listed = {o.key for o in c.list()}
            if listed != present:
                violations.append(f"list disagrees with get: {sorted(listed ^ present)[:10]}")
            for w in range(self.workers):
                if self.scratch[w].opened:
                    violations += self.scratch[w].verify(c, self.killed_at)
                if self.vectors[w].created:
                    violations += self.vectors[w].verify(c)
                if self.namespace_created:
                    violations += self.kv[w].verify(c)
                    violations += self.blobs[w].verify(c)
            if self.namespace_created:
                violations += verify_blob_listing(c, self.blobs)
        return violations, len(present)

    def prepare(self, address: str) -> list[str]:
        """The namespace, sessions and collections the workload writes to (each
        made once; one found missing later was an acknowledged write lost)."""
        violations: list[str] = []
        with Client(address, retries=5, timeout_s=60) as c:
            if c.create_namespace(NS) and self.namespace_created:
                violations.append(f"namespace {NS}: acknowledged create lost")
            self.namespace_created = True
            for w in range(self.workers):
                violations += self.scratch[w].setup(c)
                violations += self.vectors[w].setup(c)
        return violations

    def run_cycle(self, mode: str, workload_s: float = 2.5) -> CycleResult:
        """Start (verify what the last cycle left), run the workload, kill -9."""
        self.cycle += 1
        armed = mode == "points"
        killed_starting = self.cycle > 1 and self.rng.random() < self.restart_kills
        if killed_starting:
            killed_starting = self._kill_starting()
        address, start_s = self._start(armed)
        recovery_s, recovered = self._recovery_line()
        checked = time.monotonic()
        violations, present = self.verify(address)
        verify_s = time.monotonic() - checked
        violations += self.prepare(address)
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
                self.scratch[i],
                self.kv[i],
                self.vectors[i],
                self.blobs[i],
            )
            for i in range(self.workers)
        ]
        weights = [w for _, w, _ in OPS]

        def run(w: Worker) -> None:
            while not stop.is_set():
                name, _weight, op = w.rng.choices(OPS, weights)[0]
                w.key = None
                try:
                    w.acked[name] += op(w)
                except TiermemClientError as exc:
                    if exc.code in DEAD_CODES or self._died():
                        return  # the daemon is gone: the op stays "in flight"
                    w.errors.append(f"{name}: {exc.code}: {exc.message[:200]}")
                    w.clear_pending()  # refused: nothing changed
                except Exception as exc:  # a broken connection the client left unmapped
                    if not self._died():
                        w.errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
                    return  # in flight either way

        threads = [threading.Thread(target=run, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        killed_by = self._kill(mode, large, workload_s)
        self.killed_at = time.monotonic()
        self.arm_file.unlink(missing_ok=True)
        stop.set()
        for t in threads:
            t.join(60)
        acked: Counter[str] = Counter()
        for w in workers:
            w.client.close()
            acked += w.acked
            violations += [f"while serving: {e}" for e in w.errors]
        return CycleResult(
            mode, start_s, recovery_s, recovered, sum(acked.values()),
            len(self.expected), present, violations, killed_by, verify_s, dict(acked),
            max(m.buffered_lost_max_age_s for m in self.scratch), killed_starting,
        )  # fmt: skip

    def _died(self, wait_s: float = 1.0) -> bool:
        """Whether the daemon is gone (or goes within ``wait_s``): an error then is the kill's."""
        assert self.proc is not None and self.proc.proc is not None
        try:
            self.proc.proc.wait(wait_s)
            return True
        except Exception:
            return False

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
__all__ = ["MODES", "OPS", "RESTART_LIMIT_S", "CrashHarness", "CycleResult", "classify"]
