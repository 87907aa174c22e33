"""The one service-layer helper for access control and limits.

Every service method that touches a namespace calls ``guard.admit(namespace,
role, ...)`` (or ``guard.authorize`` for a check without limits) before doing
anything. The gRPC layer (``api.access``) authenticates the caller and sets the
current ``Principal`` and request deadline in context variables; this module
reads them, so services stay transport-free and any new service gets the same
rules by calling the same method:

* **authorization**: the principal must hold ``role`` on the namespace, else
  PermissionDenied. Without configured tokens everyone is ``ANONYMOUS``, which
  may do everything; code running outside an RPC (background work, tests of the
  services) runs as ``INTERNAL``.
* **namespace quotas**: bytes and objects a namespace may hold
  (``limits.namespace[s]``), checked against the catalog's per-namespace usage
  plus puts still in progress.
* **concurrency**: RPCs of one namespace executing at once, and the bytes of
  its puts in progress, so one tenant cannot occupy every RPC thread or the
  whole in-flight budget.
* **in-flight bytes**: a process-wide budget for bytes held by requests in
  progress (put buffers, SSD read buffers): RESOURCE_EXHAUSTED instead of an
  out-of-memory kill.
* **put hooks**: other services (sessions) add checks of their own, e.g. a
  session quota, with ``add_put_hook``.
* **deadlines**: long loops call ``check_deadline()``.

Exceeding any limit raises CapacityExceeded (RESOURCE_EXHAUSTED) with a message
naming the limit and its config key, counted in ``tiermem_limit_rejections_total``.
"""

from __future__ import annotations

import contextvars
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tiermem.server.catalog.catalog import Catalog
from tiermem.server.config import LimitsConfig
from tiermem.server.errors import CapacityExceeded, DeadlineExceeded, PermissionDenied
from tiermem.server.metrics import Metrics


class Role(enum.Enum):
    READ = "read"  # get, stat, list
    WRITE = "write"  # put, delete
    ADMIN = "admin"  # namespaces, fsck; implies every other role


ALL_NAMESPACES = "*"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a token's name and what it grants."""

    name: str
    namespaces: frozenset[str]
    roles: frozenset[Role]

    def allows(self, namespace: str, role: Role) -> bool:
        if Role.ADMIN not in self.roles and role not in self.roles:
            return False
        return ALL_NAMESPACES in self.namespaces or namespace in self.namespaces

    def allows_everywhere(self, role: Role) -> bool:
        """Holds ``role`` on every namespace (no tokens configured, or a token
        granting "*" with the role): a request needs no per-namespace check."""
        return ALL_NAMESPACES in self.namespaces and (
            Role.ADMIN in self.roles or role in self.roles
        )

    def may(self, role: Role) -> bool:
        """Holds ``role`` somewhere (for calls that are not about one namespace)."""
        return Role.ADMIN in self.roles or role in self.roles

    def sees(self, namespace: str) -> bool:
        return ALL_NAMESPACES in self.namespaces or namespace in self.namespaces


ALL_ROLES = frozenset(Role)
#: The caller when no tokens are configured: may do everything.
ANONYMOUS = Principal("anonymous", frozenset({ALL_NAMESPACES}), ALL_ROLES)
#: Work the daemon does itself (background passes, in-process service calls).
INTERNAL = Principal("internal", frozenset({ALL_NAMESPACES}), ALL_ROLES)

#: Set by the gRPC access interceptor for the duration of each RPC.
current_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "principal", default=INTERNAL
)
#: Monotonic time by which the current RPC must finish (None: no limit known).
current_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "deadline", default=None
)

#: A put hook: (namespace, session, nbytes, new_objects) -> None; raises to refuse.
PutHook = Callable[[str, str, int, int], None]
#: namespace -> (objects, bytes) it holds outside the object catalog.
UsageSource = Callable[[str], tuple[int, int]]


@dataclass(slots=True)
class _NsState:
    rpcs: int = 0
    inflight_bytes: int = 0
    pending_bytes: int = 0
    pending_objects: int = 0


