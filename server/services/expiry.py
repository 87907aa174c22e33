"""TTL expiry: delete objects whose ``profile.ttl_s`` has passed.

The "expiry" column family is ordered by expiry time, so each pass reads only
the entries that are due. A read of an expired object the reaper has not
reached yet still succeeds: the TTL is a lower bound on lifetime, exact to
``background.migrate_interval_s``.
"""

from __future__ import annotations

import time

from tiermem.server.catalog.catalog import expiry_index_key
from tiermem.server.services.store import Store

MAX_PER_PASS = 10_000


class Expirer:
    def __init__(self, store: Store) -> None:
        self.store = store

    def expire_due(self, now_ms: int | None = None) -> int:
        """Delete objects due by ``now_ms``; returns how many were deleted."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        catalog = self.store.catalog
        deleted = 0
        for expires_ms, encoded in catalog.expired_keys(now_ms, MAX_PER_PASS):
            with self.store.lock:
                entry = catalog.find(encoded)
                if entry is None or entry.expires_ms != expires_ms:
                    # A leftover entry: the object was deleted or rewritten with another TTL.
                    batch = catalog.rocks.batch()
                    batch.delete("expiry", expiry_index_key(expires_ms, encoded))
                    batch.commit(sync=False)
                    continue
                self.store.remove_locked(encoded, entry)
            self.store.metrics.expirations.labels(entry.kind.name).inc()
            deleted += 1
        return deleted
