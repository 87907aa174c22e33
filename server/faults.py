"""Crash points for kill-9 testing (like RocksDB's ``TEST_KILL_RANDOM``).

Code that has a dangerous window (bytes written but not committed, a catalog
switched but the old copy not yet freed ...) calls ``faults.point(NAME)``. When
the daemon's config lists NAME under ``faults.kill_points``, reaching it SIGKILLs
the whole process with probability ``faults.kill_probability``: the same as
``kill -9`` from outside, but at a precise moment. Disabled (the default) it is
one set lookup.

Points (add new ones here, with the window they cover):
"""

from __future__ import annotations

import logging
import os
import random
import signal

from tiermem.server.config import FaultsConfig

log = logging.getLogger(__name__)

#: Every crash point, with the window it covers.
POINTS: dict[str, str] = {
    "put.after_ssd_write": "a put's bytes are in a segment or staged inline; no record yet",
    "put.after_commit": "a put's record is committed, the WAL not yet synced",
    "delete.after_commit": "a delete is committed, the WAL not yet synced",
    "move.after_copy": "a demotion/promotion copied the value; the catalog still names the old",
    "move.after_switch": "the catalog names the new copy; the old one is not freed yet",
    "compaction.after_append": "compaction appended a live value to the active segment",
    "compaction.after_switch": "compaction switched a record to the new copy",
    "compaction.before_retire": "compaction synced the catalog; the old segment still exists",
    "segment.mid_write": "a segment entry's header is written, its data not yet",
}
__doc__ += "\n".join(f"    ``{k}``: {v}" for k, v in POINTS.items())


class Faults:
    def __init__(self, config: FaultsConfig) -> None:
        unknown = set(config.kill_points) - set(POINTS)
        if unknown:
            raise ValueError(
                f"unknown faults.kill_points {sorted(unknown)}; known: {sorted(POINTS)}"
            )
        self._armed = frozenset(config.kill_points) if config.kill_probability > 0 else frozenset()
        self._probability = config.kill_probability
        self._arm_file = config.arm_file
        self._rng = random.Random(config.seed or None)
        if self._armed:
            log.warning("fault injection armed: %s (p=%s)", sorted(self._armed), self._probability)

    def point(self, name: str) -> None:
        """SIGKILL the process here if ``name`` is armed and the dice say so."""
        if name not in self._armed or self._rng.random() >= self._probability:
            return
        if not self._arm_file or os.path.exists(self._arm_file):
            os.kill(os.getpid(), signal.SIGKILL)


#: A ``Faults`` that never fires (engines built outside a daemon use it).
NO_FAULTS = Faults(FaultsConfig())
