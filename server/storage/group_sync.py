"""Group commit for one file's (or one WAL's) sync: concurrent callers share syncs.

A caller of ``GroupSync.sync(fn)`` needs the data it wrote before the call on
stable storage, i.e. one run of ``fn`` (an ``fdatasync``, RocksDB's
``flush_wal(True)``) that *started after it arrived*. Up to ``concurrency``
runs go at once (the file system or RocksDB queues the second behind the
first with no hand-off through Python); callers that arrive while that many
run wait, and every waiter then shares the next run that starts after it.
Without it, concurrent syncs of one file ran one after another, each syncing
again (RocksDB serializes concurrent ``flush_wal`` calls; so does the kernel
for ``fdatasync`` on one file).

One run at a time by default. A waiter learns that its run ended only when it
gets the interpreter lock back, so with few syncing threads and busy others
the disk idles between runs; ``concurrency=2`` lets a second caller queue
its own run at once. Measured on the 2-core machine on 2026-12-02:

* ``bench/catalog_sync.py``, synced RocksDB writes per second against one
  ``flush_wal`` per write in the same rounds: 16 writer threads 3.4-3.9x with
  1 at once, 3.0-3.6x with 2 (p99 of a write 28-48 ms -> 4-6 ms); 4 writers
  beside a busy Python thread 0.55x with 1, 0.77x with 2 (p99 about the same).
* ``bench/soak.py`` (64 clients, 400 ops/s, 60 s), 4 interleaved rounds: the
  small-get p99 was 21.7/36.6/106/28.3 ms before, 18.3/18.1/57.4/17.7 with 1
  at once, 30.8/16.0/21.5/33.7 with 2; capacity (saturated ops/s) 496-557,
  500-645, 593-655. With 1 at once in 5 more pairs: 16.3/24.9/15.2/16.3/23.9
  against 28.2/22.8/32.2/23.3/16.7 ms before. The daemon's mix is the case
  that counts, so 1 it is.

A failed sync tells no one it succeeded, and nobody it might have covered:
its caller raises, and so does every caller that was waiting, or syncing
itself, while it failed. Retrying for them would not be safe: after a failed
``fdatasync`` Linux may mark the pages it could not write clean and report
the error once, so a sync of their own could succeed without their bytes on
disk. A caller that arrives after the failure runs a new sync.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable


class GroupSync:
    """Coalesces concurrent syncs of one file (see the module docstring)."""

    def __init__(self, concurrency: int = 1) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._concurrency = concurrency
        self._started = 0  # syncs begun so far (the generation of the latest)
        self._best = 0  # highest generation of a sync that succeeded
        self._running = 0
        self._failures = 0  # runs that failed so far

    @property
    def runs(self) -> int:
        """Syncs actually run (the rest were covered by another caller's)."""
        return self._started

    def sync(self, fn: Callable[[], None]) -> None:
        """Return once a run of ``fn`` that started after this call succeeded
        (running it here if no other caller is about to). Raises ``fn``'s error
        if this caller's run fails, and ``SyncFailed`` if another run failed
        while this caller waited or synced."""
        leader = False
        ok = False
        try:
            with self._cond:
                arrived = self._started  # any sync begun so far began before us
                failures = self._failures
                while self._best <= arrived and self._failures == failures:
                    if self._running < self._concurrency:
                        self._started += 1
                        generation = self._started
                        self._running += 1
                        leader = True
                        break
                    self._cond.wait()
                if not leader:
                    self._check(failures)
                    return  # covered by a sync that began after we arrived
            fn()
            ok = True
        finally:
            if leader:
                with self._cond:
                    self._running -= 1
                    if ok:
                        self._best = max(self._best, generation)
                    else:
                        self._failures += 1
                    self._cond.notify_all()
        with self._cond:
            self._check(failures)

    def _check(self, failures: int) -> None:
        """Raise SyncFailed if a run failed since the caller saw ``failures``."""
        if self._failures != failures:
            raise SyncFailed(
                errno.EIO,
                "a sync of this file failed while this write waited to be synced; "
                "it may not be on stable storage",
            )


class SyncFailed(OSError):
    """Another caller's sync of the same file failed while this caller's write
    waited for one (see ``GroupSync``)."""
