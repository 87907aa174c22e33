"""A circuit breaker: stop calling a store that keeps failing, probe it later.

::

   CLOSED --(failures in a row >= threshold)--> OPEN --(open_s elapsed)--> HALF_OPEN
      ^                                           ^                          |
      +---------------(probe succeeded)-----------+----(probe failed)--------+

While OPEN every call is refused at once (no I/O, no waiting on a dead
store). After ``open_s`` one caller is let through as the probe; its outcome
closes the breaker or opens it for another ``open_s``. Thread-safe; the clock
is injected so tests step time by hand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import Enum


class State(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(
        self, failures: int, open_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failures < 1 or open_s <= 0:
            raise ValueError("a breaker needs failures >= 1 and open_s > 0")
        self.threshold = failures
        self.open_s = open_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = State.CLOSED
        self._failures = 0
        self._opened_at = 0.0

    @property
    def state(self) -> State:
        with self._lock:
            return self._state

    def available(self) -> bool:
        """Whether a call would be let through now (closed, or a probe is due)."""
        with self._lock:
            return self._state is State.CLOSED or (
                self._state is State.OPEN and self._clock() >= self._opened_at + self.open_s
            )

    def allow(self) -> bool:
        """Claim the right to call: True when closed, or for the one probe after
        the open period (the breaker is then half-open until it reports)."""
        with self._lock:
            if self._state is State.CLOSED:
                return True
            if self._state is State.OPEN and self._clock() >= self._opened_at + self.open_s:
                self._state = State.HALF_OPEN
                return True
            return False

    def success(self) -> bool:
        """Report a call that worked; True if this closed an open breaker."""
        with self._lock:
            recovered = self._state is not State.CLOSED
            self._state = State.CLOSED
            self._failures = 0
            return recovered

    def failure(self) -> bool:
        """Report a failed call; True if this opened the breaker (a trip)."""
        with self._lock:
            if self._state is State.HALF_OPEN:
                self._state = State.OPEN
                self._opened_at = self._clock()
                return False
            if self._state is State.OPEN:
                return False
            self._failures += 1
            if self._failures >= self.threshold:
                self._state = State.OPEN
                self._opened_at = self._clock()
                return True
            return False
