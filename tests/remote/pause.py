"""A remote store that is slow, not dead: its processes stopped with SIGSTOP
and resumed with SIGCONT. Unlike a kill, the store's sockets stay open and the
kernel still accepts connections and buffers requests; nothing answers until
it resumes, and then everything queued meanwhile is answered."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from tests.remote.peers import MooncakeStore, RedisCluster


def store_pids(peer: RedisCluster | MooncakeStore) -> list[int]:
    """Every process the daemon talks to: the Redis nodes, or the Mooncake
    master (metadata RPCs) and its storage node (the transfers)."""
    if isinstance(peer, RedisCluster):
        return list(peer.pids.values())
    return [proc.pid for proc in (peer.master, peer.node) if proc is not None]


@contextmanager
def paused(peer: RedisCluster | MooncakeStore) -> Iterator[None]:
    """The store stopped (SIGSTOP) for the duration of the block, resumed
    (SIGCONT) on the way out, also when the block fails."""
    pids = store_pids(peer)
    if not pids:
        raise RuntimeError("the store is not running: nothing to pause")
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
