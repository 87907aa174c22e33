"""tiermem client: sync and asyncio clients for the tiermem daemon.

Light dependencies only (grpcio, protobuf, numpy); torch is used if installed
(``put_tensor`` / ``get_tensor``), xxhash if installed (faster checksums).
This package never imports server code.
"""

from tiermem.client._transport import TlsOptions
from tiermem.client.aio import AsyncClient
from tiermem.client.errors import (
    AlreadyExistsError,
    CapacityError,
    ChecksumError,
    DeadlineError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    TiermemClientError,
    UnavailableError,
)
from tiermem.client.integrity import CheckResult, DamagedObject
from tiermem.client.kv import FetchedBlock, KvBlock, KvClient, KvScope, PrefixHit, StoredBlock
from tiermem.client.operators import OperatorInfo
from tiermem.client.placement import PlacementClient
from tiermem.client.scratch import NewRecord, RecordDurability, RecordKind, ScratchRecord
from tiermem.client.sessions import CloseResult, Grant, LedgerEntry, SessionInfo
from tiermem.client.sync import Client
from tiermem.client.types import (
    AccessHint,
    CostLine,
    CostReport,
    Durability,
    Kind,
    ObjectInfo,
    Precision,
    PrefetchResult,
    Profile,
    Stats,
    Tier,
    TierCost,
    TierStats,
)
from tiermem.client.vectors import (
    CollectionInfo,
    Condition,
    IndexParams,
    IndexType,
    Metric,
    ObjectRef,
    Op,
    Payload,
    SearchResults,
    VectorClient,
)

__all__ = [
    "AccessHint",
    "AlreadyExistsError",
    "AsyncClient",
    "CapacityError",
    "CheckResult",
    "ChecksumError",
    "Client",
    "CloseResult",
    "CollectionInfo",
    "Condition",
    "CostLine",
    "CostReport",
    "DamagedObject",
    "DeadlineError",
    "Durability",
    "FetchedBlock",
    "Grant",
    "IndexParams",
    "IndexType",
    "InvalidArgumentError",
    "Kind",
    "KvBlock",
    "KvClient",
    "KvScope",
    "LedgerEntry",
    "Metric",
    "NewRecord",
    "NotFoundError",
    "ObjectInfo",
    "ObjectRef",
    "Op",
    "OperatorInfo",
    "Payload",
    "PermissionDeniedError",
    "PlacementClient",
    "Precision",
    "PrefetchResult",
    "PrefixHit",
    "Profile",
    "RecordDurability",
    "RecordKind",
    "ScratchRecord",
    "SearchResults",
    "SessionInfo",
    "Stats",
    "StoredBlock",
    "Tier",
    "TierCost",
    "TierStats",
    "TiermemClientError",
    "TlsOptions",
    "UnavailableError",
    "VectorClient",
]
