"""Typed daemon configuration: one place, every field documented with its unit.

Sources, highest priority first: explicit overrides (CLI flags), ``TIERMEM_*``
environment variables (nested with ``__``, e.g. ``TIERMEM_TIERS__DRAM__CAPACITY_BYTES``),
a TOML file, then the defaults below. Sizes accept integers or strings such as
``"512MiB"``. Nothing is read at import time: call :func:`load_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

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
    fsync: bool = True
    """fsync segment data and sync the RocksDB WAL before acknowledging DURABLE writes."""


class TiersConfig(_Section):
    hbm: HbmConfig = HbmConfig()
    dram: DramConfig = DramConfig()
    ssd: SsdConfig = SsdConfig()


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
        return self

    def for_namespace(self, name: str) -> NamespaceLimits:
        return self.namespaces.get(name, self.namespace)


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


class MetricsConfig(_Section):
    listen: str = "127.0.0.1:9464"
    """Prometheus HTTP listen address HOST:PORT; port 0 picks a free port; "" disables."""


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level."""
    json_format: bool = False
    """One JSON object per log line instead of plain text."""


class BackgroundConfig(_Section):
    migrate_interval_s: float = Field(default=0.5, gt=0)
    """Seconds between checks of tier watermarks (demotion) and TTL expiry."""
    compaction_interval_s: float = Field(default=10.0, gt=0)
    """Seconds between checks for segments worth compacting."""


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
    server: ServerConfig = ServerConfig()
    tiers: TiersConfig = TiersConfig()
    limits: LimitsConfig = LimitsConfig()
    metrics: MetricsConfig = MetricsConfig()
    logging: LoggingConfig = LoggingConfig()
    background: BackgroundConfig = BackgroundConfig()
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
