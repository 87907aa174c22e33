"""Background work of the daemon: TTL expiry (and the reapers passed in) on one
thread, segment compaction on another (tier rebalancing has its own thread,
``services/migrator.py``). Compaction is paced to a byte rate
(``tiers.ssd.compaction_rate_bytes_per_s``), so it may run for seconds; on its
own thread it never delays an expiry pass. Each pass catches and logs its own
failure so one bad object cannot stop the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from tiermem.server.config import BackgroundConfig
from tiermem.server.services.expiry import Expirer
from tiermem.server.services.mover import Mover
from tiermem.server.services.pacer import BytePacer

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
        self._threads: list[threading.Thread] = []
        ssd = mover.store.config.tiers.ssd
        self._pacer = BytePacer(
            int(ssd.compaction_rate_bytes_per_s),
            stop=self._stop,
            unpaced=self._ssd_needs_space,
            on_wait=mover.store.metrics.compaction_paced_seconds.inc,
        )

    def _ssd_needs_space(self) -> bool:
        ssd = self._mover.store.ssd
        limit = self._mover.store.config.tiers.ssd.compaction_unpaced_above
        return ssd.used_bytes >= limit * ssd.capacity_bytes

    def start(self) -> None:
        for name, loop in (
            ("tiermem-background", self._run),
            ("tiermem-compaction", self._run_compaction),
        ):
            thread = threading.Thread(target=loop, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stops both loops; a paced compaction stops waiting at once and ends after
        the value it is copying (the segment is kept, the next start finishes it)."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)

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
            self.compact()

    def compact(self, pacer: BytePacer | None = None) -> None:
        """One compaction pass (paced by ``pacer`` if given), its failure logged."""
        try:
            self._mover.compact(pacer=pacer)
        except Exception:
            self._mover.store.metrics.background_errors.labels("compaction").inc()
            log.exception("background compaction pass failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._config.migrate_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.run_once(compact=False)

    def _run_compaction(self) -> None:
        while not self._stop.wait(self._config.compaction_interval_s):
            self.compact(self._pacer)
