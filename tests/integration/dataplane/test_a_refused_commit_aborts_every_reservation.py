"""A shared-memory commit refused for a checksum mismatch aborts every write
lease of its batch, each in isolation: an abort that raises (logged) neither
keeps the later reservations held nor turns the DATA_LOSS answer into
INTERNAL. Before, the first abort that raised ended the pass: the later
leases were already out of the table, so their arena extents stayed
reserved for good, and the client got INTERNAL."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.dataplane.helpers import MiB, check, dataplane_stub, header, rpc_error
from tiermem.server.app import Daemon
from tiermem.server.model import Tier
from tiermem.server.tiers.base import Reservation
from tiermem.v1 import common_pb2, dataplane_pb2


def test_an_abort_that_raises_keeps_neither_the_others_nor_the_answer(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    dram = daemon.store.memory[Tier.DRAM]
    before = dram.used_bytes
    real = daemon.objects.abort
    aborts: list[int] = []

    def abort(reservation: Reservation) -> None:
        aborts.append(reservation.size)
        if len(aborts) == 1:
            raise OSError("the first abort failed")
        real(reservation)

    with dataplane_stub(daemon) as stub:
        leases = stub.Reserve(
            dataplane_pb2.ReserveRequest(objects=[header(f"w{i}", MiB) for i in range(3)])
        ).leases
        monkeypatch.setattr(daemon.objects, "abort", abort)
        bad = common_pb2.Checksum(algorithm=common_pb2.XXH3_64, value=1)
        items = [dataplane_pb2.CommitItem(lease_id=x.lease_id, checksum=bad) for x in leases]
        err = rpc_error(stub.Commit, dataplane_pb2.CommitRequest(items=items))
    check(err, grpc.StatusCode.DATA_LOSS, "nothing was stored")
    assert aborts == [MiB] * 3
    # only the failed abort's extent (rounded up to the arena's alignment) is left
    assert before + MiB <= dram.used_bytes < before + 2 * MiB
    assert daemon.dataplane is not None
    assert len(daemon.dataplane.leases) == 0
