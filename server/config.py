"""Typed daemon configuration: one place, every field documented with its unit.

Sources, highest priority first: explicit overrides (CLI flags), ``TIERMEM_*``
environment variables (nested with ``__``, e.g. ``TIERMEM_TIERS__DRAM__CAPACITY_BYTES``),
a TOML file, then the defaults below. Sizes accept integers or strings such as
``"512MiB"``. Nothing is read at import time: call :func:`load_config`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tiermem.server.errors import InvalidArgument
from tiermem.server.model import validate_namespace

MiB = 1 << 20
GiB = 1 << 30


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ServerConfig(_Section):
    listen: str = "127.0.0.1:50051"
    """gRPC listen address HOST:PORT. Port 0 picks a free port (printed on start)."""
    max_workers: int = Field(default=32, ge=2, le=1024)
    """Threads serving RPCs. Each streaming RPC holds one for its duration."""
    max_concurrent_rpcs: int = Field(default=256, ge=1)
    """RPCs in flight at once; beyond this clients get RESOURCE_EXHAUSTED."""
    max_message_bytes: ByteSize = ByteSize(8 * MiB)
    """Largest single gRPC message accepted or sent (bytes)."""
    chunk_bytes: ByteSize = ByteSize(1 * MiB)
    """Chunk size of streamed object bytes (bytes); must be below max_message_bytes."""
    shutdown_grace_s: float = Field(default=5.0, ge=0)
    """Seconds in-flight RPCs get to finish on shutdown before they are cancelled."""
    unix_socket: str = ""
    """Path of an extra Unix-socket listener for local clients ("" = none); connect with
    ``unix:PATH``. A stale socket file is replaced at start."""
    unix_socket_mode: int = Field(default=0o600, ge=0, le=0o777)
    """File permissions of the Unix socket (octal in TOML: 0o660); only users it admits
    can connect."""
    switch_interval_s: float = Field(default=0.001, gt=0, le=0.1)
    """Python's thread switch interval (seconds) that ``tiermem serve`` sets: how long a
    thread may keep the interpreter lock while another waits for it. Python's default
    (0.005) makes a cheap RPC whose thread wakes from I/O wait behind every CPU-bound
    handler that many times over; shorter keeps small reads' tail latency low."""
    gc_freeze: bool = True
    """``tiermem serve`` moves every object alive once start-up is done (recovered
    catalog, indexes, modules) out of the garbage collector's reach (``gc.freeze``), so
    full collections do not walk them again and again while serving."""

    @model_validator(mode="after")
    def _chunks_fit(self) -> ServerConfig:
        if self.chunk_bytes + 4096 > self.max_message_bytes:
            raise ValueError("server.chunk_bytes must be at least 4 KiB below max_message_bytes")
        return self


class TierConfig(_Section):
    enabled: bool = True
    """Whether the tier is used at all."""
    capacity_bytes: ByteSize = ByteSize(1 * GiB)
    """Byte budget of the tier: a limit, never exceeded."""
    high_watermark: float = Field(default=0.90, gt=0, le=1)
    """Fraction of capacity at which background demotion starts."""
    low_watermark: float = Field(default=0.75, gt=0, le=1)
    """Fraction of capacity background demotion brings usage down to."""

    @model_validator(mode="after")
    def _ordered(self) -> TierConfig:
        if self.low_watermark > self.high_watermark:
            raise ValueError("low_watermark must not exceed high_watermark")
        return self


class HbmConfig(TierConfig):
    enabled: bool = False
    """HBM tier on/off. Off by default; on a CPU-only host it is emulated on the CPU."""
    capacity_bytes: ByteSize = ByteSize(256 * MiB)
    """Bytes of device memory the tier may use."""
    device: str = "auto"
    """torch device: "auto" (cuda:0 with CUDA, else emulated on "cpu"), "cpu" or "cuda:N"."""
    kv_block_bytes: ByteSize = ByteSize(0)
    """Size of one KV block slot (bytes) in the fixed-size block pool; 0 = no pool.
    Values larger than half a slot and up to a slot take one slot (O(1), no
    fragmentation); others use the extent allocator."""
    kv_pool_fraction: float = Field(default=0.75, ge=0, le=1)
    """Fraction of the HBM capacity given to the KV block pool when kv_block_bytes > 0."""
    staging_buffers: int = Field(default=4, ge=0, le=1024)
    """Pinned host buffers of one KV slot kept for uploads to the device (CUDA only)."""


class DramConfig(TierConfig):
    capacity_bytes: ByteSize = ByteSize(1 * GiB)
    """Bytes of host memory for object values (shared-memory arena plus small values)."""
    arena_min_bytes: ByteSize = ByteSize(16 * 1024)
    """Values at least this large live in the shared-memory arena; smaller ones in a map."""
    prefault: bool = True
    """Touch every arena page at start so first writes do not pay page faults."""


