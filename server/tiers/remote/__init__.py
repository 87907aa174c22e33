"""The remote tier: objects in a store shared by several daemons (Redis Cluster
or Mooncake Store), behind the placement policy (docs/architecture.md, "Remote
tier")."""

from tiermem.server.tiers.remote.base import RemoteBackend, RemoteError
from tiermem.server.tiers.remote.codec import RemoteValue, remote_name
from tiermem.server.tiers.remote.engine import RemoteTier, make_backend

__all__ = [
    "RemoteBackend",
    "RemoteError",
    "RemoteTier",
    "RemoteValue",
    "make_backend",
    "remote_name",
]
