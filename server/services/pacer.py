"""Spreading background byte work over time at a configured rate.

Segment compaction copies tens of megabytes in one pass; back to back, a pass
that finds many segments keeps a core and the disk busy for seconds while
requests need them. Pacing it to a byte rate, as RocksDB's rate limiter paces
its flushes and compactions, bounds that share. (On the 2-core soak it made no
measurable difference: there a segment takes 0.2-0.5 s, and the tail came from
the scratchpad's embedder; see docs/benchmarks.md.) Pacing gives way when
falling behind would cost more: ``unpaced()`` says so (the SSD tier is nearly
full and needs the space back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class BytePacer:
    """``spend(n)`` returns once ``n`` more bytes fit under ``rate_bytes_per_s``,
    waiting on ``stop`` so a stopping daemon is not held; ``on_wait(seconds)``
    hears of each wait before it starts (a metric).

    Time the work itself takes counts toward the rate, but at most ``burst_s``
    of credit is carried: a pass after a quiet minute is paced like any other,
    after copying at most ``burst_s * rate_bytes_per_s`` bytes at once.
    ``rate_bytes_per_s`` 0 never waits."""

    def __init__(
        self,
        rate_bytes_per_s: int,
        *,
        stop: threading.Event,
        unpaced: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
        burst_s: float = 0.1,
        on_wait: Callable[[float], object] = lambda seconds: None,
    ) -> None:
        """``clock`` and ``sleep`` (default: waiting on ``stop``) are for tests."""
        if rate_bytes_per_s < 0:
            raise ValueError(f"rate_bytes_per_s must be >= 0, got {rate_bytes_per_s}")
        self.rate_bytes_per_s = rate_bytes_per_s
        self._stop = stop
        self._unpaced = unpaced
        self._clock = clock
        self.burst_s = burst_s
        self._sleep = sleep if sleep is not None else stop.wait
        self._on_wait = on_wait
        self._due = 0.0  # when the bytes spent so far are paid for
        self.waited_s = 0.0  # total time spent waiting (for the logs and tests)

    @property
    def stopped(self) -> bool:
        """The work should end early (the daemon is stopping)."""
        return self._stop.is_set()

    def spend(self, nbytes: int) -> None:
        if self.rate_bytes_per_s == 0 or self._stop.is_set():
            return
        now = self._clock()
        if self._unpaced():
            return  # owes nothing for these bytes once pacing resumes
        self._due = max(self._due, now - self.burst_s) + nbytes / self.rate_bytes_per_s
        delay = self._due - now
        if delay > 0:
            self.waited_s += delay
            self._on_wait(delay)
            self._sleep(delay)
