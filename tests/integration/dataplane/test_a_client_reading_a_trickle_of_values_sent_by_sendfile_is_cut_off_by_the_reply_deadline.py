"""With ``dataplane.bulk.sendfile`` on, a bulk get whose client keeps reading its
reply a few KiB at a time is cut off once the whole reply has taken
``max(io_timeout_s, bytes / min_send_bytes_per_s)`` (plus up to two send
timeouts), as a reply sent from memory is
(``test_a_client_reading_a_trickle_is_cut_off_by_the_reply_deadline``): the
connection is closed short of the value, the get counts as broken and its read
lease and byte budget are given back.

Before, a value sent by sendfile was bounded per send only: one sendfile(2)
call moves the value in pipe-sized pieces, each with a fresh send timeout, so
a trickle kept the call (and the connection, lease and budget) going for as
long as the client kept reading, here over a minute for 16 MiB.

Only sendfile sends from the DRAM arena's file, so the value is put in DRAM
(an SSD-resident value leaves from memory, the twin's path). With these
settings the cut comes after about 8 s; the test waits up to 40 s for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.integration.dataplane.helpers import (
    dataplane_stub,
    key,
    wait_for,
)
from tests.integration.dataplane.trickle import (
    IO_TIMEOUT_S,
    MIN_RATE,
    SIZE,
    present,
    trickle,
)
from tiermem.client import Client, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.v1 import dataplane_pb2


def test_a_get_sent_by_sendfile_read_as_a_trickle_is_cut_off_and_releases_its_read(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon(
        background={"migrate_interval_s": 3600},  # the value stays in DRAM
        dataplane={
            "bulk": {
                "sendfile": True,
                "io_timeout_s": IO_TIMEOUT_S,
                "min_send_bytes_per_s": MIN_RATE,
                # small kernel buffers, so the trickle is what the sends wait on
                "send_buffer_bytes": 64 << 10,
            }
        },
    )
    dp = daemon.dataplane
    assert dp is not None
    with Client(daemon.address, timeout_s=30) as c:
        c.put(Kind.KV_BLOCK, "big", b"\x07" * SIZE, profile=Profile(preferred_tier=Tier.DRAM))
        assert c.stat(Kind.KV_BLOCK, "big").tier == Tier.DRAM
    sendfile_calls: list[int] = []  # counts asked (a call can outlast the trickle)
    real_sendfile = os.sendfile

    def counting_sendfile(out: int, in_: int, offset: int | None, count: int) -> int:
        sendfile_calls.append(count)
        return real_sendfile(out, in_, offset, count)

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginGet(dataplane_pb2.BeginGetRequest(keys=[key("big")]))
    got, seconds, cut = trickle(present(ticket.address, ticket.ticket_id))
    assert sendfile_calls, "the value did not leave by sendfile"
    assert cut, f"still sending after {seconds:.0f} s ({got} of {SIZE} bytes read)"
    assert got < SIZE
    wait_for(lambda: dp.budget.used_bytes == 0, "the cut get to give back its bytes")
    assert daemon.store.leases.active == 0
    broken = daemon.metrics.bulk_transfers.labels("get", "broken")._value.get()
    assert broken == 1
