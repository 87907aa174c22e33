"""In write-through mode a close that runs while an append is between its
check that the session is open and its commit leaves nothing behind: the
append either is refused or is committed before the close drops the
session's records. The record used to be committed after the close had
dropped them: stored for a closed session, counted, indexed and never freed.
The close is started inside that window (the check is wrapped to start it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tiermem.client import Client, RecordKind
from tiermem.server.app import Daemon
from tiermem.server.scratch.service import CF


def test_nothing_is_stored_for_a_session_closed_mid_append(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon(agent={"scratch": {"mode": "write_through"}})
    scratch = daemon.scratch
    with Client(daemon.address, timeout_s=30) as c, Client(daemon.address, timeout_s=30) as other:
        s = c.sessions.open(label="w")
        closing: list[threading.Thread] = []
        real = scratch._still_open

        def check_then_close(session: str) -> None:
            real(session)
            if not closing:  # another client closes the session right now
                t = threading.Thread(target=other.sessions.close, args=(s.id,))
                t.start()
                closing.append(t)
                time.sleep(0.3)  # long enough for the close to run, if it can

        scratch._still_open = check_then_close  # type: ignore[method-assign]
        try:
            c.scratch.append(s.id, RecordKind.THOUGHT, "in flight")
        finally:
            scratch._still_open = real  # type: ignore[method-assign]
        closing[0].join(10)
        assert c.sessions.list() == []
        assert list(scratch.rocks.scan(CF, b"b" + s.id.encode() + b"\x00")) == []
        assert c.scratch.stats().stored_records == 0
