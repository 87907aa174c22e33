"""The data plane as one part of the daemon: lease and ticket tables, the byte
budget they share, the shared-memory plane, bulk transfers and the TCP server.
``server.app.Daemon`` builds one, starts it after recovery and stops it first
on shutdown; the background worker calls ``reap_expired``.

The bulk channel is plaintext. A daemon whose gRPC listener serves TLS
(``security.tls``) therefore offers clients no TCP bulk address, neither in
Hello nor in a ticket: a connection there would carry the client's bearer
token and the values' bytes in the clear, beside the channel TLS protects.
Only the channel's Unix socket (this host's network namespace alone reaches
it) and shared memory stay offered; clients elsewhere move bytes over gRPC.
Nor does it listen on the TCP port (``BulkServer.start(tcp=False)``): a
listener told to no one would still take tokens from whoever finds it.
(TLS on the bulk channel itself would lift this; it is not built.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tiermem.dataplane_wire import VERSION, host_id
from tiermem.server.config import Config
from tiermem.server.dataplane.bulk import BulkServer, SessionHandler
from tiermem.server.dataplane.limits import ByteBudget
from tiermem.server.dataplane.shm import ArenaInfo, SharedMemoryPlane
from tiermem.server.dataplane.transfers import BulkTransfers
from tiermem.server.metrics import Metrics
from tiermem.server.model import ObjectKey, Tier
from tiermem.server.services.leases import Lease, LeaseTable
from tiermem.server.services.objects import ObjectService
from tiermem.server.tiers.dram import DramEngine


@dataclass(frozen=True, slots=True)
class Hello:
    host_id: str
    arena: ArenaInfo | None
    bulk_address: str
    arena_min_bytes: int
    inline_max_bytes: int
    default_lease_ttl_ms: int
    max_lease_ttl_ms: int
    max_batch_objects: int
    max_object_bytes: int
    bulk_protocol: int
    bulk_unix_address: str


class DataPlane:
    def __init__(self, objects: ObjectService, config: Config, metrics: Metrics) -> None:
        dp = config.dataplane
        self._config = config
        self._metrics = metrics
        self.budget = ByteBudget(int(dp.max_pending_bytes), "dataplane.max_pending_bytes")
        self.leases = LeaseTable(dp.max_leases, observe=self._lease_ended)
        self.shm = SharedMemoryPlane(objects, dp, self.leases, self.budget, metrics)
        self.transfers = BulkTransfers(objects, dp, self.budget, metrics)
        dram = objects.store.memory.get(Tier.DRAM)
        if isinstance(dram, DramEngine) and dp.bulk.sendfile:
            self.transfers.arena = dram  # large values leave by sendfile from its file
        self._bulk = BulkServer(self.transfers, dp.bulk, metrics) if dp.bulk.enabled else None
        metrics.dataplane_leases_active.set_function(lambda: len(self.leases))
        metrics.bulk_tickets_active.set_function(lambda: len(self.transfers.tickets))

    def serve_sessions(self, handler: SessionHandler) -> None:
        """Offer bulk sessions (``api.bulk_session``) when the channel is on,
        ``dataplane.bulk.sessions`` is set and a session can be authenticated.
        A session authenticates by its bearer token; a daemon whose callers
        prove who they are by a client certificate (mutual TLS) and have no
        token has nothing to check on the plaintext bulk channel, so it offers
        no sessions: its clients ask for tickets over the gRPC channel (where
        their certificate is checked) and only present them on the bulk one.
        Under TLS only the Unix socket is offered (``offers_tcp``), so
        sessions are opened there alone."""
        cfg = self._config
        mtls_only = cfg.security.tls.client_ca_file is not None and not cfg.security.tokens
        if self._bulk is not None and cfg.dataplane.bulk.sessions and not mtls_only:
            self._bulk.sessions = handler

    def fill_from(self, fill: Callable[[Sequence[ObjectKey], str | None], None]) -> None:
        """Reads of objects not held here first bring them in with ``fill`` (the
        remote tier's ``RemoteService.fill``)."""
        self.shm.fill = fill
        self.transfers.fill = fill

    def _lease_ended(self, lease: Lease, how: str) -> None:
        self._metrics.dataplane_lease_ends.labels(lease.kind.value, how).inc()

    @property
    def offers_tcp(self) -> bool:
        """Whether clients are told the bulk channel's TCP address: not under
        TLS (see the module's docstring)."""
        return not self._config.security.tls.enabled

    def start(self) -> None:
        if self._bulk is not None:
            tcp = self._bulk.start(tcp=self.offers_tcp)
            # where tickets send their holders: under TLS the Unix socket ("" when
            # the system has none: then no tickets are issued, clients use gRPC)
            self.transfers.address = tcp if self.offers_tcp else self._bulk.unix_address

    def hello(self) -> Hello:
        dp = self._config.dataplane
        arena = self.shm.info()
        return Hello(
            host_id=host_id(),
            arena=arena,
            bulk_address=self.transfers.address if self.offers_tcp else "",
            arena_min_bytes=self.shm.arena.arena_min_bytes if self.shm.arena is not None else 0,
            inline_max_bytes=int(dp.inline_max_bytes),
            default_lease_ttl_ms=int(dp.lease_ttl_s * 1000),
            max_lease_ttl_ms=int(dp.max_lease_ttl_s * 1000),
            max_batch_objects=dp.max_batch_objects,
            max_object_bytes=int(self._config.limits.max_object_bytes),
            bulk_protocol=VERSION,
            bulk_unix_address=self._bulk.unix_address if self._bulk is not None else "",
        )

    def reap_expired(self) -> int:
        """End expired leases and tickets, giving back what they held."""
        return self.leases.reap_expired() + self.transfers.reap_expired()

    def stop(self) -> None:
        if self._bulk is not None:
            self._bulk.stop()
        self.transfers.close()
        self.leases.end_all()
