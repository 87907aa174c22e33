"""The test's record of acknowledged writes: one ``KeyState`` per key it writes
(an object, a KV block, a vector id, a blob), shared by the crash workload's kinds.

A key belongs to one worker, so it has at most one operation in flight. After a
restart it must read back as its acknowledged version, the version in flight at
the kill, or absent where the rules in ``KeyState.acceptable`` allow it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Version:
    digest: bytes  # blake2b-128 of the value
    size: int
    durable: bool


ABSENT = None
DELETE = "delete"


@dataclass
class KeyState:
    kind: object  # what the key names (an object Kind, or a label of the workload's kind)
    acked: Version | None = ABSENT
    pending: Version | str | None = None  # a Version (put), DELETE, or None

    def acceptable(self) -> tuple[set[bytes], bool]:
        """(acceptable digests, whether absent is acceptable)."""
        digests = set()
        # Absent is fine if nothing durable was acknowledged, a delete was in flight,
        # or a CACHE overwrite was in flight: it may have replaced the durable
        # version and then been lost itself (CACHE objects may be).
        absent_ok = (
            self.acked is None
            or not self.acked.durable
            or self.pending == DELETE
            or (isinstance(self.pending, Version) and not self.pending.durable)
        )
        if self.acked is not None:
            digests.add(self.acked.digest)
        if isinstance(self.pending, Version):
            digests.add(self.pending.digest)
        return digests, absent_ok

    def adopt(self, got: bytes | None, size: int = 0) -> None:
        """After a check: what was found (its digest, or None) is the new truth."""
        if got is None:
            self.acked, self.pending = ABSENT, None
            return
        pending = self.pending if isinstance(self.pending, Version) else None
        durable = any(
            v is not None and v.digest == got and v.durable for v in (self.acked, pending)
        )
        self.acked, self.pending = Version(got, size, bool(durable)), None


def digest(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


#: Words every violation message uses, so reports can count them by class.
LOST = "acknowledged DURABLE version lost"
NO_VERSION = "match no version"


def classify(violation: str) -> str:
    """'lost' (an acknowledged durable write is gone), 'corrupt' (bytes that match
    no version, or DATA_LOSS) or 'other'."""
    if LOST in violation or ("acknowledged" in violation and " lost" in violation):
        return "lost"
    if NO_VERSION in violation or "DATA_LOSS" in violation or "never appended" in violation:
        return "corrupt"
    return "other"
