"""gRPC health through a daemon's life: NOT_SERVING while it recovers its
catalog (other RPCs UNAVAILABLE, tiermem_ready 0), SERVING once ready,
NOT_SERVING again as soon as shutdown starts (seen by a Watch stream, as load
balancers see it); `tiermem health` exits 0 only while SERVING."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

import tiermem.server.app as app
from tests.conftest import daemon_config
from tiermem.cli.main import main
from tiermem.cli.promtext import fetch
from tiermem.v1 import admin_pb2, admin_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _wait_for(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def test_health_through_start_recovery_and_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recovering = threading.Event()
    finish_recovery = threading.Event()
    real_recover = app.recover

    def slow_recover(*args: Any) -> Any:
        recovering.set()
        finish_recovery.wait(60)
        return real_recover(*args)

    monkeypatch.setattr(app, "recover", slow_recover)
    config = daemon_config(tmp_path / "d", metrics={"listen": "127.0.0.1:0"})
    daemon = app.Daemon(config, registry=CollectorRegistry())
    starter = threading.Thread(target=daemon.start)
    starter.start()
    try:
        assert recovering.wait(60)
        with grpc.insecure_channel(daemon.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "tiermem.v1.ObjectService"):
                reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == NOT_SERVING
            with pytest.raises(grpc.RpcError) as err:
                admin_pb2_grpc.AdminServiceStub(channel).Stats(admin_pb2.StatsRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "recovering" in (err.value.details() or "")
        assert fetch(daemon.metrics_address).total("tiermem_ready") == 0
        assert main(["health", "--addr", daemon.address]) == 1
    finally:
        finish_recovery.set()
        starter.join(60)

    assert daemon.ready
    assert main(["health", "--addr", daemon.address]) == 0
    assert main(["health", "--addr", daemon.address, "--service", "tiermem.v1.AdminService"]) == 0
    assert main(["health", "--addr", daemon.address, "--service", "no.such.Service"]) == 1
    assert fetch(daemon.metrics_address).total("tiermem_ready") == 1

    with grpc.insecure_channel(daemon.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=30
        )
        assert next(watch).status == SERVING
        stopper = threading.Thread(target=daemon.stop, kwargs={"grace_s": 2.0})
        stopper.start()
        assert next(watch).status == NOT_SERVING
        # Still draining: the metrics endpoint says the daemon is not ready.
        assert fetch(daemon.metrics_address).total("tiermem_ready") == 0
        stopper.join(30)
    assert main(["health", "--addr", daemon.address, "--timeout", "2"]) == 1
