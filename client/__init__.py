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
    "CheckResult",
    "ChecksumError",
    "Client",
    "DamagedObject",
    "DeadlineError",
    "Durability",
    "InvalidArgumentError",
    "Kind",
    "NotFoundError",
    "ObjectInfo",
    "PermissionDeniedError",
    "Precision",
    "Profile",
    "Stats",
    "Tier",
    "TierStats",
    "TiermemClientError",
    "TlsOptions",
    "UnavailableError",
]
