import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.helpers import REPO, DaemonProcess
from tiermem.server.app import Daemon


def cli(address: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tiermem.cli.main", *args, "--addr", address],
        input=stdin, capture_output=True, cwd=REPO, timeout=60,
    )  # fmt: skip


def test_cli_put_get_stat_ls_rm_stats(tmp_path: Path) -> None:
    proc = DaemonProcess(tmp_path / "data")
    try:
        address = proc.start()
        src = tmp_path / "in.bin"
        src.write_bytes(b"hello from a file")
        assert cli(address, "put", "greeting", str(src)).returncode == 0
        assert (
            cli(address, "put", "-k", "scratch", "note", "-", stdin=b"stdin bytes").returncode == 0
        )
        assert cli(address, "get", "greeting").stdout == b"hello from a file"
        out = tmp_path / "out.bin"
        assert cli(address, "get", "-k", "scratch", "note", "-o", str(out)).returncode == 0
        assert out.read_bytes() == b"stdin bytes"
        stat = cli(address, "stat", "greeting").stdout.decode()
        assert "size:       17 bytes" in stat and "tier:       SSD" in stat
        listing = cli(address, "ls").stdout.decode()
        assert "greeting" in listing and "note" in listing
        stats = cli(address, "stats").stdout.decode()
        assert "DRAM" in stats and "SSD" in stats and "BLOB" in stats
        assert cli(address, "rm", "greeting").returncode == 0
        missing = cli(address, "get", "greeting")
        assert missing.returncode == 1 and b"NOT_FOUND" in missing.stderr
    finally:
        proc.stop()


def test_health_is_serving_and_reflection_lists_services(daemon: Daemon) -> None:
    with grpc.insecure_channel(daemon.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "tiermem.v1.ObjectService", "tiermem.v1.AdminService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(refl.ServerReflectionInfo(iter([request]), timeout=5))
        names = {s.name for s in reply.list_services_response.service}
        assert {"tiermem.v1.ObjectService", "tiermem.v1.AdminService"} <= names
    daemon.stop(grace_s=0)
    with grpc.insecure_channel(daemon.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        try:
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            raise AssertionError("health answered after stop")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE


def test_serve_help_and_bad_config_exit_codes(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tiermem.cli.main", "serve", "--help"], capture_output=True, cwd=REPO
    )
    assert run.returncode == 0 and b"--data-dir" in run.stdout and b"--listen" in run.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[tiers.dram]\nhigh_watermark = 7\n")
    run = subprocess.run(
        [sys.executable, "-m", "tiermem.cli.main", "serve", "--config", str(bad)],
        capture_output=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2 and b"high_watermark" in run.stderr
