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
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry, start_http_server

from tiermem import __version__
from tiermem.dataplane_wire import OP_LOOKUP
from tiermem.placement.access import AccessModel
from tiermem.server.api.access import AccessInterceptor
from tiermem.server.api.admin import AdminServicer
from tiermem.server.api.agent import OperatorServicer, ScratchServicer, SessionServicer
from tiermem.server.api.blobs import BlobServicer
from tiermem.server.api.bulk_session import BulkSessions, UnaryOp, object_ops, shm_ops
from tiermem.server.api.dataplane import (
    DataPlaneServicer,
)
from tiermem.server.api.integrity import IntegrityServicer
from tiermem.server.api.interceptor import ServerInterceptor
from tiermem.server.api.kv import KvServicer, lookup_prefix_reply
from tiermem.server.api.listeners import bind_unix_socket, server_credentials
from tiermem.server.api.objects import ObjectServicer
from tiermem.server.api.placement import PlacementServicer
from tiermem.server.api.vectors import VectorServicer
from tiermem.server.catalog.catalog import Catalog
from tiermem.server.config import Config
from tiermem.server.dataplane.plane import DataPlane
from tiermem.server.embedding.base import make_embedder
from tiermem.server.metrics import Metrics
from tiermem.server.model import Tier
from tiermem.server.operators.builtins import register_builtins
from tiermem.server.operators.collections import CollectionIndexes
from tiermem.server.operators.registry import OperatorRegistry
from tiermem.server.operators.runner import OperatorRunner
from tiermem.server.scratch.memory_index import FaissMemoryIndex
from tiermem.server.scratch.service import ScratchService
from tiermem.server.services.admin import AdminService
from tiermem.server.services.background import BackgroundWorker
from tiermem.server.services.blobs import BlobService
from tiermem.server.services.expiry import Expirer
from tiermem.server.services.integrity import IntegrityService
from tiermem.server.services.kv import KvService
from tiermem.server.services.migrator import Migrator
from tiermem.server.services.mover import Mover
from tiermem.server.services.objects import ObjectService
from tiermem.server.services.periodic import Periodic
from tiermem.server.services.placement import PlacementService
from tiermem.server.services.recovery import RecoveryReport, recover
from tiermem.server.services.remote import RemoteService, daemon_id
from tiermem.server.services.store import Store
from tiermem.server.services.vectors import VectorService
from tiermem.server.sessions.cleanup import Freed, Usage
from tiermem.server.sessions.guard import SessionGuard
from tiermem.server.sessions.service import SessionService
from tiermem.server.storage.rocks import RocksStore
from tiermem.server.tiers.base import MemoryTierEngine
from tiermem.server.tiers.dram import DramEngine
from tiermem.server.tiers.hbm import HbmEngine
from tiermem.server.tiers.remote import RemoteTier, make_backend
from tiermem.server.tiers.ssd import SsdEngine
from tiermem.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    blobs_pb2,
    blobs_pb2_grpc,
    dataplane_pb2,
    dataplane_pb2_grpc,
    integrity_pb2,
    integrity_pb2_grpc,
    kv_pb2,
    kv_pb2_grpc,
    object_pb2,
    object_pb2_grpc,
    operators_pb2,
    operators_pb2_grpc,
    placement_pb2,
    placement_pb2_grpc,
    scratch_pb2,
    scratch_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    vectors_pb2,
    vectors_pb2_grpc,
)

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    object_pb2.DESCRIPTOR.services_by_name["ObjectService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    dataplane_pb2.DESCRIPTOR.services_by_name["DataPlaneService"].full_name,
    sessions_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name,
    scratch_pb2.DESCRIPTOR.services_by_name["ScratchService"].full_name,
    operators_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name,
    kv_pb2.DESCRIPTOR.services_by_name["KvService"].full_name,
    placement_pb2.DESCRIPTOR.services_by_name["PlacementService"].full_name,
    vectors_pb2.DESCRIPTOR.services_by_name["VectorService"].full_name,
    blobs_pb2.DESCRIPTOR.services_by_name["BlobService"].full_name,
    integrity_pb2.DESCRIPTOR.services_by_name["IntegrityService"].full_name,
)


