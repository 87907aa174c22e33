"""``Guard.readmit``: a put admitted as an overwrite whose object is gone at
commit adds an object (and its full size); the difference is admitted against
the namespace quotas or refused, and the ticket gives it all back once."""

from __future__ import annotations

import pytest

from tests.unit.test_guard_admits_within_limits_and_releases_everything import guard
from tiermem.server.config import NamespaceLimits
from tiermem.server.errors import CapacityExceeded
from tiermem.server.services.guard import Role


def test_the_difference_is_admitted_held_and_released() -> None:
    g, catalog = guard(namespace=NamespaceLimits(max_bytes=1000, max_objects=3))
    catalog.usage["a"] = (2, 600)
    ticket = g.admit("a", Role.WRITE, put_bytes=300, replaced_bytes=200, new_objects=0)
    catalog.usage["a"] = (1, 400)  # the replaced object was deleted
    g.readmit(ticket, put_bytes=300, replaced_bytes=0, new_objects=1)
    assert (ticket.pending_bytes, ticket.pending_objects) == (300, 1)
    other = g.admit("a", Role.WRITE, put_bytes=1, new_objects=1)  # 1 + 1 held + 1
    with pytest.raises(CapacityExceeded, match="max_objects is 3"):
        g.admit("a", Role.WRITE, put_bytes=1, new_objects=1)
    other.release()
    ticket.release()
    assert g._ns == {}


def test_no_room_for_the_difference_is_refused() -> None:
    g, catalog = guard(namespace=NamespaceLimits(max_objects=1))
    catalog.usage["a"] = (1, 10)
    ticket = g.admit("a", Role.WRITE, put_bytes=10, replaced_bytes=10, new_objects=0)
    catalog.usage["a"] = (1, 10)  # deleted, and another put took its place
    with pytest.raises(CapacityExceeded, match="max_objects is 1"):
        g.readmit(ticket, put_bytes=10, replaced_bytes=0, new_objects=1)
    ticket.release()
    assert g._ns == {}


def test_an_overwrite_still_there_needs_nothing_more() -> None:
    g, catalog = guard(namespace=NamespaceLimits(max_objects=1, max_bytes=10))
    catalog.usage["a"] = (1, 10)
    ticket = g.admit("a", Role.WRITE, put_bytes=0, replaced_bytes=10, new_objects=0)
    g.readmit(ticket, put_bytes=0, replaced_bytes=10, new_objects=0)
    assert (ticket.pending_bytes, ticket.pending_objects) == (0, 0)
    ticket.release()
    assert g._ns == {}
