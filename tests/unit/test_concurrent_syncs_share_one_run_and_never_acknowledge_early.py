"""Group commit (``GroupSync``): callers that sync one file at once share runs
of the sync, and no caller returns before a run that *started after it
arrived* has succeeded (an earlier one may not hold its write). A failed run
acknowledges nobody. Used by the catalog's WAL and the SSD segments."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from tiermem.server.storage.group_sync import GroupSync, SyncFailed
from tiermem.server.storage.rocks import RocksStore
from tiermem.server.tiers.segments import SegmentStore


class Clock:
    """A logical clock: every event gets a larger number than the ones before."""

    def __init__(self) -> None:
        self._ticks = itertools.count()
        self._lock = threading.Lock()

    def tick(self) -> int:
        with self._lock:
            return next(self._ticks)


class RecordedSync:
    """A sync that takes ``seconds`` and records when each run started and
    ended; the runs listed in ``fail`` (0-based) raise instead."""

    def __init__(self, clock: Clock, seconds: float, fail: frozenset[int] = frozenset()) -> None:
        self.clock = clock
        self.seconds = seconds
        self.fail = set(fail)
        self.runs: list[tuple[int, int, bool]] = []  # (start, end, succeeded)
        self._lock = threading.Lock()

    def __call__(self) -> None:
        start = self.clock.tick()
        with self._lock:
            n = len(self.runs)
            self.runs.append((start, -1, False))
        time.sleep(self.seconds)
        ok = n not in self.fail
        with self._lock:
            self.runs[n] = (start, self.clock.tick(), ok)
        if not ok:
            raise OSError(f"sync {n} failed")


def callers(
    group: GroupSync, fn: RecordedSync, clock: Clock, n: int
) -> list[tuple[int, int, bool]]:
    """``n`` threads call ``group.sync(fn)`` at once; (arrived, returned, raised) each."""
    out: list[tuple[int, int, bool]] = []
    lock = threading.Lock()
    start = threading.Barrier(n)

    def call() -> None:
        start.wait()
        arrived = clock.tick()
        raised = False
        try:
            group.sync(fn)
        except OSError:
            raised = True
        with lock:
            out.append((arrived, clock.tick(), raised))

    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(out) == n
    return out


def covered(arrived: int, returned: int, runs: list[tuple[int, int, bool]]) -> bool:
    """Whether a run that started after ``arrived`` succeeded before ``returned``."""
    return any(ok and arrived < start and end < returned for start, end, ok in runs)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_callers_at_once_share_runs_and_each_is_covered_by_a_later_run(
    concurrency: int,
) -> None:
    clock = Clock()
    fn = RecordedSync(clock, seconds=0.02)
    group = GroupSync(concurrency)
    calls = callers(group, fn, clock, 16)
    assert group.runs == len(fn.runs)
    # the first `concurrency` callers run at once, everyone after them shares
    # the next runs (a slow thread start may add one or two)
    assert len(fn.runs) <= 3 * concurrency + 2, fn.runs
    for arrived, returned, raised in calls:
        assert not raised
        assert covered(arrived, returned, fn.runs), (arrived, returned, fn.runs)


def test_up_to_concurrency_callers_run_at_once_without_waiting() -> None:
    """Two callers of a concurrency-2 group each run the sync, overlapping (a
    file system queues the second behind the first without a hand-off through
    Python); a third waits and shares."""
    clock = Clock()
    fn = RecordedSync(clock, seconds=0.2)
    group = GroupSync(2)
    threads = [threading.Thread(target=group.sync, args=(fn,)) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while len(fn.runs) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(fn.runs) == 2 and all(end == -1 for _, end, _ in fn.runs)  # both running
    arrived = clock.tick()
    group.sync(fn)  # waits for a run that starts after it: the third
    assert covered(arrived, clock.tick(), fn.runs)
    for t in threads:
        t.join()
    assert len(fn.runs) == 3


def test_one_caller_alone_runs_the_sync_every_time() -> None:
    clock = Clock()
    fn = RecordedSync(clock, seconds=0.0)
    group = GroupSync()
    for _ in range(5):
        arrived = clock.tick()
        group.sync(fn)
        assert covered(arrived, clock.tick(), fn.runs)
    assert len(fn.runs) == 5


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_failed_run_acknowledges_no_one_who_waited_during_it(concurrency: int) -> None:
    """Everyone waiting (or syncing) while a run failed is told so: after a
    failed fdatasync the kernel may have marked their pages clean, so a run of
    their own could succeed without their bytes."""
    clock = Clock()
    fn = RecordedSync(clock, seconds=0.05, fail=frozenset({0}))
    group = GroupSync(concurrency)
    calls = callers(group, fn, clock, 8)
    assert fn.runs[0][2] is False
    failed_end = fn.runs[0][1]
    for arrived, returned, raised in calls:
        if arrived < failed_end < returned:  # still there when the run failed
            assert raised, (arrived, returned, fn.runs)
        elif not raised:  # done before the failure, or came after it
            assert covered(arrived, returned, fn.runs), (arrived, returned, fn.runs)
    assert sum(raised for _, _, raised in calls) >= 2  # the failed run's caller and a waiter
    arrived = clock.tick()
    group.sync(fn)  # one who comes after the failure syncs anew
    assert covered(arrived, clock.tick(), fn.runs)


def test_a_waiter_is_told_of_a_failure_as_the_error_it_expects() -> None:
    """A waiter gets ``SyncFailed`` (an OSError), not the leader's exception."""
    clock = Clock()
    fn = RecordedSync(clock, seconds=0.1, fail=frozenset({0}))
    group = GroupSync(1)
    errors: list[BaseException] = []

    def lead() -> None:
        try:
            group.sync(fn)
        except OSError as exc:
            errors.append(exc)

    leader = threading.Thread(target=lead)
    leader.start()
    while not fn.runs:
        time.sleep(0.001)
    with pytest.raises(SyncFailed, match="failed while this write waited"):
        group.sync(fn)
    leader.join()
    assert len(fn.runs) == 1
    assert [str(e) for e in errors] == ["sync 0 failed"]  # the leader gets fn's own error


