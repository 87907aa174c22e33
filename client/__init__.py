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
from tiermem.client.placement import PlacementClient
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
    "CostLine",
    "CostReport",
    "Durability",
    "InvalidArgumentError",
    "Kind",
    "NotFoundError",
    "ObjectInfo",
    "PermissionDeniedError",
    "PlacementClient",
    "Precision",
    "PrefetchResult",
    "Profile",
    "Stats",
    "Tier",
    "TierCost",
    "TierStats",
    "TiermemClientError",
    "UnavailableError",
]
