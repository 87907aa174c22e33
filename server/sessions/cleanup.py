"""The owner-cleanup registry: what other services free when a session closes.

The object store's own objects are found through the catalog's ``by_session``
index; everything else a session can own (scratchpad records, vector
collections, blobs ...) lives in services the session service does not know.
Each registers a ``SessionCleanup`` here; closing a session calls every
``drop_session`` once (children before parents; again if that close failed and
is resumed) and ``session_usage`` feeds ``Describe`` and the per-tier quotas.

A plain callable ``drop(session) -> Freed | int | None`` can be registered too
(an int is counted as freed bytes on the tier named at registration), so a
service such as ``VectorService.drop_session`` plugs in as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tiermem.server.model import Tier


@dataclass(slots=True)
class Freed:
    """What a drop released: bytes per tier and how many items (records, collections)."""

    bytes_by_tier: dict[Tier, int] = field(default_factory=dict)
    items: int = 0

    def add(self, other: Freed) -> None:
        for tier, n in other.bytes_by_tier.items():
            self.bytes_by_tier[tier] = self.bytes_by_tier.get(tier, 0) + n
        self.items += other.items


@dataclass(slots=True)
class Usage:
    """What a session holds in one service: (bytes, items) per tier."""

    by_tier: dict[Tier, tuple[int, int]] = field(default_factory=dict)


class SessionCleanup(Protocol):
    name: str

    def drop_session(self, session: str) -> Freed:
        """Free everything ``session`` owns here, durably, and return what was freed.
        Called once per close of the session, never by two closes at once; a close
        that failed (this or another step raised) is resumed by a later one, which
        calls it again: free what is left. Must not call back into the session
        service."""
        ...

    def session_usage(self, session: str) -> Usage:
        """What ``session`` holds here now (cheap: called on puts with a quota)."""
        ...


class _CallableCleanup:
    def __init__(
        self,
        name: str,
        drop: Callable[[str], Freed | int | None],
        usage: Callable[[str], Usage] | None,
        tier: Tier,
    ) -> None:
        self.name = name
        self._drop = drop
        self._usage = usage
        self._tier = tier

    def drop_session(self, session: str) -> Freed:
        result = self._drop(session)
        if isinstance(result, Freed):
            return result
        if isinstance(result, int):
            return Freed({self._tier: result}, 0)
        return Freed()

    def session_usage(self, session: str) -> Usage:
        return self._usage(session) if self._usage is not None else Usage()


class CleanupRegistry:
    def __init__(self) -> None:
        self._hooks: dict[str, SessionCleanup] = {}
        self._lock = threading.Lock()

    def register(self, hook: SessionCleanup) -> None:
        with self._lock:
            if hook.name in self._hooks:
                raise ValueError(f"a session cleanup named {hook.name!r} is registered already")
            self._hooks[hook.name] = hook

    def register_callable(
        self,
        name: str,
        drop: Callable[[str], Freed | int | None],
        usage: Callable[[str], Usage] | None = None,
        tier: Tier = Tier.DRAM,
    ) -> None:
        """Register a bare ``drop(session)`` (and optional ``usage(session)``)."""
        self.register(_CallableCleanup(name, drop, usage, tier))

    def hooks(self) -> list[SessionCleanup]:
        with self._lock:
            return list(self._hooks.values())