class SsdConfig(TierConfig):
    capacity_bytes: ByteSize = ByteSize(64 * GiB)
    """Bytes of disk the tier may use (segment files plus inline values)."""
    high_watermark: float = Field(default=0.95, gt=0, le=1)
    """Fraction of capacity at which CACHE objects are dropped to make room."""
    low_watermark: float = Field(default=0.90, gt=0, le=1)
    """Fraction of capacity dropping CACHE objects brings usage down to."""
    inline_max_bytes: ByteSize = ByteSize(64 * 1024)
    """Values up to this size are stored inline in RocksDB; larger ones in segment files."""
    segment_bytes: ByteSize = ByteSize(256 * MiB)
    """Target size of one append-only segment file (a larger value gets its own segment)."""
    compaction_live_ratio: float = Field(default=0.5, gt=0, lt=1)
    """A sealed segment whose live bytes fall below this fraction is compacted."""
    compaction_rate_bytes_per_s: ByteSize = ByteSize(64 * MiB)
    """Live bytes background compaction copies per second at most (0: no limit), so
    a pass over many segments does not hold a core and the disk for seconds at a
    time. A pass run on request (``Daemon.maintain``) is not paced."""
    compaction_unpaced_above: float = Field(default=0.8, gt=0, le=1)
    """Fraction of capacity at which background compaction stops pacing itself: the
    tier needs its space back sooner than the handlers need the core."""
    fsync: bool = True
    """fsync segment data and sync the RocksDB WAL before acknowledging DURABLE writes."""


# -- remote tier (issue 10): Redis Cluster or Mooncake Store, shared by daemons ---------
RemoteKind = Literal["KV_BLOCK", "VECTOR", "BLOB", "SCRATCH"]


class RedisClusterConfig(_Section):
    nodes: list[str] = ["127.0.0.1:7000"]
    """Startup nodes HOST:PORT of the Redis Cluster (any reachable one finds the rest)."""
    password: str = ""
    """AUTH password of the cluster ("" = none)."""
    ttl_s: int = Field(default=0, ge=0)
    """Expiry set on every value written (seconds; 0 = none: configure the cluster with
    maxmemory and an allkeys-lru policy so it evicts by itself)."""
    max_connections: int = Field(default=32, ge=1, le=4096)
    """Connections per cluster node."""


class MooncakeConfig(_Section):
    master: str = "127.0.0.1:50051"
    """RPC address HOST:PORT of mooncake_master."""
    metadata_server: str = "http://127.0.0.1:8080/metadata"
    """Transfer-engine metadata service (the master's HTTP metadata server)."""
    local_hostname: str = "127.0.0.1"
    """Address this daemon's transfer engine listens on and advertises (also exported as
    MC_TCP_BIND_ADDRESS unless that is already set)."""
    protocol: Literal["tcp", "rdma"] = "tcp"
    """Transfer protocol."""
    rdma_devices: str = ""
    """RDMA devices, comma-separated (protocol rdma)."""
    global_segment_bytes: ByteSize = ByteSize(0)
    """Memory this daemon contributes to the store (bytes). 0: storage nodes
    (`mooncake_client`) hold the data, so it survives this daemon."""
    local_buffer_bytes: ByteSize = ByteSize(256 * MiB)
    """Client transfer buffer (bytes); bounds the largest value and batch moved at once."""


class RemoteTierConfig(TierConfig):
    enabled: bool = False
    """Use a remote tier (off by default)."""
    capacity_bytes: ByteSize = ByteSize(64 * GiB)
    """Bytes of this daemon's objects served from the remote tier (planning and cost; the
    remote store itself evicts when its own memory fills)."""
    high_watermark: float = Field(default=0.95, gt=0, le=1)
    """Fraction of capacity above which the least valuable remote entries are forgotten."""
    low_watermark: float = Field(default=0.90, gt=0, le=1)
    """Fraction of capacity forgetting remote entries brings usage down to."""
    backend: Literal["redis_cluster", "mooncake"] = "redis_cluster"
    """Which store holds the remote tier."""
    deployment: str = Field(default="", pattern=r"^[A-Za-z0-9._-]{0,64}$")
    """Name prefix of every value in the remote store: daemons with the same deployment
    (and namespace, key and KV salt) share values; other deployments never collide.
    Required when the tier is enabled (no default: two unrelated deployments that both
    kept one would share names and overwrite each other's values)."""
    kinds: list[RemoteKind] = ["KV_BLOCK"]
    """Kinds of CACHE objects demoted to the remote tier instead of being dropped."""
    share: bool = True
    """Publish objects of ``kinds`` to the remote store as soon as they are written
    (write-behind), so other daemons of the deployment find them."""
    op_timeout_s: float = Field(default=2.0, gt=0, le=60)
    """Deadline of one remote operation (one batch) including retries (seconds)."""
    retries: int = Field(default=1, ge=0, le=5)
    """Retries of a failed idempotent operation (get, exists, delete) within its deadline."""
    breaker_failures: int = Field(default=3, ge=1)
    """Consecutive failed operations that open the circuit breaker (remote calls then
    fail at once, without I/O)."""
    breaker_open_s: float = Field(default=5.0, gt=0)
    """Seconds the breaker stays open before one probe is let through."""
    max_inflight: int = Field(default=8, ge=1, le=256)
    """Remote operations in flight at once; more fail at once (UNAVAILABLE)."""
    batch_max_objects: int = Field(default=128, ge=1, le=65_536)
    """Most objects in one remote batch (put, get, exists, delete)."""
    batch_max_bytes: ByteSize = ByteSize(64 * MiB)
    """Most value bytes in one remote get or put batch (bytes)."""
    read_parallel: int = Field(default=0, ge=0, le=64)
    """Parts one read of several objects is cut into, fetched at once (at most
    max_inflight): while one part is verified and stored here, the next ones are
    still on the wire. 0: the backend's own choice (4 for redis_cluster; 1 for
    mooncake, whose transfer engine already moves a batch's values in parallel, so
    that more parts only add master round trips)."""
    read_part_min_objects: int = Field(default=2, ge=1, le=65_536)
    """Fewest objects in one such part (a part is one remote batch)."""
    land_reads: bool = True
    """Shared-memory reads of objects only the remote store holds land each
    payload straight in its leased extent (Redis: received from the socket;
    Mooncake: transferred there, for values written with a fixed-size head);
    False: fetched into the backend's buffers and copied into the extent."""
    max_value_bytes: ByteSize = ByteSize(256 * MiB)
    """Largest object placed on the remote tier (bytes; Redis allows at most 512 MiB per
    value, Mooncake at most mooncake.local_buffer_bytes); larger ones are dropped instead."""
    publish_queue_bytes: ByteSize = ByteSize(256 * MiB)
    """Bytes of objects waiting to be published; puts beyond it wait as deferred keys
    (at most 65,536, then skipped and counted) and are queued as the writer makes room."""
    demote: Literal["instead_of_drop", "pays_back"] = "instead_of_drop"
    """When a CACHE object leaving the local tiers goes remote: whenever a remote read costs
    less than its miss ("instead_of_drop"), or only when this daemon's own expected reads
    pay back the upload within placement.horizon_s ("pays_back")."""
    redis: RedisClusterConfig = RedisClusterConfig()
    mooncake: MooncakeConfig = MooncakeConfig()

    @model_validator(mode="after")
    def _named_when_enabled(self) -> RemoteTierConfig:
        if self.enabled and not self.deployment:
            raise ValueError(
                "tiers.remote.deployment must be set when tiers.remote.enabled is true: "
                "daemons that share values must use the same name, and unrelated ones "
                "different names (e.g. TIERMEM_TIERS__REMOTE__DEPLOYMENT=prod-llama)"
            )
        return self


