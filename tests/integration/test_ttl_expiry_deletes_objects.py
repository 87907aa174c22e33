import time

import pytest

from tiermem.client import Client, Kind, NotFoundError, Profile
from tiermem.server.app import Daemon


def test_objects_are_deleted_after_their_ttl(daemon: Daemon, client: Client) -> None:
    info = client.put(Kind.SCRATCH, "short", b"x", profile=Profile(ttl_s=1))
    client.put(Kind.SCRATCH, "long", b"y", profile=Profile(ttl_s=3600))
    assert info.expires_unix_ms > 0
    time.sleep(1.2)
    daemon.maintain(compact=False)
    with pytest.raises(NotFoundError):
        client.get(Kind.SCRATCH, "short")
    assert client.get(Kind.SCRATCH, "long") == b"y"


def test_overwrite_without_ttl_cancels_the_expiry(daemon: Daemon, client: Client) -> None:
    client.put(Kind.SCRATCH, "k", b"x", profile=Profile(ttl_s=1))
    client.put(Kind.SCRATCH, "k", b"kept")
    time.sleep(1.2)
    daemon.maintain(compact=False)
    assert client.get(Kind.SCRATCH, "k") == b"kept"
