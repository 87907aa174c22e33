"""A bulk channel that refuses connections (the daemon died or moved) is a
BulkBroken, which the data plane answers by falling back to gRPC, never a raw
OSError escaping to the caller."""

import socket

import pytest

from tiermem.client.fastpath.bulk import BulkBroken, BulkPool


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_put_and_get_are_bulk_broken() -> None:
    pool = BulkPool(b"", io_timeout_s=2.0)
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(BulkBroken, match="failed"):
        pool.put(address, b"\0" * 16, [memoryview(b"data")])
    with pytest.raises(BulkBroken, match="failed"):
        pool.get(address, b"\0" * 16, [memoryview(bytearray(4))])
    pool.close()
