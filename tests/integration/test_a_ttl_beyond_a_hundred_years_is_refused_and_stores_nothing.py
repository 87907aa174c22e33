"""A time-to-live past ``MAX_TTL_S`` (100 years) is INVALID_ARGUMENT naming the
field, on every path a put takes and for a child session's ttl and lease; the
object it would have replaced is untouched. Expiry times are unsigned 64-bit
milliseconds: a ttl near 2**64 overflowed them, the put failed INTERNAL over
gRPC and dropped its bulk session without a status, which switched the
client's bulk path off for 30 s."""

from __future__ import annotations

import time

import pytest

from tiermem.client import Client, InvalidArgumentError, Kind, Profile
from tiermem.client.fastpath import PutItem
from tiermem.server.model import MAX_TTL_S

HUGE = 2**64 - 1


@pytest.mark.parametrize("path", ["default", "bulk", "grpc"])
def test_a_put_with_a_ttl_past_the_limit_is_refused(client: Client, path: str) -> None:
    client.put(Kind.SCRATCH, f"keep-{path}", b"original")
    for ttl_s in (HUGE, MAX_TTL_S + 1):
        profile = Profile(ttl_s=ttl_s)
        with pytest.raises(InvalidArgumentError, match=r"profile\.ttl_s .*100 years"):
            if path == "default":
                client.put(Kind.SCRATCH, f"keep-{path}", b"replacement", profile=profile)
            else:
                item = PutItem(Kind.SCRATCH, f"keep-{path}", b"replacement", profile=profile)
                client.dataplane.put_many([item], path=path)
    assert client.get(Kind.SCRATCH, f"keep-{path}") == b"original"
    if path == "bulk":  # the bulk path stays on: the next put takes it again
        before = client.dataplane.path_stats()["bulk"]["puts"]
        client.dataplane.put_many([PutItem(Kind.SCRATCH, "after", b"x")], path="bulk")
        assert client.dataplane.path_stats()["bulk"]["puts"] == before + 1


def test_the_longest_ttl_is_taken_and_sets_the_expiry(client: Client) -> None:
    before_ms = int(time.time() * 1000)
    client.put(Kind.SCRATCH, "century", b"x", profile=Profile(ttl_s=MAX_TTL_S))
    expires = client.stat(Kind.SCRATCH, "century").expires_unix_ms
    assert before_ms + MAX_TTL_S * 1000 <= expires <= int(time.time() * 1000) + MAX_TTL_S * 1000


def test_a_child_session_with_a_ttl_or_lease_past_the_limit_is_refused(client: Client) -> None:
    with pytest.raises(InvalidArgumentError, match=r"ttl_s .*100 years"):
        client.sessions.open(label="forever", ttl_s=HUGE)
    with pytest.raises(InvalidArgumentError, match=r"lease_s .*100 years"):
        client.sessions.open(label="forever", lease_s=MAX_TTL_S + 1)
    assert client.sessions.open(label="long", ttl_s=MAX_TTL_S).id
