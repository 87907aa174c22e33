"""A remote delete survives a crash of the daemon that queued it. The queue of
remote deletes was kept in memory only: a daemon killed (``kill -9``) right
after deleting a published block left its copy in the remote store for good,
where another daemon (or this one, once restarted) would adopt it and serve a
deleted value. The delete is now journaled in the catalog before the remote
writer can run it, and a restarted daemon carries the journal out. The crash
is the ``delete.after_commit`` crash point (the delete is committed); the
store refuses DEL meanwhile (an ACL), so the remote writer cannot have deleted
the copy before the kill, whenever it ran."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DaemonProcess
from tests.remote.conftest import Peer, remote_config
from tests.remote.peers import RedisCluster
from tiermem.client import Client, Kind
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

KEY = ObjectKey("default", ServerKind.KV_BLOCK, "doomed").encode()


def toml(remote: dict[str, Any], arm_file: Path, kill_point: str) -> str:
    """A daemon's config on ``remote`` (Redis) that SIGKILLs itself at
    ``kill_point`` while ``arm_file`` exists."""
    nodes = ", ".join(f'"{n}"' for n in remote["redis"]["nodes"])
    return (
        "[tiers.remote]\n"
        "enabled = true\n"
        f'deployment = "{remote["deployment"]}"\n'
        f"op_timeout_s = {remote['op_timeout_s']}\n"
        'backend = "redis_cluster"\n'
        "[tiers.remote.redis]\n"
        f"nodes = [{nodes}]\n"
        "[background]\n"
        "migrate_interval_s = 60\n"
        "[server]\n"
        "shutdown_grace_s = 0\n"
        "[faults]\n"
        f'kill_points = ["{kill_point}"]\n'
        "kill_probability = 1.0\n"
        f'arm_file = "{arm_file}"\n'
    )


@contextlib.contextmanager
def refusing_deletes(peer: Peer) -> Iterator[None]:
    """Every node answers DEL with NOPERM (a failed delete) inside the block."""
    assert isinstance(peer, RedisCluster)

    def acl(rule: str) -> None:
        for port in peer.ports:
            subprocess.run(
                ["redis-cli", "-p", str(port), "acl", "setuser", "default", rule],
                check=True, capture_output=True,
            )  # fmt: skip

    acl("-del")
    try:
        yield
    finally:
        acl("+del")


def in_store(daemon: Daemon) -> bool:
    tier = daemon.remote.remote  # type: ignore[union-attr]
    return bool(tier.exists([KEY])[0])


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_a_block_deleted_just_before_a_kill_9_is_gone_from_the_store_after_restart(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    remote = remote_config(peer)
    arm = tmp_path / "arm"
    config = tmp_path / "tiermem.toml"
    config.write_text(toml(remote, arm, "delete.after_commit"))
    other = make_remote_daemon("other", remote, background={"migrate_interval_s": 60})
    proc = DaemonProcess(tmp_path / "data", config)
    try:
        with Client(proc.start()) as c:
            c.put(Kind.KV_BLOCK, "doomed", b"d" * 4096)
            assert wait_for(lambda: in_store(other))  # published
            with refusing_deletes(peer):
                arm.touch()
                with pytest.raises(TiermemClientError):
                    c.delete(Kind.KV_BLOCK, "doomed", timeout_s=5)
                assert proc.proc is not None and proc.proc.wait(30) == -9  # killed itself
                arm.unlink()
        assert in_store(other)  # the delete died with the daemon
        proc.start()
        assert wait_for(lambda: not in_store(other)), "the remote copy outlived the delete"
    finally:
        proc.stop()
