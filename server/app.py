"""Composition root: builds the daemon from its config. The CLI and the tests
both use ``Daemon.start()`` / ``Daemon.stop()``; nothing reaches into privates.

Start-up order: open storage and tier engines, start the gRPC server with the
readiness gate closed (health NOT_SERVING, other RPCs UNAVAILABLE), recover the
catalog, then open the gate, start background work and the metrics endpoint.
Shutdown reverses it: health NOT_SERVING, drain RPCs for the grace period, stop
background work, sync and close storage.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry, start_http_server

from tiermem.server.api.access import AccessInterceptor
from tiermem.server.api.admin import AdminServicer
from tiermem.server.api.integrity import IntegrityServicer
from tiermem.server.api.interceptor import ServerInterceptor
from tiermem.server.api.listeners import bind_unix_socket, server_credentials
from tiermem.server.api.objects import ObjectServicer
from tiermem.server.catalog.catalog import Catalog
from tiermem.server.config import Config
from tiermem.server.metrics import Metrics
from tiermem.server.model import Tier
from tiermem.server.services.admin import AdminService
from tiermem.server.services.background import BackgroundWorker
from tiermem.server.services.expiry import Expirer
from tiermem.server.services.integrity import IntegrityService
from tiermem.server.services.mover import Mover
from tiermem.server.services.objects import ObjectService
from tiermem.server.services.recovery import RecoveryReport, recover
from tiermem.server.services.store import Store
from tiermem.server.storage.rocks import RocksStore
from tiermem.server.tiers.base import MemoryTierEngine
from tiermem.server.tiers.dram import DramEngine
from tiermem.server.tiers.hbm import HbmEngine
from tiermem.server.tiers.ssd import SsdEngine
from tiermem.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    integrity_pb2,
    integrity_pb2_grpc,
    object_pb2,
    object_pb2_grpc,
)

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    object_pb2.DESCRIPTOR.services_by_name["ObjectService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    integrity_pb2.DESCRIPTOR.services_by_name["IntegrityService"].full_name,
)


class Daemon:
    """One tiermem daemon. ``start()`` returns once it serves; ``stop()`` is idempotent."""

    def __init__(self, config: Config, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.metrics = Metrics(registry)
        self.address = ""
        self.unix_address = ""
        self.metrics_address = ""
        self.recovery: RecoveryReport | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._server: grpc.Server | None = None
        self._metrics_server: Any = None
        self._health = health.HealthServicer()
        self._background: BackgroundWorker | None = None
        self._rocks: RocksStore | None = None
        self._engines: list[Any] = []

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        """Open storage, recover, serve. On failure everything opened is closed again."""
        try:
            self._start()
        except BaseException:
            self.stop(grace_s=0)
            raise

    def _start(self) -> None:
        cfg = self.config
        data_dir = Path(cfg.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self._rocks = RocksStore(data_dir / "catalog")
        memory: dict[Tier, MemoryTierEngine] = {}
        if cfg.tiers.hbm.enabled:
            memory[Tier.HBM] = HbmEngine(cfg.tiers.hbm.capacity_bytes, cfg.tiers.hbm.device)
        if cfg.tiers.dram.enabled:
            dram = cfg.tiers.dram
            memory[Tier.DRAM] = DramEngine(dram.capacity_bytes, dram.arena_min_bytes, dram.prefault)
        ssd_cfg = cfg.tiers.ssd
        ssd = SsdEngine(
            self._rocks,
            data_dir / "segments",
            ssd_cfg.capacity_bytes,
            ssd_cfg.inline_max_bytes,
            ssd_cfg.segment_bytes,
            ssd_cfg.fsync,
        )
        self._engines = [*memory.values(), ssd]
        catalog = Catalog(self._rocks)
        self.store = Store(cfg, catalog, memory, ssd, self.metrics)
        self.mover = Mover(self.store)
        self.objects = ObjectService(self.store, self.mover)
        self.admin = AdminService(self.store)
        self.expirer = Expirer(self.store)
        self.integrity = IntegrityService(self.store)
        self._start_grpc()
        self.recovery = recover(catalog, ssd, self.store.damage)
        self.metrics.recovery_seconds.set(self.recovery.seconds)
        for name in cfg.namespaces:
            catalog.ensure_namespace(name)
        self.metrics.watch_state(self.admin.usage_snapshot)
        self.metrics.watch_catalog_memory(self._rocks.memory_bytes)
        self._background = BackgroundWorker(
            cfg.background, self.mover, self.expirer, self.objects.pressure
        )
        self._background.start()
        self._start_metrics()
        self._ready.set()
        for name in ("", *SERVICE_NAMES):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("tiermem serving on %s (metrics on %s)", self.address, self.metrics_address or "-")

    def _start_grpc(self) -> None:
        cfg = self.config.server
        options = [
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", cfg.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="rpc"),
            interceptors=[
                ServerInterceptor(self.metrics, self._ready),
                AccessInterceptor(self.config.security, self.config.limits, self.metrics),
            ],
            options=options,
            maximum_concurrent_rpcs=cfg.max_concurrent_rpcs,
        )
        object_pb2_grpc.add_ObjectServiceServicer_to_server(
            ObjectServicer(self.objects, cfg.chunk_bytes), server
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(self.admin), server)
        integrity_pb2_grpc.add_IntegrityServiceServicer_to_server(
            IntegrityServicer(self.integrity), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        for name in ("", *SERVICE_NAMES):
            self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        host, _, port = cfg.listen.rpartition(":")
        credentials = server_credentials(self.config.security.tls)
        if credentials is None:
            bound = server.add_insecure_port(cfg.listen)
        else:
            bound = server.add_secure_port(cfg.listen, credentials)
        if bound == 0:
            raise OSError(f"cannot listen on {cfg.listen}")
        self.address = f"{host}:{bound}" if port == "0" else cfg.listen
        # The socket file is created with no permissions beyond the configured
        # mode (umask during bind), then set to exactly that mode.
        umask = os.umask(0o777 & ~cfg.unix_socket_mode) if cfg.unix_socket else None
        try:
            if cfg.unix_socket:
                self.unix_address = bind_unix_socket(server, cfg.unix_socket)
            server.start()
        finally:
            if umask is not None:
                os.umask(umask)
        if cfg.unix_socket:
            os.chmod(cfg.unix_socket, cfg.unix_socket_mode)
        self._server = server

    def _start_metrics(self) -> None:
        listen = self.config.metrics.listen
        if not listen:
            return
        host, _, port = listen.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host, registry=self.metrics.registry)
        self._metrics_server = server
        self.metrics_address = f"{host}:{server.server_port}"

    def maintain(self, *, compact: bool = True) -> None:
        """Run one pass of background work now: watermark demotion, TTL expiry
        and (optionally) segment compaction. Safe while serving."""
        if self._background is None:
            raise RuntimeError("the daemon is not started")
        self._background.run_once(compact=compact)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until ``stop()`` ran; True if it did within the timeout."""
        return self._stopped.wait(timeout_s)

    def stop(self, grace_s: float | None = None) -> None:
        if self._stopped.is_set():
            return
        grace = self.config.server.shutdown_grace_s if grace_s is None else grace_s
        self._health.enter_graceful_shutdown()
        if self._server is not None:
            self._server.stop(grace).wait()
        if self._background is not None:
            self._background.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        for engine in self._engines:
            engine.close()
        if self._rocks is not None:
            self._rocks.close()
        self._ready.clear()
        self._stopped.set()
        log.info("tiermem stopped")

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
