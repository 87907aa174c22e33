"""After a store restart a Mooncake client was seen to keep addressing the old
storage node, so a backend that says it can go stale
(``RemoteBackend.reconnect_after_trip``) is connected afresh by the first call
after the breaker trips; one that does not (Redis Cluster) keeps its client.
Runs against in-memory backends (no peer needed)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore
from tiermem.server.config import RemoteTierConfig
from tiermem.server.metrics import Metrics
from tiermem.server.tiers.remote import RemoteError
from tiermem.server.tiers.remote.engine import RemoteTier


class StaleAfterOutage(FlakyStore):
    """Fails every ping while ``down``; an instance that saw the outage keeps
    failing afterwards (it is stale) unless it is replaced."""

    def __init__(self, outage: dict[str, bool], stale_prone: bool) -> None:
        super().__init__(failing_puts=0)
        self.outage = outage
        self.saw_outage = False
        self.reconnect_after_trip = stale_prone

    def ping(self) -> None:
        if self.outage["down"]:
            self.saw_outage = True
        if self.saw_outage:
            raise RemoteError("store unreachable (or this client is stale)")


@pytest.mark.parametrize("stale_prone", [True, False])
def test_the_client_is_rebuilt_after_a_trip_only_when_it_can_go_stale(stale_prone: bool) -> None:
    outage = {"down": False}
    built: list[StaleAfterOutage] = []
    now = [0.0]

    def connect() -> StaleAfterOutage:
        built.append(StaleAfterOutage(outage, stale_prone))
        return built[-1]

    cfg = RemoteTierConfig(
        enabled=True, deployment="unit", retries=0, breaker_failures=2, breaker_open_s=1.0
    )
    tier = RemoteTier(cfg, connect, Metrics(CollectorRegistry()), clock=lambda: now[0])
    assert tier.ping() and len(built) == 1

    outage["down"] = True
    assert not tier.ping() and not tier.ping()  # two failures: the breaker trips
    outage["down"] = False
    now[0] += 2.0  # past breaker_open_s: the next call probes

    if stale_prone:
        assert tier.ping()  # a fresh client answers
        assert len(built) == 2
    else:
        assert not tier.ping()  # the same (here stale) client keeps failing
        assert len(built) == 1