class TiersConfig(_Section):
    hbm: HbmConfig = HbmConfig()
    dram: DramConfig = DramConfig()
    ssd: SsdConfig = SsdConfig()
    remote: RemoteTierConfig = RemoteTierConfig()


class NamespaceLimits(_Section):
    """Per-namespace limits; 0 means unlimited. See ``LimitsConfig.namespace``."""

    max_bytes: ByteSize = ByteSize(0)
    """Quota: bytes of object values the namespace may hold (0 = unlimited)."""
    max_objects: int = Field(default=0, ge=0)
    """Quota: objects the namespace may hold (0 = unlimited)."""
    max_concurrent_rpcs: int = Field(default=0, ge=0)
    """RPCs of the namespace executing at once; beyond it RESOURCE_EXHAUSTED (0 = unlimited).
    Keep it below ``server.max_workers`` so one tenant cannot hold every RPC thread."""
    max_inflight_bytes: ByteSize = ByteSize(0)
    """Bytes of the namespace's puts in progress (announced sizes) (0 = unlimited)."""


class LimitsConfig(_Section):
    max_object_bytes: ByteSize = ByteSize(1 * GiB)
    """Largest object accepted by the object service (bytes)."""
    list_page_max: int = Field(default=1000, ge=1, le=100_000)
    """Most objects returned by one List page."""
    max_inflight_bytes: ByteSize = ByteSize(2 * GiB)
    """Process-wide budget of bytes held by requests in progress (bytes): the announced
    sizes of puts being received plus the buffers of values being read from SSD. A request
    that would exceed it gets RESOURCE_EXHAUSTED instead of the daemon running out of memory."""
    max_request_s: float = Field(default=300.0, gt=0)
    """Longest any RPC may run (seconds), whatever deadline the client set. Loops in long
    operations fail with DEADLINE_EXCEEDED past it; a stream that stalls is cancelled."""
    namespace: NamespaceLimits = NamespaceLimits()
    """Limits applied to every namespace without an entry in ``namespaces``."""
    namespaces: dict[str, NamespaceLimits] = {}
    """Per-namespace overrides of ``namespace``, keyed by namespace name."""

    @model_validator(mode="after")
    def _budget_fits_an_object(self) -> LimitsConfig:
        if self.max_inflight_bytes < self.max_object_bytes:
            raise ValueError("limits.max_inflight_bytes must be at least limits.max_object_bytes")
        _check_namespace_names(self.namespaces, "limits.namespaces")
        return self

    def for_namespace(self, name: str) -> NamespaceLimits:
        return self.namespaces.get(name, self.namespace)


def _check_namespace_names(names: Iterable[str], where: str, star: bool = False) -> None:
    """A namespace name in a config must be one the daemon accepts (``star``: "*"
    too, for "every namespace"); else the entry would silently never apply."""
    for name in names:
        if star and name == "*":
            continue
        try:
            validate_namespace(name)
        except InvalidArgument as exc:
            raise ValueError(f"{where}: {exc.message}") from None


Role = Literal["read", "write", "admin"]


class TokenConfig(_Section):
    """One bearer token and what it grants."""

    name: str
    """Who holds the token (shown in logs and metrics, never the token itself)."""
    token: SecretStr
    """The bearer token clients send as ``authorization: Bearer <token>``."""
    namespaces: list[str] = ["*"]
    """Namespaces the token grants; "*" grants every namespace."""
    roles: list[Role] = ["read", "write"]
    """read: get, stat, list; write: put, delete; admin: namespaces, fsck, every RPC."""

    @model_validator(mode="after")
    def _usable(self) -> TokenConfig:
        if not self.token.get_secret_value():
            raise ValueError(f"security.tokens: the token of {self.name!r} is empty")
        _check_namespace_names(self.namespaces, f"security.tokens ({self.name!r})", star=True)
        return self