@dataclass(slots=True)
class Ticket:
    """Admission to run one request; ``release()`` (idempotent) gives it all back."""

    _guard: Guard | None
    namespace: str
    inflight_bytes: int = 0
    pending_bytes: int = 0
    pending_objects: int = 0
    counts_rpc: bool = True
    _released: bool = field(default=False)

    def release(self) -> None:
        if self._released or self._guard is None:
            return
        self._released = True
        self._guard._release(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Guard:
    def __init__(self, limits: LimitsConfig, catalog: Catalog, metrics: Metrics) -> None:
        self._limits = limits
        self._catalog = catalog
        self._metrics = metrics
        self._lock = threading.Lock()
        self._ns: dict[str, _NsState] = {}
        self._inflight_bytes = 0
        self._put_hooks: list[PutHook] = []
        self._usage_sources: list[UsageSource] = []

    # -- who ---------------------------------------------------------------------
    @staticmethod
    def principal() -> Principal:
        return current_principal.get()

    def authorize(self, namespace: str, role: Role) -> None:
        """Raise PermissionDenied unless the caller holds ``role`` on ``namespace``."""
        who = current_principal.get()
        if not who.allows(namespace, role):
            self._metrics.auth_failures.labels("permission").inc()
            raise PermissionDenied(
                f"{who.name!r} is not granted namespace {namespace!r}"
                if not who.sees(namespace)
                else f"{who.name!r} lacks the {role.value} role on namespace {namespace!r}"
            )

    def require(self, role: Role) -> None:
        """Raise PermissionDenied unless the caller holds ``role`` (any namespace)."""
        who = current_principal.get()
        if not who.may(role):
            self._metrics.auth_failures.labels("permission").inc()
            raise PermissionDenied(f"{who.name!r} lacks the {role.value} role")

    def visible(self, namespace: str) -> bool:
        """Whether the caller may see that ``namespace`` exists (listings)."""
        return current_principal.get().sees(namespace)

    # -- limits ------------------------------------------------------------------
    def add_usage_source(self, source: UsageSource) -> None:
        """Count what another store (blobs) holds per namespace in its quotas."""
        self._usage_sources.append(source)

    def namespace_usage(self, namespace: str) -> tuple[int, int]:
        """(objects, bytes) the namespace quotas count for ``namespace`` now: the
        object catalog's plus every usage source's (blobs), puts in progress not
        included."""
        objects, used = self._catalog.namespace_usage(namespace)
        for source in self._usage_sources:
            more_objects, more_bytes = source(namespace)
            objects += more_objects
            used += more_bytes
        return objects, used

    def add_put_hook(self, hook: PutHook) -> None:
        """Register a check every put runs at admission (e.g. session quotas)."""
        self._put_hooks.append(hook)

    def admit(
        self,
        namespace: str,
        role: Role,
        *,
        put_bytes: int = 0,
        replaced_bytes: int = 0,
        new_objects: int = 0,
        session: str = "",
        held_bytes: int | None = None,
    ) -> Ticket:
        """Authorize and admit one request on ``namespace``.

        ``put_bytes``: bytes the request will add (held against the in-flight
        budgets until release, and against the namespace quota net of
        ``replaced_bytes``); ``new_objects``: objects it will add (0 for an
        overwrite); ``held_bytes``: bytes held in memory meanwhile when that is
        not ``put_bytes`` (a put streamed to disk). Returns a ticket to
        ``release()`` when the request is done."""
        self.authorize(namespace, role)
        for hook in self._put_hooks if put_bytes or new_objects else ():
            hook(namespace, session, put_bytes, new_objects)
        lim = self._limits.for_namespace(namespace)
        held = put_bytes if held_bytes is None else held_bytes
        if not (held or put_bytes or new_objects or lim.max_concurrent_rpcs):
            # Nothing to hold or to count against a limit (a read in a namespace
            # without a concurrency limit; quotas never refuse one): no shared
            # state to change, so no lock. Every request passed through this
            # lock twice, and a holder that lost the interpreter inside its
            # short hold kept every other request waiting.
            return Ticket(None, namespace, counts_rpc=False)
        with self._lock:
            st = self._ns.get(namespace)
            if st is None:
                st = self._ns[namespace] = _NsState()
            if lim.max_concurrent_rpcs and st.rpcs >= lim.max_concurrent_rpcs:
                self._reject(
                    "namespace_rpcs",
                    f"namespace {namespace!r} already has {st.rpcs} requests in progress "
                    f"(limits max_concurrent_rpcs={lim.max_concurrent_rpcs}); retry later",
                )
            if held:
                self._check_bytes(namespace, st, lim.max_inflight_bytes, held)
            if lim.max_bytes or lim.max_objects:
                self._check_quota(namespace, st, lim.max_bytes, lim.max_objects,
                                  put_bytes - replaced_bytes, new_objects)  # fmt: skip
            st.rpcs += 1
            st.inflight_bytes += held
            self._inflight_bytes += held
            pending = max(0, put_bytes - replaced_bytes)
            st.pending_bytes += pending
            st.pending_objects += new_objects
        self._metrics.inflight_bytes.set(self._inflight_bytes)
        return Ticket(self, namespace, held, pending, new_objects)

    def readmit(
        self, ticket: Ticket, *, put_bytes: int, replaced_bytes: int, new_objects: int
    ) -> None:
        """Check an admitted put again against what its commit finds (call with
        the store lock held, before the commit). The put was admitted for what
        it would add then; if the object it replaces has gone meanwhile (a
        delete, an expiry) or shrunk, it adds more, and the room the delete
        made may have been given to another put. The difference is admitted
        against the namespace quotas and held by ``ticket`` until its release,
        or CapacityExceeded is raised and the put must not commit."""
        more_bytes = max(0, put_bytes - replaced_bytes) - ticket.pending_bytes
        more_objects = new_objects - ticket.pending_objects
        if more_bytes <= 0 and more_objects <= 0:
            return
        more_bytes, more_objects = max(0, more_bytes), max(0, more_objects)
        namespace = ticket.namespace
        lim = self._limits.for_namespace(namespace)
        if not (lim.max_bytes or lim.max_objects):
            return
        with self._lock:
            st = self._ns.get(namespace)
            if st is None:
                st = self._ns[namespace] = _NsState()
            self._check_quota(namespace, st, lim.max_bytes, lim.max_objects,
                              more_bytes, more_objects)  # fmt: skip
            if not ticket.counts_rpc or ticket._guard is None:
                # admitted without shared state (nothing to hold then): held now
                ticket._guard, ticket.counts_rpc = self, True
                st.rpcs += 1
            st.pending_bytes += more_bytes
            st.pending_objects += more_objects
            ticket.pending_bytes += more_bytes
            ticket.pending_objects += more_objects

    def _check_bytes(self, namespace: str, st: _NsState, ns_limit: int, nbytes: int) -> None:
        budget = self._limits.max_inflight_bytes
        if self._inflight_bytes + nbytes > budget:
            self._reject(
                "inflight_bytes",
                f"the daemon holds {self._inflight_bytes} bytes of requests in progress; "
                f"{nbytes} more would exceed limits.max_inflight_bytes={budget}; retry later",
            )
        if ns_limit and st.inflight_bytes + nbytes > ns_limit:
            self._reject(
                "namespace_inflight_bytes",
                f"namespace {namespace!r} has {st.inflight_bytes} bytes of puts in progress; "
                f"{nbytes} more would exceed its max_inflight_bytes={ns_limit}; retry later",
            )

    def _check_quota(
        self, namespace: str, st: _NsState, max_bytes: int, max_objects: int, net: int, new: int
    ) -> None:
        objects, used = self.namespace_usage(namespace)
        if max_bytes and net > 0 and used + st.pending_bytes + net > max_bytes:
            self._reject(
                "namespace_bytes",
                f"namespace {namespace!r} quota exceeded: it holds {used} bytes "
                f"(+{st.pending_bytes} being written); {net} more would pass its "
                f"max_bytes={max_bytes}. Delete objects or raise the quota",
            )
        if max_objects and new and objects + st.pending_objects + new > max_objects:
            self._reject(
                "namespace_objects",
                f"namespace {namespace!r} quota exceeded: it holds {objects} objects "
                f"(+{st.pending_objects} being written); its max_objects is {max_objects}. "
                "Delete objects or raise the quota",
            )

    def reserve_bytes(self, nbytes: int) -> Ticket:
        """Hold ``nbytes`` of the process-wide in-flight budget (e.g. an SSD read
        buffer) without counting an RPC. Release the ticket when the bytes are freed."""
        with self._lock:
            budget = self._limits.max_inflight_bytes
            if self._inflight_bytes + nbytes > budget:
                self._reject(
                    "inflight_bytes",
                    f"the daemon holds {self._inflight_bytes} bytes of requests in progress; "
                    f"reading {nbytes} more would exceed limits.max_inflight_bytes={budget}; "
                    "retry later",
                )
            self._inflight_bytes += nbytes
        return Ticket(self, "", inflight_bytes=nbytes, counts_rpc=False)

    def _release(self, t: Ticket) -> None:
        with self._lock:
            self._inflight_bytes -= t.inflight_bytes
            st = self._ns.get(t.namespace) if t.counts_rpc else None
            if st is not None:
                st.rpcs -= 1
                st.inflight_bytes -= t.inflight_bytes
                st.pending_bytes -= t.pending_bytes
                st.pending_objects -= t.pending_objects
                if not (st.rpcs or st.inflight_bytes or st.pending_bytes or st.pending_objects):
                    del self._ns[t.namespace]  # bounded by namespaces with requests in flight
            inflight = self._inflight_bytes
        self._metrics.inflight_bytes.set(inflight)

    def _reject(self, limit: str, message: str) -> None:
        self._metrics.limit_rejections.labels(limit).inc()
        raise CapacityExceeded(message)

    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    # -- time --------------------------------------------------------------------
    @staticmethod
    def check_deadline(what: str = "the request") -> None:
        """Raise DeadlineExceeded if the current RPC ran past its deadline."""
        deadline = current_deadline.get()
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlineExceeded(
                f"{what} ran past its deadline (the client's, or limits.max_request_s)"
            )


def principal_from_grants(name: str, namespaces: list[str], roles: list[str]) -> Principal:
    return Principal(name, frozenset(namespaces), frozenset(Role(r) for r in roles))


__all__ = [
    "ANONYMOUS",
    "INTERNAL",
    "Guard",
    "Principal",
    "Role",
    "Ticket",
    "current_deadline",
    "current_principal",
    "principal_from_grants",
]
