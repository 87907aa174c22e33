"""Session domain types (transport-free)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from tiermem.server.errors import InvalidArgument
from tiermem.server.model import (
    Kind,
    Tier,
    validate_namespace,
    validate_session,
    validate_ttl,
)

MAX_LABEL_BYTES = 256


class SessionState(IntEnum):
    OPEN = 1
    CLOSING = 2


class CloseReason(IntEnum):
    CLIENT = 1
    EXPIRED = 2
    ABANDONED = 3
    PARENT_CLOSED = 4


@dataclass(frozen=True, slots=True)
class Grant:
    """Read-only access to ancestor-owned objects of ``kind`` under ``key_prefix``."""

    namespace: str
    kind: Kind
    key_prefix: str

    def covers(self, namespace: str, kind: Kind, key: str) -> bool:
        return namespace == self.namespace and kind == self.kind and key.startswith(self.key_prefix)

    @classmethod
    def checked(cls, namespace: str, kind: int, key_prefix: str) -> Grant:
        validate_namespace(namespace)
        if kind not in Kind._value2member_map_:
            raise InvalidArgument(f"grant: unknown kind {kind}")
        if "\x00" in key_prefix or len(key_prefix.encode()) > 1024:
            raise InvalidArgument("grant: key_prefix must be at most 1024 bytes without NUL")
        return cls(namespace, Kind(kind), key_prefix)


@dataclass(slots=True)
class OpenSpec:
    parent: str = ""
    label: str = ""
    quotas: dict[Tier, int] = field(default_factory=dict)
    ttl_s: int = 0
    lease_s: int = 0
    grants: list[Grant] = field(default_factory=list)
    namespace: str = "default"
    id: str = ""

    def validate(self) -> None:
        validate_session(self.id)
        validate_session(self.parent)
        validate_namespace(self.namespace)
        validate_ttl(self.ttl_s, "ttl_s")
        validate_ttl(self.lease_s, "lease_s")
        if len(self.label.encode()) > MAX_LABEL_BYTES:
            raise InvalidArgument(f"label is longer than {MAX_LABEL_BYTES} bytes")
        for tier, limit in self.quotas.items():
            if tier not in (Tier.HBM, Tier.DRAM, Tier.SSD):
                raise InvalidArgument(f"quota for tier {tier.name}: only HBM, DRAM and SSD")
            if limit < 0:
                raise InvalidArgument("quota bytes must not be negative")
        if self.grants and not self.parent:
            raise InvalidArgument("grants name a parent's objects: only a child session has them")


@dataclass(slots=True)
class Session:
    id: str
    parent: str
    label: str
    namespace: str
    state: SessionState
    quotas: dict[Tier, int]
    created_ms: int
    expires_ms: int
    lease_s: int
    grants: list[Grant]
    heartbeat_ms: int = 0
    ledger_bytes: int = 0
    ledger_tokens: int = 0
    children_closed: int = 0
    close_reason: CloseReason | None = None
    children: set[str] = field(default_factory=set)
    #: In memory only, set by the close of this session once it has handed the
    #: parent its result record (the record id, 0 for none) and taken a ledger
    #: slot (seq, serialized entry): a close that failed after that and is
    #: resumed reuses them, so the parent gets one record and one entry per close.
    result_record_id: int | None = None
    ledger_slot: tuple[int, bytes] | None = None


@dataclass(slots=True)
class LedgerEntry:
    child: str
    label: str
    bytes: int
    tokens: int
    reason: CloseReason
    closed_ms: int


@dataclass(slots=True)
class SessionView:
    """A session as described to clients: its record plus live usage."""

    session: Session
    usage: dict[Tier, tuple[int, int]]  # bytes, items
    depth: int = 0


@dataclass(slots=True)
class CloseReport:
    freed: dict[Tier, int] = field(default_factory=dict)
    sessions_closed: int = 0
    objects_freed: int = 0
    records_freed: int = 0
    result_record_id: int = 0
