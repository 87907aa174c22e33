"""tiermem client: sync and asyncio clients for the tiermem daemon.

Light dependencies only (grpcio, protobuf, numpy); torch is used if installed
(``put_tensor`` / ``get_tensor``), xxhash if installed (faster checksums).
This package never imports server code.
"""

from tiermem.client.aio import AsyncClient
from tiermem.client.errors import (
    AlreadyExistsError,
    CapacityError,
    ChecksumError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    TiermemClientError,
    UnavailableError,
)
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

__all__ = [
    "AccessHint",
    "AlreadyExistsError",
    "AsyncClient",
    "CapacityError",
    "ChecksumError",
    "Client",
    "CloseResult",
    "CostLine",
    "CostReport",
    "Durability",
    "FetchedBlock",
    "Grant",
    "InvalidArgumentError",
    "Kind",
    "KvBlock",
    "KvClient",
    "KvScope",
    "LedgerEntry",
    "NewRecord",
    "NotFoundError",
    "ObjectInfo",
    "OperatorInfo",
    "PermissionDeniedError",
    "PlacementClient",
    "Precision",
    "PrefetchResult",
    "PrefixHit",
    "Profile",
    "RecordDurability",
    "RecordKind",
    "ScratchRecord",
    "SessionInfo",
    "Stats",
    "StoredBlock",
    "Tier",
    "TierCost",
    "TierStats",
    "TiermemClientError",
    "UnavailableError",
]
