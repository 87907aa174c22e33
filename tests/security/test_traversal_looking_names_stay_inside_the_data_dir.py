"""Keys, namespaces and session ids never become file paths: traversal-looking
names are stored and found as plain names, and nothing appears outside the
data dir. (Audit: segment files are named by number, the DRAM arena by pid and
random hex; object keys only ever become RocksDB keys.)"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tiermem.client import Client, InvalidArgumentError, Kind, Profile, Tier
from tiermem.server.app import Daemon

NASTY = [
    "../../../../etc/passwd",
    "/etc/shadow",
    "..",
    ".",
    "a/../../b",
    "..\\..\\windows",
    "seg-0000000001.dat",
    "%2e%2e%2f",
    "~root/.ssh/authorized_keys",
    "name\nwith\nnewlines",
]
#: Every file the daemon may create under its data dir.
KNOWN = re.compile(
    r"^(catalog/.*|segments/seg-\d{10}\.dat|scratch-log/log-\d{12}\.wal|vectors/\d+/.*)$"
)


def test_traversal_looking_keys_and_sessions_are_plain_names(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = make_daemon(tiers={"ssd": {"inline_max_bytes": 1024}})
    outside_before = set(os.listdir(tmp_path))
    with Client(daemon.address) as client:
        for i, key in enumerate(NASTY):
            data = os.urandom(5000 if i % 2 else 100)
            client.put(
                Kind.BLOB, key, data, session=key[:200], profile=Profile(preferred_tier=Tier.SSD)
            )
            assert client.get(Kind.BLOB, key) == data
            assert client.stat(Kind.BLOB, key).key == key
        assert sorted(o.key for o in client.list(kind=Kind.BLOB)) == sorted(NASTY)
        assert [o.key for o in client.list(session=NASTY[0])] == [NASTY[0]]
    daemon.maintain()
    assert set(os.listdir(tmp_path)) == outside_before
    data_dir = Path(daemon.config.data_dir)
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), data_dir)
            assert KNOWN.match(rel), rel


@pytest.mark.parametrize("namespace", ["..", ".", "...", "../x", "a/b", "/abs", "x\x00y", "a b"])
def test_traversal_looking_namespaces_are_refused(daemon: Daemon, namespace: str) -> None:
    with Client(daemon.address, retries=0) as client:
        with pytest.raises(InvalidArgumentError, match="namespace"):
            client.create_namespace(namespace)
        with pytest.raises(InvalidArgumentError, match="namespace"):
            client.put(Kind.BLOB, "k", b"v", namespace=namespace)
