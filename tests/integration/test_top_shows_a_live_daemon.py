"""`tiermem top` renders live frames from a daemon's metrics endpoint: tiers,
objects per tier and kind, RPC rates with latency percentiles, data paths."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.prometheus import free_port
from tiermem.cli.main import main
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon


def test_top_prints_frames_with_tiers_kinds_and_rpcs(
    make_daemon: Callable[..., Daemon], capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = make_daemon(metrics={"listen": "127.0.0.1:0"})
    with Client(daemon.address, fast_paths=()) as c:  # counts gRPC RPCs
        c.put(Kind.BLOB, "b", b"x" * 100_000)
        c.put(Kind.KV_BLOCK, "k", b"y" * 65536)
        for _ in range(3):
            c.get(Kind.BLOB, "b")
    assert main(["top", "--metrics-addr", daemon.metrics_address, "--once"]) == 0
    frame = capsys.readouterr().out
    assert "READY" in frame and "averages since start" in frame
    rows = {" ".join(line.split()[:2]): line.split() for line in frame.splitlines() if line}
    assert rows["SSD BLOB"][2] == "1"  # one copy
    assert rows["DRAM KV_BLOCK"][2] == "1"
    assert "ObjectService/Get" in frame and "ObjectService/Put" in frame
    data_paths = frame.split("DATA PATH", 1)[1].splitlines()[1:]
    assert data_paths[0].split()[0] == "grpc"

    argv = [
        "top",
        "--metrics-addr",
        daemon.metrics_address,
        "--iterations",
        "2",
        "--interval",
        "0.1",
    ]
    assert main(argv) == 0
    frames = capsys.readouterr().out
    assert frames.count("tiermem ") == 2 and "rates over" in frames


def test_top_and_client_commands_fail_clearly(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    assert main(["top", "--metrics-addr", f"127.0.0.1:{port}", "--once"]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["get", "missing", "--addr", daemon.address]) == 1
    err = capsys.readouterr().err
    assert "NOT_FOUND" in err and "(request id " in err