class TlsConfig(_Section):
    cert_file: Path | None = None
    """PEM certificate chain of the server; with key_file, the TCP listener speaks TLS."""
    key_file: Path | None = None
    """PEM private key of the server certificate."""
    client_ca_file: Path | None = None
    """PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS)."""

    @model_validator(mode="after")
    def _pairs(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("security.tls.cert_file and key_file must be set together")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("security.tls.client_ca_file needs cert_file and key_file")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class SecurityConfig(_Section):
    tokens: list[TokenConfig] = []
    """Bearer tokens. Empty (the default) disables authentication: every caller may do
    everything, so only do that on a trusted host or behind the Unix socket."""
    tls: TlsConfig = TlsConfig()
    """TLS for the TCP listener (the Unix socket is protected by file permissions)."""

    @model_validator(mode="after")
    def _distinct_tokens(self) -> SecurityConfig:
        # a secret listed twice would silently take the grants of its last entry
        secrets = [t.token.get_secret_value() for t in self.tokens]
        if len(set(secrets)) != len(secrets):
            raise ValueError("security.tokens: two entries have the same token")
        names = [t.name for t in self.tokens]
        if len(set(names)) != len(names):
            raise ValueError("security.tokens: two entries have the same name")
        return self


class KvConfig(_Section):
    """Limits of the KV service (server/services/kv.py)."""

    max_block_bytes: ByteSize = ByteSize(64 * MiB)
    """Largest KV block accepted (bytes, as sent, before any codec)."""
    max_batch_blocks: int = Field(default=4096, ge=1, le=1_000_000)
    """Most blocks in one PutBlocks, GetBlocks or Prefetch call."""
    max_batch_bytes: ByteSize = ByteSize(512 * MiB)
    """Most bytes in one PutBlocks call (all blocks are staged before commit)."""
    max_chain_chunks: int = Field(default=65536, ge=1, le=10_000_000)
    """Longest chain one LookupPrefix call may ask about."""


class MetricsConfig(_Section):
    listen: str = "127.0.0.1:9464"
    """Prometheus HTTP listen address HOST:PORT; port 0 picks a free port; "" disables."""
    namespace_label_limit: int = Field(default=100, ge=1, le=10_000)
    """Namespaces exported with their own `namespace` label value (the first created);
    usage of the rest is summed under namespace="~other", keeping series bounded."""


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level."""
    json_format: bool = False
    """One JSON object per log line instead of plain text."""


class BackgroundConfig(_Section):
    migrate_interval_s: float = Field(default=0.5, gt=0)
    """Seconds between TTL expiry checks (tier rebalancing: ``placement.plan_interval_s``)."""
    compaction_interval_s: float = Field(default=10.0, gt=0)
    """Seconds between checks for segments worth compacting."""


class BulkChannelConfig(_Section):
    enabled: bool = True
    """Run the bulk TCP channel (clients on other hosts move large values over it)."""
    host: str = "127.0.0.1"
    """Address the bulk channel listens on."""
    port: int = Field(default=0, ge=0, le=65535)
    """TCP port of the bulk channel; 0 picks a free port (clients learn it from Hello)."""
    advertise_host: str = ""
    """Host name clients are told to connect to; "" = ``host``."""
    ticket_ttl_s: float = Field(default=30.0, gt=0, le=3600)
    """Seconds a ticket stays valid before its transfer must start."""
    max_tickets: int = Field(default=4096, ge=1)
    """Tickets outstanding at once; beyond this BeginPut/BeginGet get RESOURCE_EXHAUSTED."""
    max_connections: int = Field(default=256, ge=1)
    """Bulk connections served at once; more are refused."""
    io_timeout_s: float = Field(default=30.0, gt=0)
    """A connection that sends or accepts nothing for this long is cut (the transfer fails)."""
    min_send_bytes_per_s: ByteSize = ByteSize(1 * MiB)
    """Slowest a client may read a reply (bytes per second; 0 = no limit). A whole
    reply (a get's values, a blob's stream out) must leave within
    ``max(io_timeout_s, its bytes / this)``, counted from its second send (the
    first is bounded by ``io_timeout_s``, as each send is); a client that keeps
    reading a trickle is cut off then, freeing its connection
    (``max_connections``) and what the reply holds. Checked between sends, so
    the cut can come up to ``io_timeout_s`` later. Values sent by sendfile
    (``sendfile``) are bounded the same way."""
    idle_timeout_s: float = Field(default=120.0, gt=0)
    """A connection with no transfer for this long is closed (clients reconnect)."""
    sessions: bool = True
    """Offer bulk sessions: a client authenticates once per connection and then
    sends framed put/get requests on it without a gRPC call each (they expire
    after ``idle_timeout_s`` without a request)."""
    send_buffer_bytes: ByteSize = ByteSize(2 * MiB)
    """SO_SNDBUF of bulk connections (bytes; the kernel doubles it and may cap it).
    On loopback TCP here (2-core EPYC, 2 MiB L2 per core), interleaved A/B of 1, 2
    and 4 MiB: 4 MiB moved 32 MiB values 15-25% slower than 1 or 2 MiB, and 1 MiB
    slowed gets sent by sendfile (``docs/benchmarks.md``, 2026-12-02)."""
    receive_buffer_bytes: ByteSize = ByteSize(4 * MiB)
    """SO_RCVBUF of bulk connections (bytes; the kernel doubles it and may cap it)."""
    sendfile: bool = False
    """Send a get's values of 1 MiB and more that lie in the DRAM arena with
    sendfile(2) from the arena's file instead of ``sendall`` of the mapping. It
    was faster when added (32 MiB in 10.5 against 13.9 ms); on this host's
    current kernel (6.18) it mostly loses: in 24 interleaved pairs of 32 MiB and
    4 MiB gets over TCP (seven A/B runs, 2026-12-02) ``sendall`` was faster in
    19, by up to 42% of the time, and sendfile in 5, by at most 10%. Measure on
    your host before turning it on."""
    unix: bool = True
    """Also serve the channel on an abstract Unix socket (Linux; a random name offered
    in Hello) to clients on this host: the same framing, credentials and limits, at
    about half TCP's cost per message on loopback. Reachable by processes in the
    daemon's network namespace, as the TCP port on 127.0.0.1 is."""


class DataPlaneConfig(_Section):
    shm_enabled: bool = True
    """Offer the shared-memory path (clients on this host map the DRAM arena)."""
    lease_ttl_s: float = Field(default=30.0, gt=0)
    """Default lifetime of a shared-memory lease (seconds) when the client asks for none."""
    max_lease_ttl_s: float = Field(default=600.0, gt=0)
    """Longest lease a client may ask for (seconds)."""
    max_leases: int = Field(default=65536, ge=1)
    """Shared-memory leases outstanding at once; beyond this RESOURCE_EXHAUSTED."""
    max_batch_objects: int = Field(default=1024, ge=1, le=65536)
    """Objects in one Reserve, Lease, BeginPut or BeginGet request."""
    max_pending_bytes: ByteSize = ByteSize(1 * GiB)
    """Bytes held at once by uncommitted reservations, staging copies and tickets."""
    inline_max_bytes: ByteSize = ByteSize(64 * 1024)
    """Values up to this size are returned inside Lease/BeginGet replies, not by lease or TCP."""
    bulk: BulkChannelConfig = BulkChannelConfig()

    @model_validator(mode="after")
    def _ttls_ordered(self) -> DataPlaneConfig:
        if self.lease_ttl_s > self.max_lease_ttl_s:
            raise ValueError("dataplane.lease_ttl_s must not exceed max_lease_ttl_s")
        return self


# -- agent memory: sessions, scratchpad, operators (issue 7) -----------------------------
class SessionsConfig(_Section):
    max_result_bytes: ByteSize = ByteSize(1024)
    """Largest result record a closing session may hand its parent (bytes)."""
    max_depth: int = Field(default=16, ge=1, le=1024)
    """Deepest allowed session tree (a root is depth 0)."""
    max_open: int = Field(default=100_000, ge=1)
    """Most sessions open at once; Open beyond this is RESOURCE_EXHAUSTED."""
    reap_interval_s: float = Field(default=0.5, gt=0)
    """Seconds between checks for sessions past their TTL or lease."""
    max_grants: int = Field(default=64, ge=0)
    """Most read-only grants one session may hold."""


class ScratchConfig(_Section):
    mode: Literal["write_back", "write_through"] = "write_back"
    """write_back: buffer and flush in batches. write_through: every record is written,
    synced and indexed on its own (the baseline the write-back is measured against)."""
    flush_records: int = Field(default=4096, ge=1)
    """Flush once this many records are buffered."""
    flush_bytes: ByteSize = ByteSize(4 * MiB)
    """Flush once the buffered records hold this many payload bytes."""
    flush_interval_s: float = Field(default=1.0, gt=0)
    """Timer: flush buffered records at least this often (seconds)."""
    flush_on_session_close: bool = False
    """Flush when a child session closes, so its result record is in RocksDB and searchable
    at once. Costs one write batch per close; the LOGGED result survives a crash either way."""
    max_buffer_bytes: ByteSize = ByteSize(64 * MiB)
    """Hard limit of the DRAM buffer; appends wait for a flush beyond it (bytes)."""
    flush_thread_nice: int = Field(default=10, ge=0, le=19)
    """How much the flush thread's nice value is raised above the daemon's (Linux; 0:
    not at all). Embedding a flushed batch needs a core for as long as it takes; at
    a lower priority it gets the cores the request handlers leave idle instead of
    queueing them. Under full CPU load flushes then lag, the buffer grows, and
    appends wait at ``max_buffer_bytes``."""
    buffered_window_ms: int = Field(default=100, ge=1, le=60_000)
    """BUFFERED records reach the log within this window; a crash loses at most it (ms)."""
    log_fsync_interval_ms: int = Field(default=50, ge=1, le=60_000)
    """LOGGED records are fsynced in groups this often (ms); SYNC records wait for one."""
    compression: Literal["zstd", "zlib", "none"] = "zstd"
    """Codec of flushed batches (zstd falls back to zlib if zstandard is missing)."""
    max_record_bytes: ByteSize = ByteSize(256 * 1024)
    """Largest payload of one record (bytes)."""
    max_tags: int = Field(default=32, ge=0)
    """Most tags on one record."""
    embedder: Literal["auto", "hash", "minilm"] = "auto"
    """Memory-index embedder: all-MiniLM-L6-v2 when installed ("auto"), or hashed n-grams."""
    replay_page_records: int = Field(default=512, ge=1, le=100_000)
    """Records per Replay response message."""


class OperatorsConfig(_Section):
    workers: int = Field(default=4, ge=1, le=256)
    """Threads running operator calls; calls beyond them wait, then time out."""
    default_timeout_s: float = Field(default=5.0, gt=0)
    """Time limit of a call that names none (seconds)."""
    max_timeout_s: float = Field(default=60.0, gt=0)
    """Largest time limit a call may ask for (seconds)."""
    max_args_bytes: ByteSize = ByteSize(8 * MiB)
    """Largest JSON argument document (bytes)."""
    max_result_bytes: ByteSize = ByteSize(8 * MiB)
    """Largest JSON result (bytes)."""
    max_graph_edges: int = Field(default=2_000_000, ge=1)
    """Most edges graph.shortest_path accepts: bounds its memory."""
    max_grid_cells: int = Field(default=4_000_000, ge=1)
    """Most cells grid.shortest_path accepts: bounds its memory."""
    entry_points: bool = True
    """Load third-party operators from the entry-point group "tiermem.operators"."""


class AgentConfig(_Section):
    sessions: SessionsConfig = SessionsConfig()
    scratch: ScratchConfig = ScratchConfig()
    operators: OperatorsConfig = OperatorsConfig()


# -- placement (issue 3) -------------------------------------------------------------
class TierCostConfig(_Section):
    latency_s: float = Field(ge=0)
    """Time to first byte of one read from the tier (seconds)."""
    bandwidth_bytes_per_s: float = Field(gt=0)
    """Sustained read bandwidth from the tier to its consumer (bytes/s)."""
    price_per_gib_hour: float = Field(ge=0)
    """What one GiB held on the tier costs per hour (USD): priced in `tiermem cost` (the
    Stats cost report) and ``tiermem_cost_usd_per_hour``. Placement does not weigh it,
    on any tier: the planner minimises access time (latency and bandwidth)."""


class TierCostsConfig(_Section):
    hbm: TierCostConfig = TierCostConfig(
        latency_s=2e-6, bandwidth_bytes_per_s=1.0e12, price_per_gib_hour=0.04
    )
    """HBM read in place by the GPU; an 80 GB accelerator at about $3/h."""
    dram: TierCostConfig = TierCostConfig(
        latency_s=5e-6, bandwidth_bytes_per_s=20e9, price_per_gib_hour=0.004
    )
    """Host memory, over PCIe 4.0 x16 to the GPU or memcpy to the CPU."""
    ssd: TierCostConfig = TierCostConfig(
        latency_s=100e-6, bandwidth_bytes_per_s=3e9, price_per_gib_hour=0.00012
    )
    """A datacentre NVMe SSD at about $0.08/GB-month."""
    remote: TierCostConfig = TierCostConfig(
        latency_s=2e-3, bandwidth_bytes_per_s=1.25e9, price_per_gib_hour=0.00003
    )
    """A remote store over 10 GbE at object-storage prices."""


class QuotaConfig(_Section):
    namespace: str
    """Namespace the quota applies to."""
    tier: Literal["hbm", "dram"]
    """Memory tier the quota limits."""
    max_bytes: ByteSize
    """Most bytes of the namespace the planner keeps on that tier."""


class PlacementConfig(_Section):
    plan_interval_s: float = Field(default=1.0, gt=0)
    """Seconds between rebalancing plans (woken early by put pressure and prefetches)."""
    plan_cpu_fraction: float = Field(default=0.05, gt=0, le=1)
    """Most of one core rebalancing may use: when a plan takes ``p`` seconds (a plan
    reads the whole catalog: ~0.25 s at a million objects on one core), the next
    periodic plan waits at least ``p / plan_cpu_fraction`` seconds."""
    migrate_bandwidth_bytes_per_s: ByteSize = ByteSize(512 * MiB)
    """Bytes per second the background migrator may copy between tiers."""
    rate_half_life_s: float = Field(default=40.0, gt=0)
    """Half-life of an access in the decayed access-rate estimate (seconds)."""
    session_rate_half_life_s: float = Field(default=10.0, gt=0)
    """The same for KV blocks of a session (read once per turn, worthless once the
    session ends), seconds."""
    horizon_s: float = Field(default=30.0, gt=0)
    """A move must pay back its copy cost in saved access time within this time (s)."""
    keep_horizon_s: float = Field(default=300.0, gt=0)
    """A CACHE object leaving memory gets an SSD copy (rather than being dropped) if
    that copy pays back its write in recomputes avoided within this time (s)."""
    hysteresis: float = Field(default=0.25, ge=0)
    """A challenger must beat a resident's benefit density by this fraction to displace it."""
    promote_on_read: bool = True
    """Promote an object read from a slower tier right away when the planner says so."""
    max_keys_per_request: int = Field(default=1000, ge=1, le=100_000)
    """Most keys one Prefetch, Pin or Unpin call may name."""
    recent_keys: int = Field(default=100_000, ge=0)
    """Keys of recently read SSD-served objects remembered for promotion (entries)."""
    top_sessions: int = Field(default=20, ge=0, le=1000)
    """Sessions listed in the cost report (the most expensive first)."""
    quotas: list[QuotaConfig] = []
    """Per-namespace byte limits on memory tiers the planner respects."""
    costs: TierCostsConfig = TierCostsConfig()
    """Latency, bandwidth and price of each tier (the cost model)."""


class BlobsConfig(_Section):
    """The blob store (``server/blobs``): content-addressed payloads, LanceDB
    search tables, resumable uploads, the DRAM hot cache."""

    enabled: bool = True
    """Serve BlobService."""
    lance_uri: str = ""
    """Where the LanceDB tables live: a directory, or ``s3://bucket/prefix``
    ("" = ``<data_dir>/blobs/lance``)."""
    storage_options: dict[str, str] = {}
    """Object-store options passed to LanceDB for an ``s3://`` URI (endpoint,
    region, aws_access_key_id, aws_secret_access_key, allow_http ...)."""
    payload_store: Literal["auto", "files", "lance"] = "auto"
    """Where content bytes go: ``files`` (one file per content under
    ``<data_dir>/blobs/payloads``), ``lance`` (a blob column of the LanceDB
    ``contents`` table), ``auto`` (files for a local URI, lance for s3://)."""
    max_blob_bytes: ByteSize = ByteSize(16 * GiB)
    """Largest blob accepted (bytes)."""
    max_stored_bytes: ByteSize = ByteSize(256 * GiB)
    """Limit on stored content bytes plus the sizes of uploads in progress (bytes)."""
    inline_max_bytes: ByteSize = ByteSize(64 * 1024)
    """Contents up to this size are kept in RocksDB, not in the payload store (bytes)."""
    inline_upload_max_bytes: ByteSize = ByteSize(4 * MiB)
    """A BeginUpload may carry a whole blob up to this size (one call; bytes)."""
    block_bytes: ByteSize = ByteSize(1 * MiB)
    """Checksum block (xxh3-64 each): a range read verifies the blocks it touches (bytes)."""
    read_unit_bytes: ByteSize = ByteSize(8 * MiB)
    """Bytes read from a payload per call while serving a download (whole blocks)."""
    read_threads: int = Field(default=2, ge=1, le=64)
    """Threads that read and verify one long download from a payload file at once
    (a read unit each: the checks of one unit overlap the read of the next; 2
    measured as good as 1 or 4 on an idle machine here, and best under load)."""
    local_file_reads: bool = True
    """Let clients on this host read a cold blob's payload file themselves (they
    ask with the "file" path, open it with their own permissions and check every
    block): one copy instead of two; off: such reads go through shared memory."""
    checkpoint_bytes: ByteSize = ByteSize(64 * MiB)
    """An upload is fsynced and its acknowledged offset recorded this often (bytes)."""
    upload_ttl_s: float = Field(default=86_400.0, gt=0)
    """An upload idle this long is forgotten with its bytes (seconds)."""
    max_uploads: int = Field(default=1024, ge=1)
    """Uploads in progress at once."""
    max_tags: int = Field(default=32, ge=0, le=1024)
    """Tags per blob."""
    max_tag_bytes: int = Field(default=128, ge=1, le=4096)
    """Bytes per tag."""
    max_embeddings: int = Field(default=8, ge=0, le=64)
    """Embeddings (spaces) per blob."""
    max_dimension: int = Field(default=4096, ge=1, le=65_536)
    """Largest embedding dimension."""
    max_spaces: int = Field(default=64, ge=1, le=1024)
    """Embedding spaces (one LanceDB table each)."""
    max_k: int = Field(default=1000, ge=1, le=100_000)
    """Most hits one SearchBlobs returns."""
    text_embedder: Literal["auto", "minilm", "hash", "off"] = "auto"
    """Embedder for text blobs (text/*, JSON, XML) the client sent no embedding for,
    and for text queries: all-MiniLM-L6-v2 when installed ("auto"; extra ``embed``),
    required ("minilm"), hashed n-grams ("hash") or none ("off": clients send
    embeddings). See server/blobs/embedder.py."""
    text_embed_max_bytes: ByteSize = ByteSize(8 * 1024)
    """Bytes of a text blob's start that are embedded."""
    cache_enabled: bool = True
    """Keep hot blobs in the DRAM tier (placed by the placement policy)."""
    cache_min_reads: int = Field(default=2, ge=1)
    """Reads of a content before it may be cached (one read proves nothing)."""
    cache_min_bytes: ByteSize = ByteSize(64 * 1024)
    """Smaller blobs are not cached (reading them from SSD is cheap) (bytes)."""
    cache_max_bytes: ByteSize = ByteSize(512 * MiB)
    """Larger blobs are not cached; also at most half the DRAM tier (bytes)."""
    index_interval_s: float = Field(default=0.5, gt=0)
    """How often pending changes are written to the LanceDB search tables (seconds)."""
    maintain_interval_s: float = Field(default=5.0, gt=0)
    """How often idle uploads are reaped and LanceDB tables optimized (seconds)."""
    optimize_after_changes: int = Field(default=1000, ge=1)
    """Changes to the LanceDB tables between two optimize passes."""

    @model_validator(mode="after")
    def _sizes(self) -> BlobsConfig:
        block = int(self.block_bytes)
        if block < 4096 or block > 64 * MiB or block & (block - 1):
            raise ValueError("blobs.block_bytes must be a power of two in 4 KiB..64 MiB")
        if self.checkpoint_bytes < self.block_bytes:
            raise ValueError("blobs.checkpoint_bytes must be at least blobs.block_bytes")
        return self


class VectorsConfig(_Section):
    """Vector collections (server/vectors): limits, index defaults, durability, tiering."""

    enabled: bool = True
    """Serve the VectorService."""
    dram_budget_bytes: ByteSize = ByteSize(1 * GiB)
    """Memory loaded collections may hold together (bytes); least recently used ones are
    unloaded to SSD beyond it."""
    idle_unload_s: float = Field(default=900.0, ge=0)
    """Unload a collection not used for this many seconds (0 = never for idleness)."""
    use_gpu: bool = True
    """Search FLAT/IVF_PQ collections on the GPU when faiss sees one and the HBM tier is on."""
    mmap_load: bool = True
    """Memory-map snapshot files on load where the index type allows (FLAT, HNSW)."""
    fsync: bool = True
    """Sync the operation log (RocksDB WAL) before acknowledging an upsert or delete."""
    max_collections: int = Field(default=10_000, ge=1)
    """Most collections the daemon holds (all namespaces)."""
    max_dimension: int = Field(default=4096, ge=1, le=65_536)
    """Largest vector dimension a collection may have."""
    max_k: int = Field(default=1024, ge=1, le=100_000)
    """Largest k a search may ask for."""
    max_batch_vectors: int = Field(default=65_536, ge=1)
    """Most vectors (or queries, or ids) in one upsert, delete or search request."""
    max_payload_bytes: int = Field(default=4096, ge=64)
    """Largest serialized payload of one vector (bytes)."""
    max_payload_fields: int = Field(default=32, ge=1)
    """Most fields in one vector's payload."""
    max_filter_conditions: int = Field(default=16, ge=1)
    """Most conditions in one search filter."""
    snapshot_ops: int = Field(default=50_000, ge=1)
    """Snapshot a loaded collection once this many vectors were upserted or deleted since
    its last snapshot (bounds log replay at load and recovery)."""
    snapshot_interval_s: float = Field(default=60.0, gt=0)
    """Snapshot a collection with any unsnapshotted operation this long after its last."""
    compact_dead_ratio: float = Field(default=0.2, gt=0, lt=1)
    """Rebuild an index (drop tombstones) once this fraction of its entries is deleted."""
    hnsw_m: int = Field(default=32, ge=4, le=128)
    """HNSW graph degree (neighbours per node)."""
    hnsw_ef_construction: int = Field(default=80, ge=8, le=4096)
    """HNSW build-time candidate list size (higher: better graph, slower build)."""
    hnsw_ef_search: int = Field(default=64, ge=1, le=4096)
    """HNSW search-time candidate list size (raised to k when smaller)."""
    ivf_nprobe: int = Field(default=16, ge=1)
    """Inverted lists an IVF_PQ search visits."""
    pq_nbits: int = Field(default=8, ge=4, le=8)
    """Bits per product-quantiser code."""
    ivf_train_min_vectors: int = Field(default=10_000, ge=256)
    """An IVF_PQ collection serves exact (FLAT) search until it holds this many vectors,
    then trains its quantisers on them."""
    auto_hnsw_min_vectors: int = Field(default=20_000, ge=1)
    """AUTO collections switch from FLAT to HNSW at this many vectors."""
    auto_ivf_pq_min_vectors: int = Field(default=5_000_000, ge=1)
    """AUTO collections switch from HNSW to IVF_PQ at this many vectors."""
    maintain_interval_s: float = Field(default=1.0, gt=0)
    """Seconds between maintenance passes (snapshots, compaction, index upgrades, unloads)."""


class FaultsConfig(_Section):
    """Fault injection for crash testing; never enable in production."""

    kill_points: list[str] = []
    """Named points (see ``server/faults.py``) where the daemon may SIGKILL itself."""
    kill_probability: float = Field(default=0.0, ge=0, le=1)
    """Chance that reaching a listed point kills the daemon."""
    seed: int = 0
    """Seed of the kill decisions (0 = random)."""
    arm_file: str = ""
    """If set, points fire only while this file exists (a test arms them after its checks)."""


class Config(BaseSettings):
    """The daemon's whole configuration."""

    model_config = SettingsConfigDict(
        env_prefix="TIERMEM_",
        env_nested_delimiter="__",
        extra="forbid",
        use_attribute_docstrings=True,
    )

    data_dir: Path = Path("./tiermem-data")
    """Directory for RocksDB, segment files and other durable state."""
    namespaces: list[str] = ["default"]
    """Namespaces created at start if missing (more via `tiermem ns create`)."""

    @model_validator(mode="after")
    def _namespace_names(self) -> Config:
        _check_namespace_names(self.namespaces, "namespaces")
        return self

    server: ServerConfig = ServerConfig()
    tiers: TiersConfig = TiersConfig()
    limits: LimitsConfig = LimitsConfig()
    kv: KvConfig = KvConfig()
    metrics: MetricsConfig = MetricsConfig()
    logging: LoggingConfig = LoggingConfig()
    background: BackgroundConfig = BackgroundConfig()
    dataplane: DataPlaneConfig = DataPlaneConfig()
    agent: AgentConfig = AgentConfig()
    """Sessions, scratchpad write-back and operators."""
    placement: PlacementConfig = PlacementConfig()
    vectors: VectorsConfig = VectorsConfig()
    blobs: BlobsConfig = BlobsConfig()
    security: SecurityConfig = SecurityConfig()
    faults: FaultsConfig = FaultsConfig()


def load_config(path: Path | None = None, **overrides: Any) -> Config:
    """Build the config from overrides > environment > TOML file > defaults.

    ``overrides`` use the field names of :class:`Config` (nested as dicts).
    Raises ``pydantic.ValidationError`` (with the offending field) on bad values.
    """

    class _Sourced(Config):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
            if path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            return tuple(sources)

    if path is not None and not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    loaded = _Sourced(**overrides)
    return Config.model_validate(loaded.model_dump())
