"""Typed daemon configuration: one place, every field documented with its unit.

Sources, highest priority first: explicit overrides (CLI flags), ``TIERMEM_*``
environment variables (nested with ``__``, e.g. ``TIERMEM_TIERS__DRAM__CAPACITY_BYTES``),
a TOML file, then the defaults below. Sizes accept integers or strings such as
``"512MiB"``. Nothing is read at import time: call :func:`load_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, model_validator
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


class LimitsConfig(_Section):
    max_object_bytes: ByteSize = ByteSize(1 * GiB)
    """Largest object accepted by the object service (bytes)."""
    list_page_max: int = Field(default=1000, ge=1, le=100_000)
    """Most objects returned by one List page."""


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
    vectors: VectorsConfig = VectorsConfig()


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
