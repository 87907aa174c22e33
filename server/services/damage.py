"""The damage register: objects whose stored bytes are known to be damaged.

Filled at start-up (records naming a missing segment file, or a range past the
end of a truncated one), on reads that fail verification, and by ``fsck``.
Damaged objects stay in the catalog so every read of them answers DATA_LOSS
(never bytes) and ``tiermem fsck`` can list them; deleting or overwriting the
object clears its entry.

Damage to stored things that are not catalog objects goes here too, under a
name (``add_named``): a vector collection whose snapshot fails its digests
(``namespace/VECTOR/collection``, cleared when the collection is dropped or
snapshotted again) and a scratchpad log file with a damaged frame
(``<scratch log NAME>``, kept aside in the log folder; cleared by a
whole-daemon online fsck once an operator deleted the file). Online fsck registers
a collection with ``add_named_if_current``, which re-reads its record under
the register's lock; a drop or rewrite clears the name only after removing or
switching that record, so a snapshot replaced while fsck checked it is never
left listed. A drop clears it under the vector registry's lock, in the same
step as removing the record, so it never clears the damage of a new
collection of the same name (created only after that step).

Exported as ``tiermem_damaged_objects``; each newly found damage is logged
once and counted in ``tiermem_checksum_failures_total`` (``where``: "ssd",
"vectors", "scratch_log", ...).

Bounded: at most ``MAX_ENTRIES`` objects are remembered (the gauge keeps counting).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tiermem.server.metrics import Metrics
from tiermem.server.model import ObjectKey

log = logging.getLogger(__name__)

MAX_ENTRIES = 100_000


#: Damage locations as the checksum-failure metric names them (bounded label).
_METRIC_WHERE = {"inline": "ssd", "segment": "ssd"}

#: Register keys of named (non-object) damage start with this byte, which no
#: encoded object key does (it starts with a namespace, valid UTF-8).
_NAMED = b"\xff"


@dataclass(frozen=True, slots=True)
class Damage:
    key: str  # "namespace/KIND/key"
    reason: str
    where: str  # "segment", "inline", "catalog"


class DamageLog:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._entries: dict[bytes, Damage] = {}
        self._overflow = 0

    def add(self, encoded_key: bytes, where: str, reason: str) -> bool:
        """Record damage; True (and logged, counted) if it was not known yet."""
        return self._add(encoded_key, _name(encoded_key), where, reason) is True

    def add_named(self, name: str, where: str, reason: str) -> bool:
        """Record damage to something that is not a catalog object (``where``:
        "vectors", "scratch_log"); True (logged, counted) if not known yet."""
        return self._add(_NAMED + name.encode(), name, where, reason) is True

    def add_named_if_current(
        self, name: str, where: str, reason: str, current: Callable[[], bool]
    ) -> bool:
        """``add_named``, only if ``current()`` (called under the register's lock)
        says the damaged thing is still the one ``name`` stands for; True if so
        (registered now or already). For checks that verify without a lock (online
        fsck): whatever replaces the thing must switch it first and then
        ``discard_named``, so either ``current()`` sees the replacement or the
        discard comes after this registration and clears it."""
        return self._add(_NAMED + name.encode(), name, where, reason, current) is not None

    def discard_named(self, name: str) -> None:
        """The named thing was dropped or replaced by a good copy."""
        self.discard(_NAMED + name.encode())

    def has_named(self, name: str) -> bool:
        return _NAMED + name.encode() in self

    def _add(
        self,
        register_key: bytes,
        name: str,
        where: str,
        reason: str,
        current: Callable[[], bool] | None = None,
    ) -> bool | None:
        """True if newly registered (logged, counted), False if known already,
        None if ``current()`` said no (nothing registered)."""
        with self._lock:
            if current is not None and not current():
                return None
            if register_key in self._entries:
                return False
            if len(self._entries) >= MAX_ENTRIES:
                self._overflow += 1
            else:
                self._entries[register_key] = Damage(name, reason, where)
            # set under the lock: a concurrent discard's (lower) count cannot
            # land after this one and leave the gauge behind the register
            self._metrics.damaged_objects.set(len(self._entries) + self._overflow)
        self._metrics.checksum_failures.labels(_METRIC_WHERE.get(where, where)).inc()
        log.error("data damaged, not served: %s", reason)
        return True

    def discard(self, encoded_key: bytes) -> None:
        """The object was deleted or overwritten: its damage is gone with it."""
        with self._lock:
            if self._entries.pop(encoded_key, None) is None:
                return
            self._metrics.damaged_objects.set(len(self._entries) + self._overflow)

    def __contains__(self, encoded_key: bytes) -> bool:
        with self._lock:
            return encoded_key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries) + self._overflow

    def entries(self) -> list[Damage]:
        with self._lock:
            return sorted(self._entries.values(), key=lambda d: d.key)


def _name(encoded_key: bytes) -> str:
    try:
        return str(ObjectKey.decode(encoded_key))
    except (ValueError, IndexError, UnicodeDecodeError):
        return encoded_key.hex()
