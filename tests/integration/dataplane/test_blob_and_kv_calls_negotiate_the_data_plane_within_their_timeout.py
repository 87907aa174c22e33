"""Blob and KV calls that move bytes ask the daemon what it offers (Hello)
before picking a path, like object calls; that exchange is part of the call
and ends by the call's timeout. Before, the blob client (``_fast_paths``) and
``KvClient._fast`` asked under the client's default timeout (30 s here): a
stalled Hello held a call with ``timeout_s=0.5`` for as long as it stalled.
Now it ends the call with DeadlineError within its timeout, and the fast
paths are still offered once the daemon answers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tests.integration.dataplane.helpers import stalled_hello as stall_hello
from tiermem.client import Client, DeadlineError, KvBlock, KvScope
from tiermem.server.app import Daemon

CALL_TIMEOUT_S = 0.5
#: a call must end within this: far above its timeout, far below the stall
LATE_S = 3 * CALL_TIMEOUT_S
STALL_S = 10.0
#: past the blob client's inline upload size (4 MiB): its bytes go by a fast path
BLOB = b"\x05" * (5 << 20)
SCOPE = KvScope("negotiation", dtype="float32")
BLOCK = np.full(1 << 16, 3.0, dtype=np.float32)  # 256 KiB: a fast path's size


@pytest.fixture
def stalled_hello(daemon: Daemon) -> Iterator[threading.Event]:
    with stall_hello(daemon, STALL_S) as go_on:
        yield go_on


CALLS: dict[str, Callable[[Client], object]] = {
    "blob put": lambda c: c.blobs.put("b", BLOB, timeout_s=CALL_TIMEOUT_S),
    "blob get": lambda c: c.blobs.get("b", timeout_s=CALL_TIMEOUT_S),
    "kv put": lambda c: c.kv.put_blocks(SCOPE, [KvBlock(1, BLOCK)], timeout_s=CALL_TIMEOUT_S),
    "kv get": lambda c: c.kv.get_blocks(SCOPE, [1], timeout_s=CALL_TIMEOUT_S),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_first_blob_or_kv_call_whose_hello_stalls_ends_by_its_timeout(
    daemon: Daemon, stalled_hello: threading.Event, call: str
) -> None:
    with Client(daemon.address, timeout_s=30) as c:
        started = time.monotonic()
        with pytest.raises(DeadlineError):
            CALLS[call](c)
        assert time.monotonic() - started < LATE_S
        stalled_hello.set()
        # the Hello cut short was not taken for 'no fast paths'
        assert "bulk" in c.dataplane.paths()
        c.blobs.put("b", BLOB)
        assert c.blobs.get("b") == BLOB
        c.kv.put_blocks(SCOPE, [KvBlock(1, BLOCK)])
        (got,) = c.kv.get_blocks(SCOPE, [1])
        assert got.found and bytes(got.data) == BLOCK.tobytes()
