"""Work a request leaves for after its reply is sent.

A bulk session answers one request at a time: once it has sent a reply it
has nothing to do until the client's next request arrives, and the client is
then busy with the reply (copying out of leased extents, say). Work that the
reply does not depend on can run in that gap instead of delaying the reply or
the next request. The session collects such work while it serves a request
(``collecting``) and runs it after sending the reply (``run``). Code serving a
request offers work with ``defer``; where nothing collects (a gRPC handler,
a direct call), ``can_defer`` says so and the caller does it another way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tiermem.server.errors import InvariantViolation

log = logging.getLogger(__name__)

_work: ContextVar[list[Callable[[], None]] | None] = ContextVar("after_reply", default=None)


def defer(fn: Callable[[], None]) -> None:
    """Run ``fn`` once the current request's reply is sent (only where
    ``can_defer``)."""
    work = _work.get()
    if work is None:
        raise InvariantViolation("work deferred past a reply that nothing collects")
    work.append(fn)


def can_defer() -> bool:
    """Whether ``defer`` would queue work for the current request."""
    return _work.get() is not None


@contextmanager
def collecting() -> Iterator[list[Callable[[], None]]]:
    """Collect the work deferred while serving one request (the caller runs
    it with ``run`` after the reply, whether or not the request succeeded)."""
    work: list[Callable[[], None]] = []
    token = _work.set(work)
    try:
        yield work
    finally:
        _work.reset(token)


def run(work: list[Callable[[], None]]) -> None:
    """Run deferred work in order; a failure is logged and the rest still runs."""
    for fn in work:
        try:
            fn()
        except Exception:
            log.exception("work deferred past a reply failed")
