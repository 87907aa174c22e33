"""An overwrite of a published block replaces the remote copy by publishing the
new version, in the background. A daemon killed (``kill -9``) after the
overwrite's commit and before that publish left the old version in the store,
while the new one, a CACHE block in memory, died with the process: any daemon
reading the block later adopted the overwritten value as current. The old
version is now journaled as one to delete until the new one is published over
it, and the restarted daemon deletes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import DaemonProcess
from tests.remote.conftest import Peer, remote_config
from tests.remote.test_a_block_deleted_just_before_a_kill_9_is_deleted_remotely_after_restart import (  # noqa: E501
    toml,
    wait_for,
)
from tiermem.client import Client, Kind
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

KEY = ObjectKey("default", ServerKind.KV_BLOCK, "overwritten").encode()


def in_store(daemon: Daemon) -> bool:
    return bool(daemon.remote.remote.exists([KEY])[0])  # type: ignore[union-attr]


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_the_old_version_is_gone_from_the_store_after_the_restart(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    remote = remote_config(peer)
    arm = tmp_path / "arm"
    config = tmp_path / "tiermem.toml"
    config.write_text(toml(remote, arm, "put.after_commit"))
    other = make_remote_daemon("other", remote, background={"migrate_interval_s": 60})
    proc = DaemonProcess(tmp_path / "data", config)
    try:
        with Client(proc.start()) as c:
            c.put(Kind.KV_BLOCK, "overwritten", b"1" * 4096)
            assert wait_for(lambda: in_store(other))  # v1 published
            arm.touch()
            with pytest.raises(TiermemClientError):
                c.put(Kind.KV_BLOCK, "overwritten", b"2" * 4096, timeout_s=5)
        assert proc.proc is not None and proc.proc.wait(30) == -9  # before v2's publish
        arm.unlink()
        assert in_store(other)
        proc.start()
        assert wait_for(lambda: not in_store(other)), "the overwritten version stayed"
    finally:
        proc.stop()