class Daemon:
    """One tiermem daemon. ``start()`` returns once it serves; ``stop()`` is idempotent."""

    def __init__(self, config: Config, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.metrics = Metrics(registry, version=__version__)
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
        self._migrator: Migrator | None = None
        self._rocks: RocksStore | None = None
        self._engines: list[Any] = []
        self.dataplane: DataPlane | None = None
        #: set with the data plane (a start that failed before may have neither)
        self.bulk_sessions: BulkSessions | None = None
        self._reaper: Periodic | None = None
        self._vectors_started = False
        self._blobs_started = False
        #: the remote tier's service when ``tiers.remote.enabled``
        self.remote: RemoteService | None = None

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
            hbm = cfg.tiers.hbm
            memory[Tier.HBM] = HbmEngine(
                hbm.capacity_bytes,
                hbm.device,
                kv_block_bytes=hbm.kv_block_bytes,
                kv_pool_fraction=hbm.kv_pool_fraction,
                staging_buffers=hbm.staging_buffers,
            )
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
        pcfg = cfg.placement
        access = AccessModel(
            half_life_s=pcfg.rate_half_life_s, session_half_life_s=pcfg.session_rate_half_life_s
        )
        catalog = Catalog(self._rocks, access, pcfg.recent_keys)
        remote_tier = None
        if cfg.tiers.remote.enabled:
            # connects on first use: the daemon serves its local tiers while the store is down
            remote_tier = RemoteTier(
                cfg.tiers.remote,
                lambda: make_backend(cfg.tiers.remote),
                self.metrics,
                lambda: catalog.remote_bytes,
                daemon_id=daemon_id(self._rocks),
            )
            self._engines.append(remote_tier)
        self.store = Store(cfg, catalog, memory, ssd, self.metrics, remote_tier)
        self.mover = Mover(self.store)
        self.placement = PlacementService(self.store, self.mover, pcfg)
        self.objects = ObjectService(self.store, self.mover, self.placement)
        self.admin = AdminService(self.store, self.placement)
        self.kv = KvService(self.store, self.objects, self.mover, cfg.kv, self.placement)
        if remote_tier is not None:
            self.remote = RemoteService(self.store, self.objects, self.placement, cfg.tiers.remote)
            self.kv.remote = self.remote
        self.expirer = Expirer(self.store)
        store = self.store
        self.metrics.leases_active.set_function(lambda: store.leases.active)
        self.dataplane = DataPlane(self.objects, cfg, self.metrics)
        kv = self.kv
        plane = self.dataplane
        #: requests on the bulk channel without a gRPC call each (by op)
        self.bulk_sessions = BulkSessions(
            plane.transfers,
            self.store.guard,
            cfg,
            self.metrics,
            unary={
                OP_LOOKUP: UnaryOp(
                    "/tiermem.v1.KvService/LookupPrefix",
                    kv_pb2.LookupPrefixRequest,
                    lambda _owner, acting, request: lookup_prefix_reply(kv, acting, request),
                ),
                **shm_ops(plane),
                **object_ops(self.objects),
            },
        )
        self.dataplane.serve_sessions(self.bulk_sessions.serve)
        if self.remote is not None:
            self.dataplane.fill_from(self.remote.fill)
            self.dataplane.shm.remote = self.remote
        self._build_agent_memory(data_dir)
        self.vectors = VectorService(
            cfg.vectors, self.store, data_dir / "vectors", cfg.server.max_message_bytes - 65536
        )
        self.admin.usage_sources.append(self.vectors.usage)
        # sessions free the collections they own; vector.topk searches collections too
        vectors = self.vectors
        self.sessions.cleanup.register_callable(
            "vectors",
            lambda session: Freed(*vectors.drop_session_sized(session)),
            usage=lambda session: Usage(vectors.session_usage(session)),
        )
        self.operators.services["indexes"] = CollectionIndexes(self.memory_index, self.vectors)
        self.blobs = BlobService(
            cfg.blobs,
            self.objects,
            data_dir,
            self.metrics,
            list_page_max=cfg.limits.list_page_max,
            embedder=self.embedder,
            sessions=self.sessions,
        )
        self.blobs.attach_dataplane(self.dataplane)
        self.sessions.cleanup.register_callable(
            "blobs", self.blobs.drop_session, usage=self.blobs.session_usage
        )
        self.integrity = IntegrityService(self.store)
        self._start_grpc()
        self._start_metrics()  # before recovery: tiermem_ready is 0 until it is done
        self.recovery = recover(catalog, ssd, self.store.damage)
        self._recover_agent_memory()
        self._record_recovery(self.recovery)
        for name in cfg.namespaces:
            catalog.ensure_namespace(name)
        self.vectors.open()
        self.vectors.start()
        self._vectors_started = True
        if cfg.blobs.enabled:
            self.blobs.open()
            self._blobs_started = True
        self.metrics.watch_state(self.admin.usage_snapshot)
        self.dataplane.start()
        self.metrics.watch_catalog_memory(self._rocks.memory_bytes)
        self._background = BackgroundWorker(
            cfg.background,
            self.mover,
            self.expirer,
            threading.Event(),  # put pressure wakes the migrator, not this worker
            reapers=[("dataplane leases", self.dataplane.reap_expired)],
        )
        self._background.start()
        self._migrator = Migrator(self.placement)
        self._migrator.start()
        if self.remote is not None:
            self.remote.start()
        self._ready.set()
        self.metrics.ready.set(1)
        for name in ("", *SERVICE_NAMES):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("tiermem serving on %s (metrics on %s)", self.address, self.metrics_address or "-")

    def _build_agent_memory(self, data_dir: Path) -> None:
        """Sessions, the write-back scratchpad and the operator registry (DESIGN.md §6)."""
        agent = self.config.agent
        self.sessions = SessionService(agent.sessions, self.store, self.metrics)
        self.objects.guard = SessionGuard(self.sessions)
        if self.remote is not None:  # which owners are sessions (private objects)
            self.remote.sessions = self.sessions
        self.embedder = make_embedder(agent.scratch.embedder)
        self.memory_index = FaissMemoryIndex(self.embedder.dim)
        self.scratch = ScratchService(
            agent.scratch,
            self.store.catalog.rocks,
            data_dir / "scratch-log",
            self.sessions,
            self.embedder,
            self.memory_index,
            self.metrics,
        )
        self.sessions.cleanup.register(self.scratch)
        scratch, sessions = self.scratch, self.sessions
        self.metrics.writeback_records.set_function(lambda: scratch.buffered()[0])
        self.metrics.writeback_bytes.set_function(lambda: scratch.buffered()[1])
        self.metrics.sessions_open.set_function(lambda: len(sessions.open_ids()))
        self.sessions.result_sink = self.scratch
        registry = OperatorRegistry()
        register_builtins(registry)
        if agent.operators.entry_points:
            registry.load_entry_points()
        services = {
            "scratch": self.scratch,
            "indexes": {"scratch": self.memory_index},
            "embedder": self.embedder,
        }
        self.operators = OperatorRunner(
            agent.operators, registry, self.sessions, services, self.metrics
        )

    def _recover_agent_memory(self) -> None:
        self.sessions.load()
        self.scratch.recover(self.sessions.known_ids(), self.sessions.open_ids())
        self.sessions.finish_interrupted()
        self.scratch.start()
        self._reaper = Periodic(
            "tiermem-session-reaper",
            self.config.agent.sessions.reap_interval_s,
            self.sessions.reap_due,
        )
        self._reaper.start()

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
                AccessInterceptor(
                    self.config.security, self.config.limits, self.metrics, self.store.guard
                ),
            ],
            options=options,
            maximum_concurrent_rpcs=cfg.max_concurrent_rpcs,
        )
        object_pb2_grpc.add_ObjectServiceServicer_to_server(
            ObjectServicer(self.objects, cfg.chunk_bytes), server
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(self.admin), server)
        if self.dataplane is not None:
            dataplane_pb2_grpc.add_DataPlaneServiceServicer_to_server(
                DataPlaneServicer(self.dataplane), server
            )
        sessions_pb2_grpc.add_SessionServiceServicer_to_server(
            SessionServicer(self.sessions), server
        )
        scratch_pb2_grpc.add_ScratchServiceServicer_to_server(
            ScratchServicer(self.scratch, self.config.agent.scratch.replay_page_records), server
        )
        operators_pb2_grpc.add_OperatorServiceServicer_to_server(
            OperatorServicer(self.operators), server
        )
        kv_pb2_grpc.add_KvServiceServicer_to_server(KvServicer(self.kv, cfg.chunk_bytes), server)
        placement_pb2_grpc.add_PlacementServiceServicer_to_server(
            PlacementServicer(self.placement, self.objects), server
        )
        if self.config.vectors.enabled:
            vectors_pb2_grpc.add_VectorServiceServicer_to_server(
                VectorServicer(self.vectors, self.sessions), server
            )
        if self.config.blobs.enabled:
            blobs_pb2_grpc.add_BlobServiceServicer_to_server(
                BlobServicer(self.blobs, cfg.chunk_bytes), server
            )
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
        # mode (umask during bind), then set to exactly that mode. Its folder is
        # made first, under the process's own umask (under the socket's, 0600,
        # it had no search bit and nothing inside it could be reached).
        if cfg.unix_socket:
            Path(cfg.unix_socket).parent.mkdir(parents=True, exist_ok=True)
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

    def _record_recovery(self, report: RecoveryReport) -> None:
        self.metrics.recovery_seconds.set(report.seconds)
        for outcome, count in (
            ("loaded", report.objects),
            ("purged_volatile", report.purged_volatile),
            ("missing_segment", report.missing_segment),
            ("truncated_segment", report.truncated_segment),
        ):
            self.metrics.recovery_objects.labels(outcome).set(count)

    def _start_metrics(self) -> None:
        listen = self.config.metrics.listen
        if not listen:
            return
        host, _, port = listen.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host, registry=self.metrics.registry)
        self._metrics_server = server
        self.metrics_address = f"{host}:{server.server_port}"

    def maintain(self, *, compact: bool = True) -> None:
        """Run one pass of background work now: queued promotions and a placement
        plan (moves applied), TTL expiry, (optionally) segment compaction, and wait
        for queued remote publishes and deletes. Safe while serving."""
        if self._background is None or self._migrator is None:
            raise RuntimeError("the daemon is not started")
        self._migrator.run_once()
        self._background.run_once(compact=compact)
        if self.remote is not None:
            self.remote.flush()

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
        self.metrics.ready.set(0)
        self._health.enter_graceful_shutdown()
        until = time.monotonic() + grace
        if self.bulk_sessions is not None:
            self.bulk_sessions.drain()  # in parallel with gRPC's grace period
        if self._server is not None:
            self._server.stop(grace).wait()
        if self.bulk_sessions is not None:
            self.bulk_sessions.wait_drained(max(0.0, until - time.monotonic()))
        if self._migrator is not None:
            self._migrator.stop()
        if self.remote is not None:
            self.remote.stop()
        if self.dataplane is not None:
            self.dataplane.stop()
        if self._background is not None:
            self._background.stop()
        if self._reaper is not None:
            self._reaper.stop()
            self.scratch.stop()  # flushes what is buffered
            self.operators.close()
        if self._vectors_started:
            self.vectors.close()
        if self._blobs_started:
            self.blobs.close()
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
