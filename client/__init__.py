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
    "ChecksumError",
    "Client",
    "CollectionInfo",
    "Condition",
    "Durability",
    "IndexParams",
    "IndexType",
    "InvalidArgumentError",
    "Kind",
    "Metric",
    "NotFoundError",
    "ObjectInfo",
    "ObjectRef",
    "Op",
    "Payload",
    "PermissionDeniedError",
    "Precision",
    "Profile",
    "SearchResults",
    "Stats",
    "Tier",
    "TierStats",
    "TiermemClientError",
    "UnavailableError",
    "VectorClient",
]
