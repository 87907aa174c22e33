"""Agent sessions: a tree of isolated owners of memory (DESIGN.md §6).

``service.SessionService`` opens, describes, lists and closes sessions;
``guard.SessionGuard`` plugs into the object service to enforce visibility and
per-tier quotas; ``cleanup.CleanupRegistry`` is where other services register
what to free when a session closes."""
