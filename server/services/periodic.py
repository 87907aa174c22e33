"""A named daemon thread that runs one function every interval until stopped.

Each run's failure is logged with its traceback and the loop goes on: one bad
pass (say, a session that fails to close) must not stop the others."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, name: str, interval_s: float, fn: Callable[[], object]) -> None:
        self.name = name
        self.interval_s = interval_s
        self._fn = fn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._fn()
            except Exception:
                log.exception("periodic task %s failed", self.name)
