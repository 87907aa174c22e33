"""What a blob put does before its bytes — BeginUpload (an inline try, then the
announcement without the bytes), negotiating the data plane's offer — shares
the call's timeout: each step gets what is left of it, not the whole timeout.
Before, both BeginUpload calls got the whole ``timeout_s``: a daemon slow to
answer each took twice the timeout. And an upload a put opened, then gave up
on by its timeout (a stalled Hello), is aborted at once rather than left
holding its staging until the daemon's TTL."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.dataplane.helpers import stalled_hello, wait_for
from tiermem.client import Client, DeadlineError
from tiermem.server.app import Daemon

#: each BeginUpload the daemon answers takes this long
SLOW_S = 1.0
#: enough for one slow BeginUpload, not for two
CALL_TIMEOUT_S = 1.5
#: a call must end within this (generous: a loaded machine)
LATE_S = 2 * SLOW_S + CALL_TIMEOUT_S
SMALL = b"\x07" * 4096
#: past the blob client's inline upload size (4 MiB): BeginUpload opens an upload
LARGE = b"\x05" * (5 << 20)


def test_a_refused_inline_try_leaves_the_announcement_only_what_is_left(
    make_daemon: Callable[..., Daemon],
) -> None:
    # the daemon takes no inline data: the client's inline try is refused and
    # it announces the upload again without the bytes
    daemon = make_daemon(blobs={"inline_upload_max_bytes": 1024})
    real = daemon.blobs.begin_upload

    def slow_begin(*args: Any, **kw: Any) -> Any:
        time.sleep(SLOW_S)
        return real(*args, **kw)

    daemon.blobs.begin_upload = slow_begin  # type: ignore[method-assign]
    with Client(daemon.address, timeout_s=30) as c:
        started = time.monotonic()
        with pytest.raises(DeadlineError):
            c.blobs.put("b", SMALL, path="grpc", timeout_s=CALL_TIMEOUT_S)
        assert time.monotonic() - started < LATE_S
        daemon.blobs.begin_upload = real  # type: ignore[method-assign]
        c.blobs.put("b", SMALL, path="grpc")
        assert c.blobs.get("b", path="grpc") == SMALL


def test_an_upload_a_put_gives_up_on_by_its_timeout_is_aborted(daemon: Daemon) -> None:
    with stalled_hello(daemon, 10.0) as go_on, Client(daemon.address, timeout_s=30) as c:
        with pytest.raises(DeadlineError):
            c.blobs.put("b", LARGE, timeout_s=0.5)
        go_on.set()
        wait_for(lambda: len(daemon.blobs.uploads) == 0, "the upload to be aborted", 5.0)
        c.blobs.put("b", LARGE)
        assert c.blobs.get("b") == LARGE
