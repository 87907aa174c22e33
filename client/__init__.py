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
from tiermem.client.sync import Client
from tiermem.client.types import (
    AccessHint,
    Durability,
    Kind,
    ObjectInfo,
    Precision,
    Profile,
    Stats,
    Tier,
    TierStats,
)

__all__ = [
    "AccessHint",
    "AlreadyExistsError",
    "AsyncClient",
    "CapacityError",
    "ChecksumError",
    "Client",
    "Durability",
    "FetchedBlock",
    "InvalidArgumentError",
    "Kind",
    "KvBlock",
    "KvClient",
    "KvScope",
    "NotFoundError",
    "ObjectInfo",
    "PermissionDeniedError",
    "Precision",
    "PrefixHit",
    "Profile",
    "Stats",
    "StoredBlock",
    "Tier",
    "TierStats",
    "TiermemClientError",
    "UnavailableError",
]
