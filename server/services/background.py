"""Background work of the daemon, on one thread with bounded passes: TTL
expiry and segment compaction (tier rebalancing has its own thread,
``services/migrator.py``). Each pass catches and logs its own failure so one
bad object cannot stop the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from tiermem.server.config import BackgroundConfig
from tiermem.server.services.expiry import Expirer
from tiermem.server.services.mover import Mover

log = logging.getLogger(__name__)


class BackgroundWorker:
    def __init__(
        self,
        config: BackgroundConfig,
        mover: Mover,
        expirer: Expirer,
        wake: threading.Event,
        reapers: Sequence[tuple[str, Callable[[], object]]] = (),
    ) -> None:
        """``reapers``: extra (name, step) passes run with expiry (e.g. the data
        plane's expired leases and tickets)."""
        self._config = config
        self._reapers = tuple(reapers)
        self._mover = mover
        self._expirer = expirer
        self._wake = wake
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_compaction = time.monotonic()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tiermem-background", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def run_once(self, *, compact: bool = True) -> None:
        """One pass of everything (tests call this to avoid waiting on timers)."""
        metrics = self._mover.store.metrics
        for name, step in (
            *self._reapers,
            ("expiry", self._expirer.expire_due),
        ):
            try:
                step()
            except Exception:
                metrics.background_errors.labels(name).inc()
                log.exception("background %s pass failed", name)
        if compact:
            try:
                self._mover.compact()
            except Exception:
                metrics.background_errors.labels("compaction").inc()
                log.exception("background compaction pass failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._config.migrate_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            compact = now - self._last_compaction >= self._config.compaction_interval_s
            if compact:
                self._last_compaction = now
            self.run_once(compact=compact)
