"""The store lock: a reentrant lock whose holds are numbered, so that a reader
can tell, without taking it, that nobody held it while it looked.

Every catalog and tier change happens under the store lock. ``version`` is
odd while some thread holds the lock and grows by one at each outermost
acquire and release, so a reader that saw the same even ``version`` before
and after reading the catalog read a state nobody changed meanwhile (the read
side of a seqlock). Reads of objects in memory use this (``ObjectService``):
they find and lease their objects without waiting for the lock, and fall back
to taking it when a writer was there. Waiting for the lock was most of a slow
small get's time under load: a holder that loses the interpreter keeps every
waiter waiting, however short its hold.

Such readers still count their reads, but through a queue (``Catalog.touch_later``)
that ``on_acquire`` empties whenever the lock is taken, so every holder sees
every finished read counted, as when readers counted under the lock.

The lock itself is CPython's ``RLock``; only its owner changes ``version`` and
the depth, so neither needs more synchronisation than the lock gives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger(__name__)


class StoreLock:
    __slots__ = ("_depth", "_lock", "on_acquire", "version")

    def __init__(self, on_acquire: Callable[[], None] | None = None) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        #: Odd while held; changed by every outermost acquire and release.
        self.version = 0
        #: Run by every outermost acquire, once the lock is held.
        self.on_acquire = on_acquire

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._depth += 1
        if self._depth == 1:
            self.version += 1
            if self.on_acquire is not None:
                try:
                    self.on_acquire()
                except Exception:  # the holder's own work must still run
                    log.exception("work run as the store lock was taken failed")
                except BaseException:  # (an interrupt) never leave it held
                    self.release()
                    raise
        return True

    def release(self) -> None:
        if not self._lock._is_owned():  # type: ignore[attr-defined]
            # before touching the count: a stray release must not break its parity
            raise RuntimeError("cannot release a store lock this thread does not hold")
        self._depth -= 1
        if self._depth == 0:
            self.version += 1
        self._lock.release()

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def free_version(self) -> int | None:
        """``version`` if nobody holds the lock now, else None: pass it to
        ``unchanged`` after reading without the lock."""
        version = self.version
        return None if version & 1 else version

    def wait_free(self, timeout_s: float, poll_s: float = 100e-6) -> int | None:
        """``free_version`` once nobody holds the lock, polled every ``poll_s``
        (sleeping, so the holder has the interpreter) for at most
        ``timeout_s``; None if it stayed held. A reader waiting this way does
        not queue for the lock behind writers that are waiting for it too."""
        version = self.version
        if not version & 1:
            return version
        if self._lock._is_owned():  # type: ignore[attr-defined]
            return None  # held by this very thread: it cannot become free meanwhile
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(poll_s)
            version = self.version
            if not version & 1:
                return version
            if time.monotonic() >= deadline:
                return None

    def unchanged(self, version: int) -> bool:
        """Whether nobody took the lock since ``free_version`` returned ``version``."""
        return self.version == version