def test_a_failed_run_lets_the_next_caller_sync() -> None:
    clock = Clock()
    fn = RecordedSync(clock, seconds=0.0, fail=frozenset({0}))
    group = GroupSync()
    with pytest.raises(OSError, match="sync 0 failed"):
        group.sync(fn)
    arrived = clock.tick()
    group.sync(fn)
    assert covered(arrived, clock.tick(), fn.runs)


def test_concurrent_catalog_syncs_share_wal_flushes_and_keep_every_write(
    tmp_path: Path,
) -> None:
    store = RocksStore(tmp_path / "catalog")
    try:
        n = 16
        start = threading.Barrier(n)

        def writer(w: int) -> None:
            start.wait()
            for i in range(20):
                batch = store.batch()
                batch.put("meta", f"{w}/{i}".encode(), b"v")
                batch.commit(sync=True)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(
            store.get("meta", f"{w}/{i}".encode()) == b"v" for w in range(n) for i in range(20)
        )
        assert 0 < store._group_sync.runs < n * 20  # shared, not one per write
    finally:
        store.close()


def test_durable_segment_appends_from_many_threads_share_fdatasyncs(tmp_path: Path) -> None:
    segments = SegmentStore(tmp_path / "ssd", segment_bytes=64 << 20)
    try:
        n = 8
        start = threading.Barrier(n)
        placed: list[tuple[int, int, bytes]] = []
        lock = threading.Lock()

        def writer(w: int) -> None:
            start.wait()
            for i in range(10):
                value = f"{w}/{i}".encode() * 100
                seg, off = segments.append(f"k{w}/{i}".encode(), memoryview(value), 0, sync=True)
                with lock:
                    placed.append((seg, off, value))

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(placed) == n * 10
        for seg, off, value in placed:
            out = bytearray(len(value))
            segments.read_into(seg, off, memoryview(out))
            assert out == value
        # (threads that start at once may each open a segment of their own)
        used = {s for s, _, _ in placed}
        runs = sum(segments._segments[s].group_sync.runs for s in used)
        assert 0 < runs < n * 10
    finally:
        segments.close()
