"""The object service's guard for sessions: visibility and per-tier quotas.

Rules (a caller acts as a session through the "x-tiermem-session" metadata):

* a caller without a session is a trusted tool: it sees and may change everything;
* a session sees objects owned by no session and its own objects;
* a child sees an ancestor's objects named by one of its grants, read-only:
  puts over them and deletes are PERMISSION_DENIED;
* anything else (a sibling's, a child's, another tree's) does not exist for
  it: NOT_FOUND, exactly as if it were missing;
* an object is owned by the session named in its put (a session puts only as
  itself); puts into a session with a quota on the admitted tier are refused
  with RESOURCE_EXHAUSTED when they would exceed it. A DURABLE object in a
  memory tier also occupies the SSD (its copy) and is charged there too.

Session ids the daemon never opened are plain owner tags (no quota, no
isolation), as before sessions existed; ids of recently closed sessions are
refused so a late put cannot outlive its session's close.
"""

from __future__ import annotations

from tiermem.server.catalog.catalog import Entry
from tiermem.server.errors import NotFound, PermissionDenied
from tiermem.server.model import Durability, ObjectMeta, Tier
from tiermem.server.services.guard import Role
from tiermem.server.services.objects import PutSpec
from tiermem.server.sessions.model import SessionState
from tiermem.server.sessions.service import SessionService, _copies


class SessionGuard:
    def __init__(self, sessions: SessionService) -> None:
        self._sessions = sessions

    def check_access(self, meta: ObjectMeta, caller: str, write: bool) -> None:
        owner = meta.session
        if caller:  # every call made as a session renews its lease, reads included
            self.renew(caller)
        if not owner or owner == caller:
            return
        sessions = self._sessions
        sessions.require_open(caller)
        key = meta.key
        if sessions.read_grant(caller, owner, key.namespace, key.kind, key.key):
            if write:
                raise PermissionDenied(
                    f"object {key} is shared read-only with session {caller!r} by a grant "
                    f"from session {owner!r}; it cannot be changed or deleted through it"
                )
            return
        raise NotFound(f"object {key} not found")

    def renew(self, caller: str) -> None:
        """Renew the lease of the session ``caller`` acts as (a no-op for an
        owner tag or a closed session)."""
        self._sessions.touch(caller)

    def check_put(
        self, spec: PutSpec, tier: Tier, replaced: Entry | None, replaced_owner: str
    ) -> None:
        sessions = self._sessions
        owner, caller = spec.session, spec.caller
        if caller and owner != caller:
            raise PermissionDenied(
                f"session {caller!r} may put objects only as itself, not as {owner!r}"
            )
        if (
            replaced is not None
            and replaced_owner != owner
            and (caller or sessions.get(replaced_owner) is not None)
        ):
            key = spec.key
            if caller and sessions.read_grant(
                caller, replaced_owner, key.namespace, key.kind, key.key
            ):
                raise PermissionDenied(
                    f"object {key} is shared read-only with session {caller!r} by a grant "
                    f"from session {replaced_owner!r}; writes through a grant are refused"
                )
            if replaced_owner:
                raise PermissionDenied(
                    f"object {key} is owned by another session; choose another key"
                )
        if not owner:
            return
        session = sessions.get(owner)
        if session is None:
            if sessions.was_closed(owner):
                sessions.require_open(owner)  # raises: the session is closed
            return  # an owner tag, not a session
        # the caller must be granted the owner session's namespace: else a
        # token of one namespace could charge another's session, and that
        # session's close would delete the object
        sessions.authorize(owner, Role.WRITE)
        if session.state != SessionState.OPEN:
            sessions.require_open(owner)  # raises: the session is closing
        sessions.touch(owner)
        charges = {tier: spec.size_bytes}
        durable = spec.profile.resolved(spec.key.kind).durability == Durability.DURABLE
        if durable and tier != Tier.SSD:
            charges[Tier.SSD] = spec.size_bytes
        credit: dict[Tier, int] = {}
        if replaced is not None and replaced_owner == owner:
            for t in _copies(replaced):
                credit[t] = credit.get(t, 0) + replaced.size
        sessions.check_quota(session, charges, credit)
