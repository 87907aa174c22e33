"""Every RPC has a request id: the client's x-request-id or a generated one.
The daemon returns it as trailing metadata, puts it on every log line the RPC
writes (JSON logs), and the client's errors carry it, so an operator can go
from a failed call to its log lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tiermem.client import Client, Kind
from tiermem.client.errors import ChecksumError
from tiermem.server.app import Daemon
from tiermem.server.logs import configure
from tiermem.v1 import admin_pb2, admin_pb2_grpc


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    configure("INFO", True, stream)
    try:
        yield stream
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def _damage(segments: Path, pattern: bytes) -> None:
    for path in segments.iterdir():
        raw = path.read_bytes()
        at = raw.find(pattern)
        if at >= 0:
            with path.open("r+b") as f:
                f.seek(at + len(pattern) // 2)
                f.write(b"\x00")
            return
    raise AssertionError("value not found in any segment")


def test_ids_are_returned_logged_and_carried_by_client_errors(
    daemon: Daemon, json_logs: io.StringIO
) -> None:
    with grpc.insecure_channel(daemon.address) as channel:
        stats = admin_pb2_grpc.AdminServiceStub(channel).Stats
        _, call = stats.with_call(
            admin_pb2.StatsRequest(), metadata=(("x-request-id", "client-chosen-1"),), timeout=10
        )
        assert ("x-request-id", "client-chosen-1") in tuple(call.trailing_metadata())
        _, call = stats.with_call(admin_pb2.StatsRequest(), timeout=10)
        generated = dict(call.trailing_metadata())["x-request-id"]
        assert len(generated) == 16 and generated != "client-chosen-1"

    value = b"\xab" * 200_000  # larger than inline_max_bytes: lives in a segment file
    with Client(daemon.address) as c:
        c.put(Kind.BLOB, "precious", value)
        _damage(Path(daemon.config.data_dir) / "segments", value)
        with pytest.raises(ChecksumError) as err:
            c.get(Kind.BLOB, "precious")
    rid = err.value.request_id
    assert rid and err.value.code == "DATA_LOSS"
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    damaged = [e for e in lines if "data damaged" in e["msg"]]
    assert damaged, lines
    assert damaged[0]["request_id"] == rid
    assert damaged[0]["level"] == "ERROR" and "precious" in damaged[0]["msg"]
    assert (
        daemon.metrics.registry.get_sample_value(
            "tiermem_checksum_failures_total", {"where": "ssd"}
        )
        == 1
    )
    # Background work has no request: its lines say "-".
    assert all(e["request_id"] in ("-", rid) for e in lines)
