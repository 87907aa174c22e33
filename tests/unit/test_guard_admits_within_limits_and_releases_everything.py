"""The service-layer guard: roles per namespace, quotas counting puts still in
progress, in-flight budgets, and tickets that give everything back once."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tiermem.server.config import LimitsConfig, NamespaceLimits
from tiermem.server.errors import CapacityExceeded, DeadlineExceeded, PermissionDenied
from tiermem.server.metrics import Metrics
from tiermem.server.services.guard import (
    Guard,
    Role,
    current_deadline,
    current_principal,
    principal_from_grants,
)


class FakeCatalog:
    def __init__(self) -> None:
        self.usage: dict[str, tuple[int, int]] = {}

    def namespace_usage(self, name: str) -> tuple[int, int]:
        return self.usage.get(name, (0, 0))


def guard(**limits: object) -> tuple[Guard, FakeCatalog]:
    catalog = FakeCatalog()
    config = LimitsConfig.model_validate(limits)
    return Guard(config, catalog, Metrics(CollectorRegistry())), catalog  # type: ignore[arg-type]


def test_roles_are_granted_per_namespace() -> None:
    g, _ = guard()
    token = current_principal.set(principal_from_grants("t", ["a"], ["read"]))
    try:
        g.authorize("a", Role.READ)
        with pytest.raises(PermissionDenied, match="lacks the write role"):
            g.authorize("a", Role.WRITE)
        with pytest.raises(PermissionDenied, match="not granted namespace 'b'"):
            g.authorize("b", Role.READ)
        with pytest.raises(PermissionDenied, match="admin"):
            g.require(Role.ADMIN)
        assert g.visible("a") and not g.visible("b")
    finally:
        current_principal.reset(token)
    g.authorize("anything", Role.ADMIN)  # outside an RPC: the daemon itself


def test_quota_counts_puts_in_progress_and_overwrites_by_their_net_size() -> None:
    g, catalog = guard(namespace=NamespaceLimits(max_bytes=1000, max_objects=2))
    catalog.usage["a"] = (1, 600)
    first = g.admit("a", Role.WRITE, put_bytes=300, new_objects=1)
    with pytest.raises(CapacityExceeded, match="being written"):
        g.admit("a", Role.WRITE, put_bytes=200, new_objects=0)  # 600 + 300 + 200 > 1000
    g.admit("a", Role.WRITE, put_bytes=500, replaced_bytes=400, new_objects=0).release()
    with pytest.raises(CapacityExceeded, match="max_objects is 2"):
        g.admit("a", Role.WRITE, put_bytes=1, new_objects=1)
    first.release()
    first.release()  # idempotent
    g.admit("a", Role.WRITE, put_bytes=400, new_objects=1).release()


def test_in_flight_budgets_and_namespace_concurrency() -> None:
    g, _ = guard(
        max_object_bytes=100, max_inflight_bytes=100,
        namespaces={"n": NamespaceLimits(max_concurrent_rpcs=1, max_inflight_bytes=10)},
    )  # fmt: skip
    held = g.admit("a", Role.WRITE, put_bytes=80)
    with pytest.raises(CapacityExceeded, match=r"limits\.max_inflight_bytes=100"):
        g.admit("b", Role.WRITE, put_bytes=30)
    with pytest.raises(CapacityExceeded, match="reading"):
        g.reserve_bytes(30)
    read = g.reserve_bytes(20)
    assert g.inflight_bytes == 100
    read.release()
    held.release()
    assert g.inflight_bytes == 0
    with g.admit("n", Role.READ):
        with pytest.raises(CapacityExceeded, match="max_concurrent_rpcs=1"):
            g.admit("n", Role.READ)
        g.admit("other", Role.READ).release()
    with pytest.raises(CapacityExceeded, match="max_inflight_bytes=10"):
        g.admit("n", Role.WRITE, put_bytes=11)
    g.admit("n", Role.READ).release()  # the refusals left nothing held


def test_put_hooks_and_deadlines() -> None:
    g, _ = guard()
    seen = []
    g.add_put_hook(lambda ns, session, nbytes, objects: seen.append((ns, session, nbytes)))
    g.admit("a", Role.WRITE, put_bytes=5, new_objects=1, session="s").release()
    g.admit("a", Role.READ).release()  # reads do not run put hooks
    assert seen == [("a", "s", 5)]
    token = current_deadline.set(0.0)
    try:
        with pytest.raises(DeadlineExceeded, match="the listing"):
            g.check_deadline("the listing")
    finally:
        current_deadline.reset(token)
    g.check_deadline()


def test_reads_count_against_a_namespaces_concurrency_limit_and_share_nothing_without_one() -> None:
    g, _ = guard(namespaces={"tight": NamespaceLimits(max_concurrent_rpcs=1)})
    first = g.admit("tight", Role.READ)
    with pytest.raises(CapacityExceeded, match="max_concurrent_rpcs=1"):
        g.admit("tight", Role.READ)
    first.release()
    g.admit("tight", Role.READ).release()
    # no limit: a read holds nothing and changes no shared state (no lock taken)
    reads = [g.admit("open", Role.READ) for _ in range(100)]
    assert g._ns.keys() == set()
    for ticket in reads:
        ticket.release()
    token = current_principal.set(principal_from_grants("t", ["tight"], ["read"]))
    try:  # authorization still applies
        with pytest.raises(PermissionDenied):
            g.admit("open", Role.READ)
    finally:
        current_principal.reset(token)
