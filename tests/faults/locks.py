"""Lock stand-ins for fault tests that force an interleaving."""

from __future__ import annotations

import threading


class OwnedLock:
    """A lock that knows which thread holds it (stands in for a service's lock,
    so a hook can tell whether the thread it runs on holds it: a hook that would
    wait for another thread needing that lock must not wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking, timeout):
            self._owner = threading.get_ident()
            return True
        return False

    def release(self) -> None:
        self._owner = None
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def held_here(self) -> bool:
        return self._owner == threading.get_ident()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
